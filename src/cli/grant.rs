//! `pi-conform grant`: mint a capability handle, add its grant to the grants file, print the
//! descriptor.

use std::io::Write;
use std::path::PathBuf;

use super::EXIT_OK;

#[derive(clap::Args)]
pub struct Args {
    /// Grants file (created 0600 if absent).
    #[arg(long, value_name = "FILE")]
    grants: PathBuf,
    /// The adapter's socket path (the descriptor's endpoint).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Root directory the binding is confined to (the session cwd).
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// The daemon's hostInstanceId (from its handshake).
    #[arg(long, value_name = "ID")]
    host_instance: String,
    /// The session id.
    #[arg(long, value_name = "ID")]
    session: String,
    /// The session generation.
    #[arg(long)]
    generation: u64,
    /// Operations to grant, in order (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")]
    operations: Vec<String>,
    /// Limit: largest daemon → adapter line in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    max_request_bytes: u64,
    /// Limit: largest adapter → daemon line in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    max_response_bytes: u64,
    /// Limit: requests executing at once.
    #[arg(long, default_value_t = 4)]
    max_concurrent_requests: u64,
    /// Limit: requests waiting beyond those.
    #[arg(long, default_value_t = 16)]
    max_queued_requests: u64,
    /// Limit: per-request timeout in ms.
    #[arg(long, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// Limit: idempotency keys retained.
    #[arg(long, default_value_t = 256)]
    max_idempotency_keys: u64,
    /// Limit: idempotency retention in ms.
    #[arg(long, default_value_t = 3_600_000)]
    idempotency_ttl_ms: u64,
    /// adapterId of the adapter.
    #[arg(long, default_value = "pi-conform-reference")]
    adapter_id: String,
    /// adapterVersion of the adapter.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    adapter_version: String,
    /// Write the descriptor here (mode 0600) instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `grant`: mint a handle, record its grant, print the descriptor.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args {
        grants,
        socket,
        root,
        host_instance: host_instance_id,
        session: session_id,
        generation,
        operations,
        max_request_bytes,
        max_response_bytes,
        max_concurrent_requests,
        max_queued_requests,
        request_timeout_ms,
        max_idempotency_keys,
        idempotency_ttl_ms,
        adapter_id,
        adapter_version,
        output,
    } = args;
    let limits = [
        max_request_bytes,
        max_response_bytes,
        max_concurrent_requests,
        max_queued_requests,
        request_timeout_ms,
        max_idempotency_keys,
        idempotency_ttl_ms,
    ];
    let operations = operations
        .iter()
        .map(|o| o.trim().parse().map_err(|_| anyhow::anyhow!("unknown operation {o:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A zero `maxConcurrentRequests` or `maxIdempotencyKeys` is refused here, typed.
    let limits = pi_conform::adapter::grants::grant_limits(limits)?;
    let req = pi_conform::adapter::grants::GrantRequest {
        socket,
        root,
        host_instance_id,
        session_id,
        generation,
        operations,
        limits,
        adapter_id,
        adapter_version,
    };
    let descriptor = pi_conform::adapter::grants::grant(&grants, &req)?;
    let text = serde_json::to_vec_pretty(&descriptor)?;
    match output {
        Some(path) => pi_conform::adapter::grants::write_atomic(&path, &text)?,
        None => {
            // The descriptor is the only copy of the handle: losing it (a closed pipe) is an
            // error, not a quiet end.
            let mut out = std::io::stdout().lock();
            out.write_all(&text).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()).map_err(|e| {
                anyhow::anyhow!(
                    "cannot write the descriptor to standard output ({e}); the grant is recorded in {} but its \
                     handle is lost: mint another, or write it with --output FILE",
                    grants.display()
                )
            })?;
        }
    }
    Ok(EXIT_OK)
}

//! The reference adapter started in-process on a private temporary socket with a freshly
//! minted grant: what `pi-conform selftest` checks, and what the kill matrix breaks.
//!
//! The kill matrix ([`super::killmatrix`]) runs the adapter suite against it once per fault
//! switch.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::adapter::Target;
use crate::adapter::faults::Faults;
use crate::adapter::grants::{grant, mint_handle, write_atomic, GrantRequest, GrantsFile, MINTED_HANDLE_LEN};
use crate::adapter::server::{default_identity, serve_with, ServeConfig};
use crate::contract::const_limits;
use crate::contract::descriptor::OPERATIONS;

/// A running in-process reference adapter.
pub struct ReferenceAdapter {
    dir: tempfile::TempDir,
    /// The grant's root.
    pub root: PathBuf,
    /// The sentinel beside it.
    pub sentinel: PathBuf,
    /// The socket.
    pub socket: PathBuf,
    /// The descriptor minted for the grant.
    pub descriptor: serde_json::Value,
    /// The descriptor of the narrower second grant (`launch::narrow_grant`).
    pub narrow: serde_json::Value,
    /// The descriptor of the third grant (`launch::fit_grant`).
    pub fit: serde_json::Value,
    /// The descriptor of the fourth grant, written by hand with a handle of another length
    /// than the minted one ([`long_handle_grant`]).
    pub long: serde_json::Value,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReferenceAdapter {
    /// Mint a grant and start the adapter; returns once it accepts connections.
    pub fn start() -> Result<ReferenceAdapter, String> {
        Self::start_with(Faults::NONE)
    }

    /// [`ReferenceAdapter::start`] with fault switches: the adapter is broken on purpose
    /// (test aid for the kill matrix).
    pub fn start_with(faults: Faults) -> Result<ReferenceAdapter, String> {
        let dir = tempfile::Builder::new().prefix("pi-conform-selftest").tempdir().map_err(|e| e.to_string())?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
        let root = dir.path().join("root");
        let sentinel = dir.path().join("sentinel");
        std::fs::create_dir(&root).map_err(|e| e.to_string())?;
        std::fs::create_dir(&sentinel).map_err(|e| e.to_string())?;
        let socket = dir.path().join("adapter.sock");
        let grants = dir.path().join("grants.json");
        let id = default_identity();
        let req = GrantRequest {
            socket: socket.clone(),
            root: root.clone(),
            host_instance_id: "selftest-host".into(),
            session_id: "selftest-session".into(),
            generation: 1,
            operations: OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect(),
            limits: const_limits([1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000]),
            adapter_id: id.adapter_id.clone(),
            adapter_version: id.adapter_version.clone(),
        };
        let descriptor = grant(&grants, &req).map_err(|e| e.to_string())?;
        let narrow = grant(&grants, &super::adapter::launch::narrow_grant(&req)).map_err(|e| e.to_string())?;
        let fit = grant(&grants, &super::adapter::launch::fit_grant(&req)).map_err(|e| e.to_string())?;
        let long = long_handle_grant(&grants, &descriptor)?;
        let cfg = ServeConfig {
            socket: socket.clone(),
            grants,
            identity: id,
            op_delay: Duration::ZERO,
            handle_signals: false,
        };
        let (stop, rx) = watch::channel(false);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let thread = std::thread::spawn(move || {
            if let Err(e) = rt.block_on(serve_with(cfg, faults, Some(rx))) {
                eprintln!("pi-conform: the reference adapter stopped: {e}");
            }
        });
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if t.elapsed() > Duration::from_secs(10) || thread.is_finished() {
                return Err("the reference adapter did not start".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(ReferenceAdapter { dir, root, sentinel, socket, descriptor, narrow, fit, long, stop, thread: Some(thread) })
    }

    /// The runner's target for this adapter.
    pub fn target(&self, time_scale: f64) -> Result<Target, String> {
        Target::new(&self.socket, self.descriptor.clone(), &self.root, &self.sentinel, time_scale)?
            .with_minted_grant(self.narrow.clone(), self.fit.clone())?
            .with_long_handle_grant(self.long.clone())
    }

    /// The private directory holding everything.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// A grant written into the grants file by hand, as the grants file allows: the first grant's
/// root, identity, operations and limits for the session `<session>-long-handle`, with a
/// random handle of 86 base64url characters (two minted ones joined), not the minted length.
/// The content guard finds such a handle only on connections bound with it, by its exact scan
/// for the bound handle (`adapter.secret.long-handle-windowed-read`). It is given the fingerprint of
/// its first [`MINTED_HANDLE_LEN`] characters: any fingerprint keeps the guard's prefilter on
/// (a grant without one makes every scan hash every window), and the minted-shape scan never
/// finds a handle of another length whatever its fingerprint. Returns its descriptor.
fn long_handle_grant(grants: &std::path::Path, first: &serde_json::Value) -> Result<serde_json::Value, String> {
    let handle = format!("{}{}", mint_handle().map_err(|e| e.to_string())?, mint_handle().map_err(|e| e.to_string())?);
    let bytes = std::fs::read(grants).map_err(|e| e.to_string())?;
    let mut file: GrantsFile = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let mut g = file.grants.first().cloned().ok_or("the grants file holds no grant")?;
    g.session_id = format!("{}-long-handle", g.session_id);
    g.handle_sha256 = hex::encode(crate::adapter::session::handle_digest(&handle));
    g.handle_fingerprint =
        crate::adapter::fs::handle_fingerprint(&handle[..MINTED_HANDLE_LEN]).map(|f| format!("{f:016x}"));
    let session = g.session_id.clone();
    file.grants.push(g);
    write_atomic(grants, &serde_json::to_vec_pretty(&file).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let mut d = first.clone();
    d["binding"]["sessionId"] = session.into();
    d["binding"]["capabilityHandle"] = handle.into();
    Ok(d)
}

impl Drop for ReferenceAdapter {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

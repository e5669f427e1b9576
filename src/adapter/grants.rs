//! Provisioning: the grants file and minting (SPEC §4.5). The file maps the SHA-256 of each
//! capability handle to a root, a binding identity, the operations allowed and the limit
//! ceilings. It holds no handle: the handle exists only in the descriptor printed by
//! `pi-conform grant`, which the operator hands to the daemon.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::session::{handle_digest, Grant};
use crate::contract::descriptor::{admit_descriptor, limits_from_values, LimitValues, LIMITS, MAX_SAFE_INTEGER};
use crate::contract::types::tool_adapter::AdapterLimits;
use crate::contract::types::tool_adapter::ToolOperation;

/// Why the grants file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    /// I/O failure.
    #[error("grants file {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (in the message; not a `source`, so a chain prints it once).
        cause: std::io::Error,
    },
    /// Not owner-only, or not ours.
    #[error("grants file {path} must be a regular file owned by uid {uid} with mode 0600 (found mode {mode:o}, owner {owner})")]
    Insecure {
        /// The file.
        path: PathBuf,
        /// Our uid.
        uid: u32,
        /// Its mode bits.
        mode: u32,
        /// Its owner.
        owner: u32,
    },
    /// Not the expected JSON.
    #[error("grants file {path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A grant request that cannot be honoured.
    #[error("{0}")]
    Invalid(String),
    /// A limit that must be at least 1 (`maxConcurrentRequests`, `maxIdempotencyKeys`) is 0,
    /// or a limit does not fit a JSON-safe integer: no binding could ever use such a grant.
    #[error("limits.{limit} must be an integer from {min} to 2^53-1")]
    Limit {
        /// The limit's key.
        limit: &'static str,
        /// Its least value.
        min: u64,
    },
}

/// The limits of a grant from values in canonical order: refused when a limit that must be at
/// least 1 is 0 or a value exceeds 2^53-1 (the ranges themselves are the descriptor
/// admission's, which `grant` runs).
pub fn grant_limits(values: [u64; 7]) -> Result<AdapterLimits, GrantsError> {
    for ((k, _, _), v) in LIMITS.iter().zip(values) {
        let min = u64::from(matches!(*k, "maxConcurrentRequests" | "maxIdempotencyKeys"));
        if v < min || v > MAX_SAFE_INTEGER {
            return Err(GrantsError::Limit { limit: k, min });
        }
    }
    // Every value is now in what the generated type holds.
    limits_from_values(values).ok_or(GrantsError::Limit { limit: "maxConcurrentRequests", min: 1 })
}

/// One grant as stored.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoredGrant {
    /// Lowercase hex SHA-256 of the handle.
    pub handle_sha256: String,
    /// The handle's 64-bit fingerprint, 16 lowercase hex digits (`fs::handle_fingerprint`):
    /// the content guard's prefilter (issue 25, N6). Absent in grants minted before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle_fingerprint: Option<String>,
    /// Absolute root directory.
    pub root: PathBuf,
    /// Device number (`st_dev`) of the root when the grant was minted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device: Option<u64>,
    /// Inode number (`st_ino`) of the root when the grant was minted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_inode: Option<u64>,
    /// Host incarnation.
    pub host_instance_id: String,
    /// Session.
    pub session_id: String,
    /// Generation.
    pub generation: u64,
    /// Operations allowed.
    pub operations: Vec<String>,
    /// Limit ceilings (the seven keys).
    pub limits: serde_json::Map<String, Value>,
}

/// The file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GrantsFile {
    /// Format version, 1.
    pub version: u32,
    /// The grants.
    pub grants: Vec<StoredGrant>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GrantsError + '_ {
    move |cause| GrantsError::Io { path: path.to_path_buf(), cause }
}

/// Read the grants file, refusing it unless it is a regular file owned by us with mode 0600.
///
/// Never blocks and never follows a symlink: the file is opened `O_NOFOLLOW | O_NONBLOCK`
/// (a FIFO swapped in for it opens at once instead of waiting for a writer) and judged on the
/// open descriptor with `fstat` before a byte is read; anything but a regular file is refused.
pub fn load(path: &Path) -> Result<Vec<Grant>, GrantsError> {
    let parsed = read_file(path)?;
    parsed
        .grants
        .iter()
        .map(|g| to_grant(g).map_err(|m| GrantsError::Format { path: path.to_path_buf(), message: m }))
        .collect()
}

/// Largest grants file read (a grant is well under 2 KiB; this is tens of thousands).
const MAX_GRANTS_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Open, check and parse the grants file (see [`load`]).
fn read_file(path: &Path) -> Result<GrantsFile, GrantsError> {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path).map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    let uid = rustix::process::geteuid().as_raw();
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_file() || meta.uid() != uid || mode != 0o600 {
        return Err(GrantsError::Insecure { path: path.to_path_buf(), uid, mode, owner: meta.uid() });
    }
    if meta.len() > MAX_GRANTS_FILE_BYTES {
        return Err(GrantsError::Format { path: path.to_path_buf(), message: "the file is too large".into() });
    }
    let mut text = String::new();
    (&file).take(MAX_GRANTS_FILE_BYTES + 1).read_to_string(&mut text).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|e| GrantsError::Format { path: path.to_path_buf(), message: e.to_string() })
}

/// An exclusive `flock` on `<grants>.lock` beside the grants file, held for the whole
/// read-modify-write of one `grant` run (released when dropped). The grants file itself is
/// replaced by rename, so it cannot carry the lock; the lock file is never replaced.
struct GrantsLock {
    _file: std::fs::File,
}

fn lock_grants(grants_path: &Path) -> Result<GrantsLock, GrantsError> {
    let name = grants_path.file_name().ok_or_else(|| GrantsError::Invalid("grants path has no file name".into()))?;
    let mut lock_name = name.to_os_string();
    lock_name.push(".lock");
    let lock_path = grants_path.with_file_name(lock_name);
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(flags.bits() as i32)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    let meta = file.metadata().map_err(io(&lock_path))?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid {
        let mode = meta.permissions().mode() & 0o7777;
        return Err(GrantsError::Insecure { path: lock_path, uid, mode, owner: meta.uid() });
    }
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(GrantsLock { _file: file }),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io(&lock_path)(e.into())),
        }
    }
}

fn to_grant(g: &StoredGrant) -> Result<Grant, String> {
    let digest = hex::decode(&g.handle_sha256)
        .ok()
        .and_then(|d| <[u8; 32]>::try_from(d).ok())
        .ok_or("handleSha256 must be 64 hex characters")?;
    let operations = g
        .operations
        .iter()
        .map(|o| o.parse::<ToolOperation>().map_err(|_| "unknown operation".to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut vals = [0u64; 7];
    for (i, (k, _, _)) in LIMITS.iter().enumerate() {
        vals[i] = g.limits.get(*k).and_then(Value::as_u64).ok_or_else(|| format!("limits.{k} missing"))?;
    }
    if !g.root.is_absolute() {
        return Err("root must be absolute".into());
    }
    let handle_fingerprint = match &g.handle_fingerprint {
        None => None,
        Some(h) if h.len() == 16 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Some(u64::from_str_radix(h, 16).map_err(|_| "handleFingerprint must be 16 lowercase hex digits")?)
        }
        Some(_) => return Err("handleFingerprint must be 16 lowercase hex digits".into()),
    };
    let root_pin = match (g.root_device, g.root_inode) {
        (Some(dev), Some(ino)) => Some((dev, ino)),
        (None, None) => None,
        _ => return Err("rootDevice and rootInode go together".into()),
    };
    Ok(Grant {
        handle_sha256: digest,
        handle_fingerprint,
        root: g.root.clone(),
        root_pin,
        host_instance_id: g.host_instance_id.clone(),
        session_id: g.session_id.clone(),
        generation: g.generation,
        operations,
        ceilings: grant_limits(vals).map_err(|e| e.to_string())?,
    })
}

/// A request to mint one grant.
#[derive(Clone, Debug)]
pub struct GrantRequest {
    /// Adapter socket path (goes into the descriptor).
    pub socket: PathBuf,
    /// Root directory.
    pub root: PathBuf,
    /// Host incarnation.
    pub host_instance_id: String,
    /// Session.
    pub session_id: String,
    /// Generation.
    pub generation: u64,
    /// Operations, in descriptor order.
    pub operations: Vec<ToolOperation>,
    /// Limits (also the grant's ceilings).
    pub limits: AdapterLimits,
    /// adapterId.
    pub adapter_id: String,
    /// adapterVersion.
    pub adapter_version: String,
}

/// The length of a handle [`mint_handle`] makes. Defined with the content guard, which
/// looks for other grants' handles of exactly this shape, so that `fs/` imports nothing above it.
pub use super::fs::MINTED_HANDLE_LEN;

/// A fresh 256-bit handle, base64url without padding ([`MINTED_HANDLE_LEN`] characters).
pub fn mint_handle() -> Result<String, GrantsError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| GrantsError::Invalid(format!("no randomness: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Mint a handle, add the grant to the file atomically (creating it 0600 if absent), and
/// return the descriptor JSON (the only place the handle is ever written out).
pub fn grant(grants_path: &Path, req: &GrantRequest) -> Result<Value, GrantsError> {
    let root = std::fs::canonicalize(&req.root).map_err(|e| {
        GrantsError::Invalid(match e.kind() {
            std::io::ErrorKind::NotFound => format!("root {} does not exist", req.root.display()),
            _ => format!("root {}: {e}", req.root.display()),
        })
    })?;
    if !root.is_dir() {
        return Err(GrantsError::Invalid(format!("root {} is not a directory", req.root.display())));
    }
    // Pin the root (issue 15, F8): a bind opens exactly this directory or nothing.
    let (root_device, root_inode) =
        super::fs::pin_of(&root).map_err(|e| GrantsError::Invalid(format!("the root cannot be pinned: {e}")))?;
    let socket = if req.socket.is_absolute() {
        req.socket.clone()
    } else {
        std::env::current_dir().map_err(io(&req.socket))?.join(&req.socket)
    };
    let handle = mint_handle()?;
    let ops: Vec<Value> = req.operations.iter().map(|o| Value::String(o.to_string())).collect();
    let descriptor = json!({
        "protocolVersion": "1.0",
        "adapterId": req.adapter_id,
        "adapterVersion": req.adapter_version,
        "endpoint": {"transport": "unix", "path": socket.to_string_lossy()},
        "binding": {
            "hostInstanceId": req.host_instance_id,
            "sessionId": req.session_id,
            "generation": req.generation,
            "capabilityHandle": handle,
        },
        "operations": ops,
        "limits": req.limits.to_json(),
    });
    // The descriptor must be one a daemon admits (checks 1-7 and 9-11).
    admit_descriptor(&descriptor, None)
        .map_err(|e| GrantsError::Invalid(format!("the descriptor would be refused: {e}")))?;
    // Concurrent `grant` runs serialize here: each reads the file as the previous one left
    // it, so none loses another's grant.
    let _lock = lock_grants(grants_path)?;
    let mut file = match std::fs::symlink_metadata(grants_path) {
        Ok(_) => {
            load(grants_path)?;
            read_file(grants_path)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => GrantsFile { version: 1, grants: vec![] },
        Err(e) => return Err(io(grants_path)(e)),
    };
    let limits = match req.limits.to_json() {
        Value::Object(m) => m,
        _ => unreachable!("limits serialize to an object"),
    };
    file.grants.push(StoredGrant {
        handle_sha256: hex::encode(handle_digest(&handle)),
        handle_fingerprint: super::fs::handle_fingerprint(&handle).map(|f| format!("{f:016x}")),
        root,
        root_device: Some(root_device),
        root_inode: Some(root_inode),
        host_instance_id: req.host_instance_id.clone(),
        session_id: req.session_id.clone(),
        generation: req.generation,
        operations: req.operations.iter().map(|o| o.to_string()).collect(),
        limits,
    });
    write_atomic(grants_path, &serde_json::to_vec_pretty(&file).unwrap_or_default())?;
    // The lock file a live connection of this grant will hold (issue 25, N12), created now so
    // that a bind only opens it. Best effort: the grant is recorded already, and a bind
    // creates a missing lock file itself (or refuses, fail closed, when it cannot).
    if let Err(e) = create_bind_lock(&bind_lock_path(grants_path, &handle_digest(&handle))) {
        tracing::warn!(error = %e, "the grant's bind lock file was not created; the first bind creates it");
    }
    Ok(descriptor)
}

/// The lock file a live connection of a grant holds so that it is the only one across
/// processes (issue 25, N12): `<grants>.bind-<32 hex>.lock` beside the grants file, the hex a
/// domain-separated hash of the handle digest (not the digest the grants file stores).
pub fn bind_lock_path(grants_path: &Path, digest: &[u8; 32]) -> PathBuf {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"pi-conform bind lock\0");
    h.update(digest);
    let tag = hex::encode(&h.finalize()[..16]);
    let mut name = grants_path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".bind-{tag}.lock"));
    grants_path.with_file_name(name)
}

/// Create a grant's lock file (empty, mode 0600) unless it exists; never through a symlink.
fn create_bind_lock(path: &Path) -> Result<(), GrantsError> {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map(drop)
        .map_err(io(path))
}

/// Write `bytes` to `path` atomically and durably, mode 0600: temp file in the same
/// directory, fsync, rename, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), GrantsError> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| GrantsError::Invalid("grants path has no file name".into()))?;
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| GrantsError::Invalid(format!("no randomness: {e}")))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), hex::encode(suffix)));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io(&tmp))?;
    let res = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `grant` leaves the new grant's bind lock file beside the grants file: empty, a regular
    /// file of mode 0600, named by a hash that is not the stored digest.
    #[test]
    fn grant_creates_the_bind_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let grants = dir.path().join("grants.json");
        let req = GrantRequest {
            socket: dir.path().join("a.sock"),
            root,
            host_instance_id: "h".into(),
            session_id: "s".into(),
            generation: 1,
            operations: vec![ToolOperation::FsStat],
            limits: grant_limits([65_536, 65_536, 1, 1, 1_000, 1, 1_000]).unwrap(),
            adapter_id: "test-adapter".into(),
            adapter_version: "1.0.0".into(),
        };
        let d = grant(&grants, &req).unwrap();
        let handle = d["binding"]["capabilityHandle"].as_str().unwrap();
        let digest = handle_digest(handle);
        let lock = bind_lock_path(&grants, &digest);
        let meta = std::fs::symlink_metadata(&lock).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), 0);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let name = lock.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("grants.json.bind-") && name.ends_with(".lock"), "{name}");
        assert!(!name.contains(&hex::encode(digest)[..16]), "the lock file is named by the stored digest");
    }

    /// A limit a binding needs at least 1 of is refused at 0, typed, naming the limit.
    #[test]
    fn a_zero_limit_is_refused_with_its_name() {
        let ok = [1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000];
        assert_eq!(grant_limits(ok).unwrap().values(), ok);
        for (i, name) in [(2, "maxConcurrentRequests"), (5, "maxIdempotencyKeys")] {
            let mut v = ok;
            v[i] = 0;
            let e = grant_limits(v).unwrap_err();
            assert!(matches!(e, GrantsError::Limit { limit, min: 1 } if limit == name), "{e:?}");
            assert_eq!(e.to_string(), format!("limits.{name} must be an integer from 1 to 2^53-1"));
        }
        let mut v = ok;
        v[6] = u64::MAX;
        assert_eq!(
            grant_limits(v).unwrap_err().to_string(),
            "limits.idempotencyTtlMs must be an integer from 0 to 2^53-1"
        );
    }

    /// A grants file whose ceiling is 0 is refused as a format error naming the limit.
    #[test]
    fn a_grants_file_with_a_zero_ceiling_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let mut limits = serde_json::Map::new();
        for ((k, _, _), v) in LIMITS.iter().zip([2048u64, 1024, 0, 0, 100, 1, 1000]) {
            limits.insert((*k).into(), v.into());
        }
        let g = StoredGrant {
            handle_sha256: "00".repeat(32),
            handle_fingerprint: None,
            root: dir.path().to_path_buf(),
            root_device: None,
            root_inode: None,
            host_instance_id: "h".into(),
            session_id: "s".into(),
            generation: 1,
            operations: vec!["fs.stat".into()],
            limits,
        };
        let file = GrantsFile { version: 1, grants: vec![g] };
        write_atomic(&path, &serde_json::to_vec(&file).unwrap()).unwrap();
        match load(&path) {
            Err(GrantsError::Format { message, .. }) => {
                assert_eq!(message, "limits.maxConcurrentRequests must be an integer from 1 to 2^53-1")
            }
            other => panic!("a zero ceiling must be refused: {other:?}"),
        }
    }

    #[test]
    fn minted_handles_have_the_guarded_shape() {
        for _ in 0..16 {
            let h = mint_handle().unwrap();
            assert_eq!(h.len(), MINTED_HANDLE_LEN);
            assert!(crate::contract::text::is_base64url(&h));
        }
    }
}

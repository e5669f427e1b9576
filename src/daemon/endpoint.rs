//! The checks a daemon runs on an adapter endpoint before connecting (SPEC §1.2).
//!
//! The path must be absolute and canonical (no empty, `.` or `..` segment, no trailing `/`);
//! `lstat` must show a socket, not a symlink, with no group/other mode bits; its immediate
//! parent must be a real directory (not a symlink) with no group/other bits; both must be
//! owned by the daemon's effective uid. Any failure is `adapter_endpoint_insecure`, with a
//! generic message that never names the path.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use super::runtime::LinkError;
use crate::contract::DaemonCode;

fn insecure(message: &str) -> LinkError {
    LinkError::new(DaemonCode::AdapterEndpointInsecure.as_str(), message)
}

/// Whether `path` is absolute and lexically canonical: starts with `/`, is not `/`, and has
/// no empty (`//`, trailing `/`), `.` or `..` segment.
pub fn is_canonical_absolute(path: &[u8]) -> bool {
    match path.strip_prefix(b"/") {
        Some(body) if !body.is_empty() => body.split(|&b| b == b'/').all(|s| !s.is_empty() && s != b"." && s != b".."),
        _ => false,
    }
}

/// Check an adapter endpoint before connecting (SPEC §1.2). Nothing is opened or connected.
pub fn check_endpoint(path: &Path) -> Result<(), LinkError> {
    if !is_canonical_absolute(path.as_os_str().as_bytes()) {
        return Err(insecure("adapter endpoint path is not absolute and canonical"));
    }
    let uid = rustix::process::geteuid().as_raw();
    let meta =
        std::fs::symlink_metadata(path).map_err(|_| insecure("adapter endpoint is not an owner-private socket"))?;
    if !meta.file_type().is_socket() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(insecure("adapter endpoint is not an owner-private socket"));
    }
    let parent = path.parent().ok_or_else(|| insecure("adapter endpoint path is not absolute and canonical"))?;
    let dir = std::fs::symlink_metadata(parent)
        .map_err(|_| insecure("adapter endpoint directory is not an owner-private directory"))?;
    if !dir.file_type().is_dir() || dir.uid() != uid || dir.mode() & 0o077 != 0 {
        return Err(insecure("adapter endpoint directory is not an owner-private directory"));
    }
    // Canonical means no symlink anywhere above the socket either: a symlinked ancestor would
    // let whoever owns the link's directory swap the socket for their own.
    if std::fs::canonicalize(parent).ok().as_deref() != Some(parent) {
        return Err(insecure("adapter endpoint path is not absolute and canonical"));
    }
    Ok(())
}

/// How [`check_endpoint_loose`] is broken (the daemon faults `endpoint-write-bits-only`,
/// `endpoint-group-bits-only`, `endpoint-follows-symlinks`, `endpoint-ancestors-unchecked`).
#[derive(Clone, Copy, Debug)]
pub struct Loose {
    /// The mode bits that refuse the socket and its directory (0o077 when right).
    pub mask: u32,
    /// Every check made through symlinks (`stat`, not `lstat`).
    pub follow: bool,
    /// The directories above the socket's own are not resolved.
    pub ancestors: bool,
}

/// [`check_endpoint`] broken on purpose, as `loose` says.
pub fn check_endpoint_loose(path: &Path, loose: Loose) -> Result<(), LinkError> {
    if !is_canonical_absolute(path.as_os_str().as_bytes()) {
        return Err(insecure("adapter endpoint path is not absolute and canonical"));
    }
    let uid = rustix::process::geteuid().as_raw();
    let Loose { mask, follow, ancestors } = loose;
    let stat = |p: &Path| if follow { std::fs::metadata(p) } else { std::fs::symlink_metadata(p) };
    let meta = stat(path).map_err(|_| insecure("adapter endpoint is not an owner-private socket"))?;
    if !meta.file_type().is_socket() || meta.uid() != uid || meta.mode() & mask != 0 {
        return Err(insecure("adapter endpoint is not an owner-private socket"));
    }
    let parent = path.parent().ok_or_else(|| insecure("adapter endpoint path is not absolute and canonical"))?;
    let dir = stat(parent).map_err(|_| insecure("adapter endpoint directory is not an owner-private directory"))?;
    if !dir.file_type().is_dir() || dir.uid() != uid || dir.mode() & mask != 0 {
        return Err(insecure("adapter endpoint directory is not an owner-private directory"));
    }
    if !ancestors && !follow && std::fs::canonicalize(parent).ok().as_deref() != Some(parent) {
        return Err(insecure("adapter endpoint path is not absolute and canonical"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        for ok in ["/a", "/run/x.sock", "/a/b/c"] {
            assert!(is_canonical_absolute(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "/", "a", "a/b", "//a", "/a//b", "/a/", "/a/.", "/a/./b", "/a/..", "/../a", "./a"] {
            assert!(!is_canonical_absolute(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn missing_and_non_socket_paths_are_insecure() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("file");
        std::fs::write(&f, b"").unwrap();
        for p in [dir.path().join("missing"), f] {
            let e = check_endpoint(&p).unwrap_err();
            assert_eq!(e.code, DaemonCode::AdapterEndpointInsecure.as_str());
            assert!(!e.to_string().contains(dir.path().to_str().unwrap()));
        }
    }
}

//! Positioned reads of an open file, shared by the content guard, `fs.read`, `fs.search`
//! and the digest of `fs.write`/`fs.edit`. A leaf: it imports no other operation module.

use std::os::fd::OwnedFd;

use rustix::buffer::spare_capacity;

use super::resolve;
use crate::contract::AdapterError;

/// `pread` until `len` bytes or end of file (a shorter result means end of file). The
/// buffer is filled in place, never zeroed first.
pub(super) fn pread_at(fd: &OwnedFd, offset: u64, len: usize) -> Result<Vec<u8>, AdapterError> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(fd, spare_capacity(&mut buf), at) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(resolve::map_errno(e)),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

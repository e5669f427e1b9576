//! The reference tool adapter (SPEC §1.2, §4.5, §5, §7).

mod broken;
pub mod faults;
pub mod fs;
pub mod grants;
pub mod idempotency;
pub mod job;
pub mod ops;
pub mod server;
pub mod session;

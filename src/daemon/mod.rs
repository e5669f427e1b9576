//! The reference daemon (SPEC §1.1, §2, §3, §4.3–§4.4, §6, §7).

pub mod conn;
pub mod core;
pub mod endpoint;
pub mod faults;
pub mod host;
pub mod ids;
pub mod journal;
pub mod link;
pub mod record;
pub mod runtime;
pub mod server;
pub mod store;
pub mod turn;

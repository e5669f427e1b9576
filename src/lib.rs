//! pi-conform: a schema-first conformance toolkit for the Pi host tool-adapter protocol.
#![forbid(unsafe_code)]

pub mod contract;
pub mod wire;

//! pi-conform: a schema-first conformance toolkit for the Pi host tool-adapter protocol.
//!
//! - [`wire`]: bounded NDJSON framing and strict JSON;
//! - [`contract`]: the schemas, the generated types and every protocol rule;
//! - [`judge`]: one verdict for one document (what `pi-conform validate` prints);
//! - [`vectors`]: the golden vectors;
//! - [`util`]: UTC timestamps and the test PRNG, written once.
#![forbid(unsafe_code)]
// Refusals carry the protocol's full error body (code, message, details, attribution); they
// are the cold path of a validator, so their size is not worth a Box at every call site.
#![allow(clippy::result_large_err)]

pub mod adapter;
pub mod conform;
pub mod contract;
pub mod daemon;
pub mod fakemodel;
#[doc(hidden)]
pub mod fuzzing;
pub mod judge;
pub mod util;
pub mod vectors;
pub mod watch;
pub mod wire;

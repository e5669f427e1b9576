//! Property tests (proptest). Each property compares an implementation with an independent,
//! executable model written from the spec, never with the implementation itself:
//!
//! - `path`: the path rule (SPEC §5.1, PC-5.1) on both sides, against a segment-by-segment model;
//! - `fit`: the fit check (SPEC §3.3, PC-3.3) against a byte-count model of `JSON.stringify`,
//!   anchored on the worked example's 492/431 bytes; monotone in every identity length;
//! - `wire`: the NDJSON encoder, `LineDecoder` and strict decoding (SPEC §1, PC-1) against a
//!   hand-written line splitter, a hand-written JSON writer and a duplicate-key detector;
//! - `edit`: `fs.edit` on real files (SPEC §5.3, PC-5.3.edit) against a string model;
//! - `idempotency`: the adapter's idempotency cache (SPEC §4.5, PC-4.5) against a map model.
//!
//! Every property sets its case count explicitly (see [`common::config`]) so that the whole
//! file runs in well under 40 s in a debug build on two cores; `PROPTEST_CASES` overrides
//! them all. Failures are not persisted: a real regression becomes a named test.

#[path = "properties/common.rs"]
mod common;
#[path = "properties/edit.rs"]
mod edit;
#[path = "properties/fit.rs"]
mod fit;
#[path = "properties/idempotency.rs"]
mod idempotency;
#[path = "properties/path.rs"]
mod path;
#[path = "properties/wire.rs"]
mod wire;

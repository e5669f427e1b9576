//! Rust types generated at build time from the two schemas (typify, see `build.rs`).
//!
//! They are the typed view of a document that has already passed schema validation; the
//! rules the schemas cannot express live in the sibling modules.

/// Types of `schemas/tool-adapter.schema.json`: the descriptor and the frames.
#[allow(clippy::all, clippy::pedantic, missing_docs, dead_code, unused_imports)]
pub mod tool_adapter {
    include!(concat!(env!("OUT_DIR"), "/tool_adapter.rs"));
}

/// Types of `schemas/protocol-v2.schema.json`: commands, responses, events, handshake data.
/// The descriptor types are tool-adapter's (one definition shared by both schemas).
#[allow(clippy::all, clippy::pedantic, missing_docs, dead_code, unused_imports)]
pub mod protocol_v2 {
    include!(concat!(env!("OUT_DIR"), "/protocol_v2.rs"));
}

//! A job: one admitted invoke for the shell to run (on a blocking thread) and report with
//! [`super::session::Session::handle_done`]. Its own module, just above `fs/`, so that the
//! session, the operations (`ops.rs`) and the broken code of the fault switches (`broken.rs`)
//! share it without importing each other. `session::Job` re-exports it.

use serde_json::Value;

use super::fs::Cancel;
use crate::contract::types::tool_adapter::ToolOperation;

/// A job for the shell to run and report.
#[derive(Clone, Debug)]
pub struct Job {
    /// The invoke's request id.
    pub request_id: String,
    /// The operation.
    pub operation: ToolOperation,
    /// The validated payload.
    pub payload: Value,
    /// Bytes the compact `data` may take so the result line fits `maxResponseBytes`.
    pub budget: usize,
    /// Cancellation for abort.
    pub cancel: Cancel,
}

//! Run one validated job against a confined root: read the payload fields (already checked
//! by `contract::frame::check_invoke_payload`) and call the filesystem operation.

use serde_json::Value;

use super::fs::Root;
use super::session::Job;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{validate_relative_path, AdapterCode, AdapterError, PathSide};

/// Execute `job` (blocking).
pub fn execute(root: &Root, job: &Job) -> Result<Value, AdapterError> {
    let p = &job.payload;
    let bad = || AdapterError::new(AdapterCode::InvalidRequest, "payload does not match the operation");
    let path = p.get("path").and_then(Value::as_str).ok_or_else(bad)?;
    let path = validate_relative_path(path, PathSide::Adapter, "payload.path")
        .map_err(|e| AdapterError::new(AdapterCode::InvalidPath, e.message))?;
    let u = |k: &str| p.get(k).and_then(Value::as_u64);
    let b = |k: &str| p.get(k).and_then(Value::as_bool);
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let (budget, cancel) = (job.budget, &job.cancel);
    match job.operation {
        ToolOperation::FsList => root.list(&path, u("maxEntries"), budget, cancel),
        ToolOperation::FsStat => root.stat(&path, budget, cancel),
        ToolOperation::FsRead => root.read(&path, u("offset"), u("maxBytes"), budget, cancel),
        ToolOperation::FsSearch => root.search(&path, s("query").ok_or_else(bad)?, u("maxResults"), budget, cancel),
        ToolOperation::FsWrite => root.write(
            &path,
            s("content").ok_or_else(bad)?,
            b("create"),
            b("overwrite"),
            s("expectedDigest"),
            budget,
            cancel,
        ),
        ToolOperation::FsEdit => {
            let edits: Vec<(String, String)> = p
                .get("edits")
                .and_then(Value::as_array)
                .ok_or_else(bad)?
                .iter()
                .map(|e| Some((e.get("oldText")?.as_str()?.to_string(), e.get("newText")?.as_str()?.to_string())))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
            root.edit(&path, &edits, s("expectedDigest"), budget, cancel)
        }
    }
}

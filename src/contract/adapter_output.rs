//! What an adapter sends, judged one frame at a time: the single judge of adapter output,
//! called by the adapter runner on every frame it receives and by `pi-conform validate --kind
//! frame --direction to-daemon` on every line.
//!
//! A frame passes when a daemon accepts it ([`judge_adapter_frame`], [`Direction::ToDaemon`])
//! and it meets the adapter's own obligations on a single frame, which a daemon does not
//! check (Pi Daemon 0.3.3 accepts any well-formed error code):
//!
//! - PC-5.3.errors: an error body's `code` is one of the closed set of adapter error codes,
//!   with that code's `retryable` flag ([`check_adapter_error_code`]);
//! - PC-4.5: a `result` for one of the six operations that the bind did not grant is exactly
//!   `ok:false` `operation_not_granted` (a daemon never sends such an invoke, so a daemon's
//!   judge refuses the frame on `operation`; the runner sends one on purpose).
//!
//! Rules that need the exchange (which invoke a result answers, `bound` first) are the
//! runner's, not a single frame's.

use serde_json::Value;

use super::adapter_error::{check_adapter_error_code, AdapterCode};
use super::frame::{judge_adapter_frame, Binding, Direction, Disposition, FrameError, FrameKind, JudgedFrame};
use super::types::tool_adapter::{AdapterFrame, ToolOperation};
use super::{Code, ContractError};

/// Which kind of rule a refused frame broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A rule a daemon applies: the frame is refused outright.
    Frame,
    /// The contract accepted the frame but its generated type refused it: a harness bug (the
    /// schema and the generated types agree on every vector, `tests/agreement.rs`).
    Typed,
    /// An adapter obligation on a single frame (the clause): a daemon would accept the frame.
    Obligation(&'static str),
}

/// Why a frame an adapter sent does not pass.
#[derive(Debug)]
pub struct OutputError {
    /// The typed refusal (`code`, `details.field`, message, disposition).
    pub error: FrameError,
    /// The kind of rule it broke.
    pub rule: Rule,
    /// The frame, when a daemon accepts it and it has its generated type (an
    /// [`Rule::Obligation`] breach): it still takes part in the exchange.
    pub frame: Option<Box<(JudgedFrame, AdapterFrame)>>,
    /// The strictly decoded line, when it decodes at all.
    pub value: Option<Value>,
}

impl OutputError {
    fn obligation(clause: &'static str, field: String, message: String, j: JudgedFrame, f: AdapterFrame) -> Self {
        let value = Some(j.value.clone());
        OutputError {
            error: FrameError {
                error: ContractError::new(Code::AdapterProtocolInvalid, field, message),
                disposition: Disposition::Close,
                attribution: None,
            },
            rule: Rule::Obligation(clause),
            frame: Some(Box::new((j, f))),
            value,
        }
    }
}

/// Judge one line (LF excluded) an adapter sent on `binding`: the frame and its generated type,
/// or why it does not pass.
pub fn judge_adapter_output(line: &[u8], binding: &Binding) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    let j = match judge_adapter_frame(line, binding, Direction::ToDaemon) {
        Ok(j) => j,
        Err(e) if e.error.field() == "operation" => match ungranted_result(line, binding) {
            Some(j) => return ungranted(j, e),
            None => return Err(refused(line, e)),
        },
        Err(e) => return Err(refused(line, e)),
    };
    let f = match j.typed() {
        Ok(f) => f,
        Err(e) => return Err(OutputError { error: e, rule: Rule::Typed, frame: None, value: Some(j.value) }),
    };
    error_code(j, f)
}

/// Whether `judge_adapter_output` passes the line, without building what it returns when a
/// faster path can tell (`validate`'s hot path): a frame the one-pass path accepts and that
/// carries no error body meets every single-frame obligation.
pub fn adapter_output_passes(line: &[u8], binding: &Binding) -> Result<(), OutputError> {
    match super::onepass::accept_frame(line, binding, Direction::ToDaemon) {
        Some(FrameKind::Result { ok: true, .. } | FrameKind::Bound | FrameKind::Revoked | FrameKind::Aborted(true)) => {
            Ok(())
        }
        _ => judge_adapter_output(line, binding).map(|_| ()),
    }
}

fn refused(line: &[u8], e: FrameError) -> OutputError {
    OutputError { error: e, rule: Rule::Frame, frame: None, value: crate::wire::decode_strict(line).ok() }
}

/// PC-5.3.errors on the error body, if any.
fn error_code(j: JudgedFrame, f: AdapterFrame) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    match f.error().map(|body| check_adapter_error_code(body, "error")) {
        Some(Err(e)) => {
            let (field, message) = (e.field().to_string(), e.message.clone());
            Err(OutputError::obligation("PC-5.3.errors", field, message, j, f))
        }
        _ => Ok((j, f)),
    }
}

/// PC-4.5 for a result the daemon's judge refused on `operation` (`refusal`): only
/// `ok:false operation_not_granted` is the answer; any other result keeps the refusal.
fn ungranted(
    (j, f): (JudgedFrame, AdapterFrame),
    refusal: FrameError,
) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    if f.ok() == Some(false) && f.error_code() == Some(AdapterCode::OperationNotGranted.as_str()) {
        return error_code(j, f);
    }
    let value = Some(j.value.clone());
    Err(OutputError { error: refusal, rule: Rule::Obligation("PC-4.5"), frame: Some(Box::new((j, f))), value })
}

/// A `result` for an operation of the six that `binding` did not grant, judged with that
/// operation granted (every other rule applies); `None` for any other frame.
fn ungranted_result(line: &[u8], binding: &Binding) -> Option<(JudgedFrame, AdapterFrame)> {
    let v = crate::wire::decode_strict(line).ok()?;
    if v.get("kind")? != "result" {
        return None;
    }
    let op: ToolOperation = v.get("operation")?.as_str()?.parse().ok()?;
    if binding.operations().contains(&op) {
        return None;
    }
    let mut b = binding.clone();
    b.operations_mut().push(op);
    let j = judge_adapter_frame(line, &b, Direction::ToDaemon).ok()?;
    let f = j.typed().ok()?;
    Some((j, f))
}

//! The preflight before the adapter suite (issue 16): one bind and one `fs.stat` of the
//! fixture marker, so that a run that cannot mean anything stops at once with one diagnostic
//! instead of timing out or failing every case for a misleading reason.
//!
//! 1. The fixture is laid under the root (as the first case would lay it).
//! 2. The descriptor's bind must be answered `bound` within one step: a connection refused is
//!    "unreachable", a silence is a mute adapter (also unreachable: nothing answers), a close
//!    is a refused bind (the grant does not match the descriptor; the refusal names the
//!    identity the descriptor binds and what the adapter answered).
//! 3. `fs.stat` of the marker `.pi-conform-fixture` must not answer `not_found` (the adapter's
//!    root is not `--root`) and must be answered within one step. Any other answer, right or
//!    wrong, is left to the cases to judge. (Skipped when the descriptor does not grant
//!    `fs.stat`.)

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::json;

use super::conn::{Conn, Recv, MAX_READ_LINE};
use super::fixture::{lay, MARKER};
use super::Target;
use crate::contract::adapter_error::AdapterCode;

/// Why the suite was not run.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// Nothing answers: no connection, or silence after the bind (exit 4): one diagnostic.
    #[error("{0}")]
    Unreachable(String),
    /// The adapter answered, but not so that the suite can run: the bind refused, the marker
    /// not visible under `--root`, silence after `bound` (exit 5, inconclusive): one diagnostic.
    #[error("{0}")]
    Refused(String),
    /// The runner cannot lay its fixture under `--root` (exit 2, a usage error).
    #[error("{0}")]
    Harness(String),
}

/// The binding the descriptor asks for, as a refusal names it.
fn binding_of(target: &Target) -> String {
    let id = target.admitted.identity();
    format!(
        "adapterId {:?}, adapterVersion {:?}, hostInstanceId {:?}, sessionId {:?}, generation {}",
        id.adapter_id, id.adapter_version, id.host_instance_id, id.session_id, id.generation
    )
}

/// Run the preflight against `target`.
pub fn preflight(target: &Target) -> Result<(), PreflightError> {
    let socket = target.socket.display();
    let unreachable = |e: std::io::Error| PreflightError::Unreachable(format!("target unreachable: {socket}: {e}"));
    drop(super::conn::connect_within(&target.socket, target.step).map_err(unreachable)?);
    lay(&target.root, &target.sentinel)
        .map_err(|e| PreflightError::Harness(format!("cannot lay the fixture under --root: {e}")))?;
    let step = target.step;
    let transcript = Rc::new(RefCell::new(Vec::new()));
    let received = Rc::new(RefCell::new(Vec::new()));
    let mut conn = Conn::connect(&target.socket, target.handle(), step, transcript, received).map_err(unreachable)?;
    conn.send(&target.admitted.bind_frame());
    match conn.recv_within(step) {
        Recv::Frame(v, _) if v.kind() == Some("bound") => {}
        Recv::Timeout => {
            return Err(PreflightError::Unreachable(format!(
                "the adapter on {socket} accepted the connection but did not answer the descriptor's bind within \
                 {step:?} (one step; --time-scale stretches it): it is mute, so the suite was not run"
            )))
        }
        Recv::Closed => {
            return Err(PreflightError::Refused(format!(
                "the adapter on {socket} closed the connection without `bound` for the descriptor's bind (it answered \
                 no frame): the bind asked for {}; the adapter's grant or identity differs in one of these, or in \
                 the handle, operations or limits, so the suite was not run",
                binding_of(target)
            )))
        }
        Recv::Garbage(head) if head.len() > MAX_READ_LINE => {
            return Err(PreflightError::Refused(format!(
                "the adapter on {socket} answered the descriptor's bind with a line over {MAX_READ_LINE} bytes (no LF \
                 in sight; the runner stopped reading it), so the suite was not run"
            )))
        }
        other => {
            return Err(PreflightError::Refused(format!(
                "the adapter on {socket} answered the descriptor's bind with `{}` instead of `bound` (the bind asked \
                 for {}), so the suite was not run",
                other.describe(),
                binding_of(target)
            )))
        }
    }
    if !target.admitted.operations().iter().any(|o| o.to_string() == "fs.stat") {
        return Ok(());
    }
    let id = target.admitted.identity();
    let invoke = json!({
        "protocolVersion": "1.0", "kind": "invoke", "adapterId": id.adapter_id, "adapterVersion": id.adapter_version,
        "hostInstanceId": id.host_instance_id, "sessionId": id.session_id, "generation": id.generation,
        "requestId": "preflight-1", "idempotencyKey": "preflight-1", "operation": "fs.stat",
        "payload": {"path": MARKER},
    });
    conn.send(&invoke);
    let root = target.root.display();
    let r = conn.recv_for("preflight-1");
    match (r.frame(), &r) {
        (Some(v), _) if v.ok() == Some(false) && v.error_code() == Some(AdapterCode::NotFound.as_str()) => {
            Err(PreflightError::Refused(format!(
                "the fixture marker {MARKER} that the runner laid in --root {root} is not visible through the adapter \
             (fs.stat answered not_found): --root must be the directory the adapter's grant is confined to, so \
             the suite was not run"
            )))
        }
        (None, Recv::Timeout) => Err(PreflightError::Refused(format!(
            "the adapter on {socket} answered bind but not fs.stat of the fixture marker within {step:?}: it is \
             mute after bind, so the suite was not run"
        ))),
        // Any other answer is for the cases to judge (a broken fs.stat is a failure, not a
        // misconfiguration).
        _ => Ok(()),
    }
}

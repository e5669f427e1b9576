//! Typed views of an adapter frame the contract accepted (the generated [`AdapterFrame`]):
//! the members a reader of any frame kind asks for (its kind, ids, outcome, error), so that a
//! runner reads an accepted frame through the generated type instead of `value["…"]`.

use super::types::tool_adapter::{AdapterErrorBody, AdapterFrame, ToolOperation};

/// `AdapterFrame::$variant(f)` for every variant holding the member, bound to `f`.
macro_rules! each {
    ($self:expr, $f:ident => $e:expr, [$($v:ident),*], $default:expr) => {
        match $self {
            $(AdapterFrame::$v($f) => $e,)*
            #[allow(unreachable_patterns)]
            _ => $default,
        }
    };
}

impl AdapterFrame {
    /// The frame's `kind`.
    pub fn kind(&self) -> &'static str {
        use AdapterFrame as F;
        match self {
            F::BindFrame(_) => "bind",
            F::BoundFrame(_) => "bound",
            F::InvokeFsList(_)
            | F::InvokeFsStat(_)
            | F::InvokeFsRead(_)
            | F::InvokeFsSearch(_)
            | F::InvokeFsWrite(_)
            | F::InvokeFsEdit(_) => "invoke",
            F::ResultFsList(_)
            | F::ResultFsStat(_)
            | F::ResultFsRead(_)
            | F::ResultFsSearch(_)
            | F::ResultFsWrite(_)
            | F::ResultFsEdit(_)
            | F::ResultError(_) => "result",
            F::AbortFrame(_) => "abort",
            F::AbortedTrue(_) | F::AbortedFalse(_) => "aborted",
            F::RevokeFrame(_) => "revoke",
            F::RevokedFrame(_) => "revoked",
        }
    }

    /// `requestId` (invoke, result, abort, aborted).
    pub fn request_id(&self) -> Option<&str> {
        each!(self, f => Some(f.request_id.as_str()), [
            InvokeFsList, InvokeFsStat, InvokeFsRead, InvokeFsSearch, InvokeFsWrite, InvokeFsEdit,
            ResultFsList, ResultFsStat, ResultFsRead, ResultFsSearch, ResultFsWrite, ResultFsEdit, ResultError,
            AbortFrame, AbortedTrue, AbortedFalse
        ], None)
    }

    /// `idempotencyKey` (invoke, result).
    pub fn idempotency_key(&self) -> Option<&str> {
        each!(self, f => Some(f.idempotency_key.as_str()), [
            InvokeFsList, InvokeFsStat, InvokeFsRead, InvokeFsSearch, InvokeFsWrite, InvokeFsEdit,
            ResultFsList, ResultFsStat, ResultFsRead, ResultFsSearch, ResultFsWrite, ResultFsEdit, ResultError
        ], None)
    }

    /// `targetRequestId` (abort, aborted).
    pub fn target_request_id(&self) -> Option<&str> {
        each!(self, f => Some(f.target_request_id.as_str()), [AbortFrame, AbortedTrue, AbortedFalse], None)
    }

    /// `operation` (invoke, result).
    pub fn operation(&self) -> Option<ToolOperation> {
        use AdapterFrame as F;
        use ToolOperation as O;
        Some(match self {
            F::InvokeFsList(_) | F::ResultFsList(_) => O::FsList,
            F::InvokeFsStat(_) | F::ResultFsStat(_) => O::FsStat,
            F::InvokeFsRead(_) | F::ResultFsRead(_) => O::FsRead,
            F::InvokeFsSearch(_) | F::ResultFsSearch(_) => O::FsSearch,
            F::InvokeFsWrite(_) | F::ResultFsWrite(_) => O::FsWrite,
            F::InvokeFsEdit(_) | F::ResultFsEdit(_) => O::FsEdit,
            F::ResultError(f) => f.operation,
            _ => return None,
        })
    }

    /// `ok` of a result (its member's value: the generated `True`/`False` do not check it,
    /// the contract did).
    pub fn ok(&self) -> Option<bool> {
        each!(self, f => Some(f.ok.0), [
            ResultFsList, ResultFsStat, ResultFsRead, ResultFsSearch, ResultFsWrite, ResultFsEdit, ResultError
        ], None)
    }

    /// `aborted` of an aborted (its member's value: an `aborted:false` without `error` decodes
    /// as the generated `AbortedTrue`, whose `True` does not check the value).
    pub fn aborted(&self) -> Option<bool> {
        each!(self, f => Some(f.aborted.0), [AbortedTrue, AbortedFalse], None)
    }

    /// The `error` body (a failed result, an aborted:false that carries one).
    pub fn error(&self) -> Option<&AdapterErrorBody> {
        match self {
            AdapterFrame::ResultError(f) => Some(&f.error),
            AdapterFrame::AbortedFalse(f) => f.error.as_ref(),
            _ => None,
        }
    }

    /// The `error.code` (see [`AdapterFrame::error`]).
    pub fn error_code(&self) -> Option<&str> {
        self.error().map(|e| e.code.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn frame(v: serde_json::Value) -> AdapterFrame {
        let mut f = json!({"protocolVersion": "1.0", "adapterId": "a", "adapterVersion": "1.0.0",
            "hostInstanceId": "h", "sessionId": "s", "generation": 1});
        f.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(f).unwrap()
    }

    #[test]
    fn the_views_read_the_members() {
        let err = frame(json!({"kind": "result", "requestId": "r", "idempotencyKey": "k", "operation": "fs.read",
            "ok": false, "error": {"code": "not_found", "message": "m", "retryable": false}}));
        assert_eq!((err.kind(), err.request_id(), err.idempotency_key()), ("result", Some("r"), Some("k")));
        assert_eq!(
            (err.ok(), err.operation(), err.error_code()),
            (Some(false), Some(ToolOperation::FsRead), Some("not_found"))
        );
        let ok = frame(json!({"kind": "result", "requestId": "r", "idempotencyKey": "k", "operation": "fs.stat",
            "ok": true, "data": {"type": "file", "size": 1}}));
        assert_eq!((ok.ok(), ok.operation(), ok.error().is_none()), (Some(true), Some(ToolOperation::FsStat), true));
        let ab = frame(json!({"kind": "aborted", "requestId": "a", "targetRequestId": "r", "aborted": false}));
        assert_eq!(
            (ab.kind(), ab.aborted(), ab.target_request_id(), ab.error_code()),
            ("aborted", Some(false), Some("r"), None)
        );
        let t = frame(json!({"kind": "aborted", "requestId": "a", "targetRequestId": "r", "aborted": true}));
        assert_eq!(t.aborted(), Some(true));
        let e = frame(json!({"kind": "aborted", "requestId": "a", "targetRequestId": "r", "aborted": false,
            "error": {"code": "unknown_request", "message": "m", "retryable": false}}));
        assert_eq!((e.aborted(), e.error_code()), (Some(false), Some("unknown_request")));
        let rv = frame(json!({"kind": "revoked"}));
        assert_eq!((rv.kind(), rv.request_id(), rv.ok()), ("revoked", None, None));
    }
}

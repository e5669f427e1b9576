//! The error codes a daemon answers with beyond those of command validation ([`super::Code`]):
//! the connection envelope, dispatch, restart recovery, the daemon side of an adapter
//! connection, and the reference daemon's scripted agent. Each code carries whether a retry
//! may succeed and the clause of `conformance/SPEC.md` that defines it, so the reference
//! daemon spells no code of its own. A code with the same meaning on both sockets is spelled
//! once, in the catalogue that had it first: a wake's reused idempotency key is
//! [`super::AdapterCode::IdempotencyConflict`].

/// Whether a retry of the same request may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Retryable {
    /// Never: the same request fails again.
    No,
    /// Always (capacity, draining, a busy session, reprovisioning).
    Yes,
    /// Set per occurrence (`adapter_request_timeout`: retryable while queued, indeterminate
    /// once sent). The code's default body says `false`.
    Varies,
}

macro_rules! daemon_codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, $retry:ident, $clause:literal; )*) => {
        /// Every daemon-side error code outside command validation (see the module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DaemonCode {
            $( $(#[$doc])* $variant, )*
        }

        impl DaemonCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [DaemonCode] = &[ $( DaemonCode::$variant, )* ];

            /// The code as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self { $( DaemonCode::$variant => $text, )* }
            }

            /// Whether a retry may succeed.
            pub const fn retryable(self) -> Retryable {
                match self { $( DaemonCode::$variant => Retryable::$retry, )* }
            }

            /// The `retryable` member of its default error body.
            pub const fn default_retryable(self) -> bool {
                matches!(self.retryable(), Retryable::Yes)
            }

            /// The clause of `conformance/SPEC.md` that defines it.
            pub const fn clause(self) -> &'static str {
                match self { $( DaemonCode::$variant => $clause, )* }
            }

            /// Parse a wire code.
            pub fn from_wire(s: &str) -> Option<DaemonCode> {
                match s { $( $text => Some(DaemonCode::$variant), )* _ => None }
            }
        }
    };
}

daemon_codes! {
    // ---- the connection envelope
    /// A `requestId` already in flight on this connection.
    DuplicateRequestId = "duplicate_request_id", No, "PC-1.1";
    /// More requests in flight on the connection than `maxInFlightRequestsPerConnection`.
    ConnectionBusy = "connection_busy", Yes, "PC-1.1";
    /// A response or event over its byte limit, replaced by this error.
    OutboundRecordTooLarge = "outbound_record_too_large", No, "PC-1.1";
    // ---- dispatch
    /// The host failed (a journal or state write, a withheld record).
    InternalError = "internal_error", No, "PC-2.5";
    /// No live session (generation) of that id.
    SessionNotFound = "session_not_found", No, "PC-2.5";
    /// A generation lower than the current one.
    StaleGeneration = "stale_generation", No, "PC-2.5";
    /// The host is draining: no new wake.
    HostDraining = "host_draining", Yes, "PC-2.5";
    /// The host has not finished recovering its durable state: no open or wake is admitted
    /// yet (Pi Daemon 0.3.3 while its recovery runs; the reference daemon listens only once
    /// recovered, so never sends it).
    HostNotReady = "host_not_ready", Yes, "PC-2.5";
    /// A turn is already running in the session.
    SessionBusy = "session_busy", Yes, "PC-2.5";
    /// The session's turn queue is full: no more wakes wait behind its running turn (Pi Daemon
    /// 0.3.3 past its `maxSessionQueueDepth`; the reference daemon answers `session_busy`).
    SessionQueueFull = "session_queue_full", Yes, "PC-2.5";
    /// The host keeps as many sessions as it may (resident, dormant and retained closed
    /// together): a new session is refused until one is closed without being retained.
    SessionCapacity = "session_capacity", Yes, "PC-2.5";
    /// A wake whose outcome is unknown (accepted before a restart); never replayed.
    RequestIndeterminate = "request_indeterminate", No, "PC-2.5";
    /// The turn was aborted.
    Aborted = "aborted", No, "PC-2.5";
    /// The open failed; `details.cause` says why.
    OpenFailed = "open_failed", No, "PC-3.4";
    /// A same-generation open whose tool policy differs from the retained one.
    SessionPolicyConflict = "session_policy_conflict", No, "PC-3.4";
    /// A host-adapter generation that must be opened again with a descriptor.
    ToolAdapterReprovisionRequired = "tool_adapter_reprovision_required", Yes, "PC-6";
    /// A wake queued when the host restarted (it never ran; resubmit under a new key).
    HostRestarted = "host_restarted", No, "PC-6";
    // ---- the daemon side of an adapter connection
    /// The endpoint failed the pre-connect checks.
    AdapterEndpointInsecure = "adapter_endpoint_insecure", No, "PC-1.2";
    /// Connecting did not finish within `requestTimeoutMs`.
    AdapterConnectTimeout = "adapter_connect_timeout", No, "PC-3.4";
    /// No `bound` within `requestTimeoutMs` of the `bind`.
    AdapterBindTimeout = "adapter_bind_timeout", No, "PC-3.4";
    /// A call before the adapter answered `bound`.
    AdapterNotBound = "adapter_not_bound", No, "PC-3.4";
    /// The binding was revoked by the daemon.
    AdapterRevoked = "adapter_revoked", No, "PC-3.4";
    /// The adapter closed the connection.
    AdapterConnectionClosed = "adapter_connection_closed", No, "PC-4.3";
    /// The socket failed (connect, read or write).
    AdapterConnectionFailed = "adapter_connection_failed", No, "PC-4.3";
    /// Concurrency and queue are full (with `retryAfterMs`), before any wire write.
    AdapterQueueCapacity = "adapter_queue_capacity", Yes, "PC-4.4";
    /// `requestTimeoutMs` expired: retryable while queued, indeterminate while active.
    AdapterRequestTimeout = "adapter_request_timeout", Varies, "PC-4.4";
    /// More tombstones than `maxIdempotencyKeys`: the connection fails.
    AdapterAbortCapacity = "adapter_abort_capacity", No, "PC-4.4";
    /// The `invoke` line would exceed `maxRequestBytes` (that call only).
    AdapterRequestTooLarge = "adapter_request_too_large", No, "PC-4.4";
    /// The call's payload contains the capability handle; it is never sent.
    AdapterSecretInRequest = "adapter_secret_in_request", No, "PC-7.1";
    // ---- the reference daemon's scripted agent (a tool call's error in `toolCalls`)
    /// A `TOOL` line naming none of the six tools.
    UnknownTool = "unknown_tool", No, "PC-4.4";
    /// `TOOL` arguments that are not a JSON object.
    InvalidToolArguments = "invalid_tool_arguments", No, "PC-4.4";
    /// A tool call in a session opened without a tool adapter.
    ToolUnavailable = "tool_unavailable", No, "PC-4.4";
}

impl std::fmt::Display for DaemonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{AdapterCode, Code};

    #[test]
    fn codes_are_unique_round_trip_and_do_not_repeat_the_other_catalogues() {
        let mut seen = std::collections::HashSet::new();
        for &c in DaemonCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(DaemonCode::from_wire(c.as_str()), Some(c));
            assert!(Code::from_wire(c.as_str()).is_none(), "{c} is already a contract::Code");
            assert!(AdapterCode::ALL.iter().all(|a| a.as_str() != c.as_str()), "{c} is already an AdapterCode");
            assert!(c.clause().starts_with("PC-"), "{c}");
        }
        assert_eq!(DaemonCode::from_wire("nope"), None);
    }

    #[test]
    fn retryable_values_follow_the_spec() {
        for (c, r) in [
            (DaemonCode::ConnectionBusy, true),
            (DaemonCode::HostDraining, true),
            (DaemonCode::HostNotReady, true),
            (DaemonCode::SessionBusy, true),
            (DaemonCode::SessionCapacity, true),
            (DaemonCode::ToolAdapterReprovisionRequired, true),
            (DaemonCode::AdapterQueueCapacity, true),
            (DaemonCode::DuplicateRequestId, false),
            (DaemonCode::RequestIndeterminate, false),
            (DaemonCode::AdapterRequestTimeout, false),
        ] {
            assert_eq!(c.default_retryable(), r, "{c}");
        }
        assert_eq!(DaemonCode::AdapterRequestTimeout.retryable(), Retryable::Varies);
    }
}

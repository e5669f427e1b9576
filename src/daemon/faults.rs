//! Fault switches: deliberate, test-only breakages of the reference daemon.
//!
//! Each [`DaemonFault`] breaks exactly one rule of SPEC §1.1, §1.2, §2, §3, §4.2–§4.4 or §6 in
//! the reference daemon, so that the daemon conformance runner can be shown to fail:
//! `pi-conform daemon-kill-matrix` runs the daemon suite once per fault and reports which
//! cases each one kills, and `tests/daemon_kill_matrix.rs` pins that matrix to
//! `conformance/daemon-kill-matrix.txt`.
//!
//! Production runs with [`DaemonFaults::NONE`]. Faults are reachable only through the hidden
//! `--fault NAME` flag of `serve-daemon`, through [`crate::daemon::server::DaemonConfig`]'s
//! `faults` field, and through the `*_with` constructors of the host, link and runtime.
//!
//! The matrix runs the faulty daemon as a real child process (`serve-daemon --fault NAME`)
//! with a restart script, exactly as an operator runs the daemon suite with `--restart-cmd`:
//! see `conform::killmatrix::FaultyDaemon`. This module never imports the runner.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde_json::{json, Value};

use crate::contract::command::{route_version, ADMISSION_CODES};
use crate::contract::{parse_command, Code, Command, CommandError, HostContext};

macro_rules! faults {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $clause:literal, $rule:literal; )*) => {
        /// One deliberate breakage of the reference daemon (see the module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DaemonFault {
            $( $(#[$doc])* $variant, )*
        }

        impl DaemonFault {
            /// Every fault, in matrix order.
            pub const ALL: &'static [DaemonFault] = &[ $( DaemonFault::$variant, )* ];

            /// The stable kebab-case name (`--fault NAME`, `conformance/daemon-kill-matrix.txt`).
            pub fn name(self) -> &'static str {
                match self { $( DaemonFault::$variant => $name, )* }
            }

            /// The clause of `conformance/SPEC.md` whose rule it breaks.
            pub fn clause(self) -> &'static str {
                match self { $( DaemonFault::$variant => $clause, )* }
            }

            /// One line: the rule it breaks, as the broken daemon behaves.
            pub fn description(self) -> &'static str {
                match self { $( DaemonFault::$variant => $rule, )* }
            }
        }
    };
}

faults! {
    // ---- handshake and envelope
    /// The handshake advertises only `supportedProtocolVersions`.
    SupportedVersions033 = "supported-versions-0.3.3", "PC-2.4",
        "the handshake sends only supportedProtocolVersions (no supportedVersions), as Pi Daemon 0.3.3";
    /// duplicate_request_id is answered as "1.0".
    Echo10OnDuplicate = "echo-1.0-on-duplicate", "PC-2.2",
        "a duplicate_request_id refusal is answered with protocolVersion \"1.0\" instead of the request's";
    /// Every 2.x response says "2.0".
    NoMinorEcho = "no-minor-echo", "PC-2.2",
        "responses to a 2.x request always carry \"2.0\" instead of echoing the exact minor";
    /// A handshake without payload is answered ok.
    HandshakeWithoutPayloadOk = "handshake-without-payload-ok", "PC-2.1",
        "a handshake without payload is answered ok instead of invalid_field";
    /// The connection stays open after invalid JSON.
    KeepOpenOnInvalidJson = "keep-open-on-invalid-json", "PC-1.1",
        "after answering invalid_json the connection stays open instead of closing";
    /// Keys and enumerated values are matched ignoring letter case.
    KeysCaseInsensitive = "keys-case-insensitive", "PC-4.1",
        "keys, and the values of kinds, adapter operations, modes, the transport and resource policies, are matched ignoring letter case (as Go's encoding/json matches keys): a command, descriptor or adapter frame spelled Operations, Ok or FS.read is taken for the valid one";
    /// The client line limit counts the LF.
    LineLimitCountsLf = "line-limit-counts-lf", "PC-1.1",
        "a client line of exactly maxLineBytes (LF excluded) is refused line_too_large: the limit counts the LF";
    /// A client line one byte over the limit is read.
    LineLimitOnePast = "line-limit-one-past", "PC-1.1",
        "a client line of maxLineBytes + 1 bytes (LF excluded) is read and answered instead of line_too_large";
    /// Every command refusal carries one generic code.
    GenericRefusalCode = "generic-refusal-code", "PC-2.1",
        "every command validation refusal is answered with one generic code (bad_request) instead of its own";
    /// No connection cap: every connection is served.
    NoConnectionCap = "no-connection-cap", "PC-1.1",
        "connections past maxConnections are served (none is closed, nothing reclaimed) instead of closed without a line";
    /// Events say "2.0" whatever version the session was opened with.
    EventsVersionFixed = "events-version-fixed", "PC-2.3",
        "events carry protocolVersion \"2.0\" instead of the version of the session's successful open (\"2.1\")";
    /// Events reach connections attached to any generation of the session.
    AttachmentsFollowSession = "attachments-follow-session", "PC-2.3",
        "events go to connections attached to any generation of the session, so an attachment to a replaced generation keeps receiving the new one's events";
    /// The daemon socket is left writable by everyone (mode 0666).
    SocketWorldWritable = "socket-world-writable", "PC-1.1",
        "the daemon socket is made mode 0666 (others can connect and drive every session) instead of 0600";
    /// A draining host still starts wakes.
    DrainAdmitsWakes = "drain-admits-wakes", "PC-2.5",
        "after a drain a wake is admitted and run instead of refused host_draining";
    /// A draining host still admits opens.
    DrainAdmitsOpens = "drain-admits-opens", "PC-2.5",
        "after a drain an open is admitted instead of refused host_draining";
    /// An aborted turn's tool call is left running at the adapter.
    AbortedTurnLeavesCall = "aborted-turn-leaves-call", "PC-2.5",
        "a turn aborted (by a client's abort or a drain's timeout) while it waits on a tool call ends, but the call is not cancelled: no abort reaches the adapter until the call's own timeout";
    /// An aborted turn's active call is cancelled before the calls queued behind it.
    AbortFreesSlotFirst = "abort-frees-slot-first", "PC-4.4",
        "an aborted turn cancels its calls in order, the active one first: the slot it frees goes to a call of the same turn still queued, which is sent to the adapter (then aborted)";
    /// A drain that timed out reports one aborted turn, however many it aborted.
    DrainMiscountsAborted = "drain-miscounts-aborted", "PC-2.5",
        "a drain that times out answers abortedTurns:1 whatever the number of turns it aborted";
    /// A drain that timed out counts the running turns but does not abort them.
    DrainReportsWithoutAborting = "drain-reports-without-aborting", "PC-2.5",
        "a drain that times out answers abortedTurns with the running turns but leaves them running";
    /// host_draining is answered retryable:false.
    DrainingNotRetryable = "draining-not-retryable", "PC-2.5",
        "host_draining is answered with retryable:false, so clients give up on a host that will be back";
    /// A drain aborts the running turns at once instead of waiting for them.
    DrainAbortsAtOnce = "drain-aborts-at-once", "PC-2.5",
        "a drain aborts every running turn at once (timedOut:true) instead of waiting up to timeoutMs for them to settle";
    // ---- resources and admission
    /// A v1 open with a tools object binds like v2.
    V1ToolsObjectAccepted = "v1-tools-object-accepted", "PC-3.1",
        "a v1 open with a host-adapter tools object is admitted and bound as in v2 instead of invalid_field";
    /// A relative endpoint path is resolved against the daemon's working directory.
    RelativeEndpointAccepted = "relative-endpoint-accepted", "PC-3.2.5",
        "a relative endpoint path is resolved against the daemon's working directory instead of check 5's refusal";
    /// Check 8 (binding against host, session, generation) is not applied.
    SkipBindingCheck = "skip-binding-check", "PC-3.2.8",
        "descriptor check 8 is not applied: a descriptor bound to another host/session/generation is admitted";
    /// Check 11 (the fit check) is not applied.
    SkipFitCheck = "skip-fit-check", "PC-3.3",
        "the fit check is not applied: a descriptor whose bind/bound do not fit its limits is admitted";
    /// The endpoint is connected to before the descriptor is judged.
    ConnectBeforeAdmission = "connect-before-admission", "PC-3.2",
        "the daemon connects to the descriptor's endpoint before checking the descriptor, then refuses";
    /// The endpoint's ownership and mode are not checked before connecting.
    SkipEndpointCheck = "skip-endpoint-check", "PC-1.2",
        "the endpoint is connected to without the owner-private checks (a 0666 socket is used)";
    /// The endpoint's modes are checked for write bits only.
    EndpointWriteBitsOnly = "endpoint-write-bits-only", "PC-1.2",
        "the endpoint socket and its directory are refused only for group/other write bits (a 0640 socket or a 0750 directory is used)";
    /// A failed bind's cause names the endpoint.
    EndpointInFailureCause = "endpoint-in-failure-cause", "PC-6",
        "an open whose bind fails answers open_failed with the descriptor's endpoint path in details.cause.message";
    /// A descriptor refusal names the descriptor's handle.
    RefusalEchoesHandle = "refusal-echoes-handle", "PC-3.2",
        "a descriptor refused for its binding, operations or limits (tool_adapter_binding_mismatch, unsupported_tool_operation, invalid_tool_adapter_limit) names the descriptor's capabilityHandle in the refusal's message";
    /// The endpoint's modes are checked for group bits only.
    EndpointGroupBitsOnly = "endpoint-group-bits-only", "PC-1.2",
        "the endpoint socket and its directory are refused only for group bits (a 0602 or 0604 socket, a 0701 or 0703 directory is used)";
    /// The directories above the endpoint's own are not resolved.
    EndpointAncestorsUnchecked = "endpoint-ancestors-unchecked", "PC-1.2",
        "the endpoint path is checked lexically only: a socket whose directory is reached through a symlinked ancestor is used";
    /// The endpoint is checked through symlinks.
    EndpointFollowsSymlinks = "endpoint-follows-symlinks", "PC-1.2",
        "the endpoint checks follow symlinks (stat, not lstat): a symlink to a private socket, or through a symlinked directory, is used";
    // ---- binding and policy
    /// Any `bound` completes the bind.
    IgnoreBoundEcho = "ignore-bound-echo", "PC-3.4",
        "any bound frame completes the bind: its echo of identity, operations and limits is not compared";
    /// open_failed without details.cause.
    GenericOpenFailedCause = "generic-open-failed-cause", "PC-3.4",
        "a failed bind is answered open_failed without details.cause.code, as Pi Daemon 0.3.3";
    /// close does not revoke the binding.
    NoRevokeOnClose = "no-revoke-on-close", "PC-3.4",
        "close does not revoke the session's adapter binding (the connection is leaked open)";
    /// A replaced generation's binding is not revoked.
    NoRevokeOnReplacement = "no-revoke-on-replacement", "PC-3.4",
        "opening a newer generation does not revoke the old generation's binding (it is leaked open)";
    /// A close while a turn runs leaves its binding (and the call in flight) alive.
    CloseLeavesCallRunning = "close-leaves-call-running", "PC-3.4",
        "a close answered ok while the session's turn waits on a tool call neither revokes the binding nor ends the call: it runs on until requestTimeoutMs";
    /// After `revoke`, the adapter connection stays open until the adapter closes it.
    RevokeKeepsConnection = "revoke-keeps-connection", "PC-3.4",
        "after revoke the daemon leaves the adapter connection open until the adapter ends it: no close backstop for an adapter that neither answers revoked nor closes";
    /// After `revoke`, every read from the adapter restarts the close grace.
    RevokeGraceRestarts = "revoke-grace-restarts", "PC-3.4",
        "after revoke each read from the adapter restarts the close grace: an adapter that keeps sending bytes without closing holds the connection open for ever";
    /// A re-open of the same generation and policy binds again.
    ReopenRebinds = "reopen-rebinds", "PC-3.4",
        "a re-open with the same generation and policy binds the adapter again instead of created:false alone";
    /// Dropping the last handle of a link leaves its connection open, unrevoked.
    DroppedLinkNotRevoked = "dropped-link-not-revoked", "PC-1.2",
        "a binding dropped without an explicit revoke (the one two concurrent re-opens of a failed generation replace) is neither revoked nor closed: two connections of one generation stay open";
    /// A no-tools re-open of a host-adapter generation is accepted.
    NoReprovisionRule = "no-reprovision-rule", "PC-3.4",
        "a no-tools re-open of a generation retained with a host-adapter policy is accepted instead of tool_adapter_reprovision_required";
    /// A no-tools re-open of a live, bound generation is accepted.
    NoToolsReopenOfLiveAccepted = "no-tools-reopen-of-live-accepted", "PC-3.4",
        "a no-tools re-open of a generation whose adapter link is live is answered created:false (the rule is applied to dormant generations only)";
    // ---- tool traffic
    /// Invokes carry an extra key.
    InvokeExtraKey = "invoke-extra-key", "PC-4.2",
        "invoke frames carry an extra toolCallId key (not a closed frame)";
    /// A socket error on the adapter connection does not fail it.
    IoErrorIgnored = "io-error-ignored", "PC-4.3",
        "a socket error on the adapter connection (a write the adapter no longer reads: it shut its reading half) does not fail the connection: the call fails only at requestTimeoutMs and later invokes are written into the dead socket";
    /// Timeouts do not abort.
    NoAbortOnTimeout = "no-abort-on-timeout", "PC-4.4",
        "an invoke whose requestTimeoutMs expires fails locally without sending abort";
    /// An adapter line one byte over maxResponseBytes is read.
    AdapterLineOnePast = "adapter-line-one-past", "PC-1.2",
        "an adapter line of maxResponseBytes + 1 bytes (LF included) is read instead of failing the connection: the adapter-side limit excludes the LF";
    /// An adapter line of exactly maxResponseBytes is refused.
    AdapterLineAtLimitRefused = "adapter-line-at-limit-refused", "PC-1.2",
        "an adapter line of exactly maxResponseBytes bytes (LF included) fails the connection adapter_protocol_invalid: the limit is applied one byte short";
    /// A call that timed out on the wire is sent again under a new idempotency key.
    TimedOutCallReplayed = "timed-out-call-replayed", "PC-4.4",
        "a call that timed out after its invoke was sent (aborted, indeterminate) is sent again once, with the same operation and payload under a new requestId and a new idempotencyKey: a blind replay";
    /// Calls beyond the admission limits are sent anyway.
    NoQueueCapacity = "no-queue-capacity", "PC-4.4",
        "a call beyond maxConcurrentRequests + maxQueuedRequests is written to the adapter at once instead of refused with adapter_queue_capacity";
    /// The queue refuses one call early.
    QueueCapacityOneShort = "queue-capacity-one-short", "PC-4.4",
        "admission refuses with adapter_queue_capacity one call short of maxConcurrentRequests + maxQueuedRequests: the queue never fills exactly";
    /// The queue admits one call too many.
    QueueCapacityOnePast = "queue-capacity-one-past", "PC-4.4",
        "admission queues one call more than maxConcurrentRequests + maxQueuedRequests instead of refusing it with adapter_queue_capacity";
    /// retryAfterMs without its clamps.
    RetryAfterUnclamped = "retry-after-unclamped", "PC-4.4",
        "adapter_queue_capacity's retryAfterMs is floor(requestTimeoutMs / 20) without the clamps to 25 and 1000";
    /// A call times out early.
    TimeoutEarly = "timeout-early", "PC-4.4",
        "a call expires at half its requestTimeoutMs: a result answered inside the timeout is dropped and the call aborted";
    /// `./` and `dir/` tool paths are dispatched, as Pi Daemon 0.3.3 does.
    PassNonCanonicalPaths = "pass-non-canonical-paths-0.3.3", "PC-5.1",
        "tool paths `./` and `dir/` (one trailing slash) are sent to the adapter instead of refused before dispatch, as Pi Daemon 0.3.3";
    /// connection_busy one request early.
    InFlightOneShort = "in-flight-one-short", "PC-1.1",
        "a connection with maxInFlightRequestsPerConnection − 1 requests in flight refuses the next with connection_busy: the limit is never reached";
    /// No in-flight limit per connection.
    NoInFlightLimit = "no-in-flight-limit", "PC-1.1",
        "requests beyond maxInFlightRequestsPerConnection in flight on one connection are dispatched instead of refused connection_busy";
    /// connection_busy closes the connection.
    BusyCloses = "busy-closes", "PC-1.1",
        "a connection_busy refusal closes the connection instead of leaving it open";
    /// Responses over maxResponseBytes are sent.
    NoResponseCap = "no-response-cap", "PC-1.1",
        "a response over maxResponseBytes is sent as it is instead of replaced by outbound_record_too_large";
    /// A reader that does not read is never disconnected.
    UnboundedOutbound = "unbounded-outbound", "PC-1.1",
        "a connection's outbound queue has no bound: a client that stops reading gets its responses queued without end instead of being disconnected past maxOutboundBytesPerConnection";
    /// The invoke size check counts the LF twice.
    InvokeLimitOneShort = "invoke-limit-one-short", "PC-1.1",
        "an invoke line of exactly maxRequestBytes (LF included) is refused adapter_request_too_large instead of sent: the size check counts the LF twice";
    /// Invokes over maxRequestBytes are sent.
    InvokeOverLimitSent = "invoke-over-limit-sent", "PC-1.1",
        "an invoke line over maxRequestBytes is written to the adapter instead of the call failing adapter_request_too_large before any write";
    /// An empty tool path is dispatched.
    PassEmptyPath = "pass-empty-path", "PC-5.1",
        "an empty tool path is sent to the adapter instead of refused before dispatch";
    /// An absolute tool path is dispatched.
    PassAbsolutePath = "pass-absolute-path", "PC-5.1",
        "an absolute tool path (a leading /, otherwise valid) is sent to the adapter instead of refused before dispatch";
    /// A tool path with a backslash is dispatched.
    PassBackslashPath = "pass-backslash-path", "PC-5.1",
        "a tool path with a backslash (otherwise valid) is sent to the adapter instead of refused before dispatch";
    /// A tool path with a C0 control character is dispatched.
    PassControlCharPath = "pass-control-char-path", "PC-5.1",
        "a tool path with a C0 control character (otherwise valid) is sent to the adapter instead of refused before dispatch";
    /// A tool path with DEL is dispatched.
    PassDelPath = "pass-del-path", "PC-5.1",
        "a tool path with DEL (U+007F, otherwise valid) is sent to the adapter instead of refused before dispatch";
    /// `..` is refused only between two segments.
    DotDotInnerOnly = "dot-dot-inner-only", "PC-5.1",
        "the daemon-side path check refuses `..` only between two segments: a leading `..`, a trailing `..` or a trailing `.` is sent to the adapter";
    /// Tool calls of operations the descriptor does not grant are sent.
    IgnoreOperationGrant = "ignore-operation-grant", "PC-4.2",
        "a tool call of an operation the descriptor does not grant is sent to the adapter instead of refused before dispatch";
    /// Tombstones are kept for the connection's life.
    TombstonesNeverExpire = "tombstones-never-expire", "PC-4.4",
        "tombstones of aborted and timed-out calls are kept for the connection's life instead of idempotencyTtlMs, so maxIdempotencyKeys timeouts however far apart fail a healthy connection";
    /// One adapter queue for every session.
    SharedAdapterQueue = "shared-adapter-queue", "PC-4.4",
        "every session's active calls count against each session's maxConcurrentRequests + maxQueuedRequests: one queue for all sessions instead of one per generation";
    /// An abort reuses its target's requestId.
    AbortReusesTargetId = "abort-reuses-target-id", "PC-1.2",
        "an abort carries its target's requestId as its own instead of a fresh one";
    /// The 4096-byte path limit counts UTF-16 units.
    PathLimitInUnits = "path-limit-in-units", "PC-5.1",
        "the 4096-byte tool path limit counts UTF-16 units: a non-ASCII path over 4096 bytes but within 4096 units is sent to the adapter";
    /// An adapter frame the contract refuses fails the pending calls, not the connection.
    KeepConnectionOnInvalidFrame = "keep-connection-on-invalid-frame", "PC-4.3",
        "an adapter frame the contract refuses fails the pending calls but not the connection: later calls are still sent on it";
    /// A matching `aborted` fails the connection.
    RejectAborted = "reject-aborted", "PC-4.3",
        "an aborted frame fails the connection (adapter_response_mismatch) even when it acknowledges the daemon's own abort";
    /// A `revoked` is ignored without being judged.
    UncheckedRevoked = "unchecked-revoked", "PC-4.3",
        "a revoked frame is ignored without being judged: a bad identity or an extra key does not fail the connection";
    /// A valid `revoked` fails the connection.
    RejectRevoked = "reject-revoked", "PC-4.3",
        "a valid revoked frame fails the connection instead of being ignored";
    /// Results with another idempotencyKey are accepted.
    AcceptMismatchedResults = "accept-mismatched-results", "PC-4.3",
        "a result whose idempotencyKey differs from its invoke's is accepted instead of failing the connection";
    /// One invoke more than maxConcurrentRequests is outstanding.
    ConcurrencyOnePast = "concurrency-one-past", "PC-4.4",
        "one more invoke than maxConcurrentRequests is sent while the others are outstanding (the queue is drained one too far)";
    /// A call's timeout starts when its invoke is sent.
    TimeoutFromDispatch = "timeout-from-dispatch", "PC-4.4",
        "a call's requestTimeoutMs starts when its invoke is sent, not at admission (queue wait does not count)";
    /// Queued calls are not failed when the adapter closes.
    QueuedNotFailedOnEof = "queued-not-failed-on-eof", "PC-4.3",
        "when the adapter connection ends, only the calls in flight fail: queued calls are left waiting";
    /// One tombstone more than maxIdempotencyKeys is kept.
    AbortCapacityOnePast = "abort-capacity-one-past", "PC-4.4",
        "one tombstone more than maxIdempotencyKeys is kept instead of failing the connection with adapter_abort_capacity";
    /// Results of another granted operation are accepted.
    AcceptOtherOperationResults = "accept-other-operation-results", "PC-4.3",
        "a result whose operation differs from its invoke's (another granted operation) is accepted instead of failing the connection";
    /// A second copy of a result is ignored.
    IgnoreDuplicateResults = "ignore-duplicate-results", "PC-4.3",
        "a duplicate result for a call already completed is ignored instead of failing the connection";
    /// A second `bound` is ignored.
    IgnoreSecondBound = "ignore-second-bound", "PC-4.3",
        "a second bound on a bound connection is ignored instead of failing the connection";
    /// A frame before `bound` is ignored.
    IgnoreFrameBeforeBound = "ignore-frame-before-bound", "PC-4.3",
        "a well-formed frame before bound (a revoked) is ignored instead of failing the connection";
    /// An `aborted` is not matched against the daemon's own aborts.
    UncheckedAborted = "unchecked-aborted", "PC-4.3",
        "an aborted with no matching abort (another requestId, or a call never aborted) is ignored instead of failing the connection";
    /// No tombstone: a late result of an aborted call is fatal.
    NoTombstone = "no-tombstone", "PC-4.4",
        "a result of a timed-out call arriving before its aborted fails the connection instead of being dropped while its tombstone lives";
    /// A tombstone drops a result under its requestId whatever its key.
    TombstoneIgnoresKey = "tombstone-ignores-key", "PC-4.4",
        "a result arriving before aborted under an aborted call's requestId is dropped as its late result even with another idempotencyKey, instead of failing the connection";
    /// The reflection scan skips `aborted` frames.
    AbortedSecretUnchecked = "aborted-secret-unchecked", "PC-4.3",
        "an aborted frame carrying the capability handle is accepted: the reflection scan skips aborted frames";
    /// The fit check lets a frame one byte over its limit pass.
    FitOnePast = "fit-one-past", "PC-3.3",
        "the fit check admits a descriptor whose bind or bound line is exactly one byte over its limit";
    /// The binding is compared with the live one before its members are checked.
    BindingComparedFirst = "binding-compared-first", "PC-3.2",
        "a descriptor whose binding is malformed (a host or session id no daemon can have, a capability handle inside the session id) and bound elsewhere is refused tool_adapter_binding_mismatch: check 8 runs before checks 6 and 7";
    /// Descriptor refusals carry no details.field.
    AdmissionRefusalWithoutField = "admission-refusal-without-field", "PC-3.2",
        "a descriptor admission refusal is answered without details.field";
    /// Events go to every connection.
    EventsToAll = "events-to-all", "PC-2.3",
        "a session's events are sent to every open connection, attached or not";
    /// Every call of an operation carries the same idempotencyKey.
    OneIdempotencyKeyPerOperation = "one-idempotency-key-per-operation", "PC-4.4",
        "the invoke's idempotencyKey is derived from the operation alone: two different tool calls of one operation share a key";
    /// A lower generation is answered session_not_found.
    StaleGenerationAsNotFound = "stale-generation-as-not-found", "PC-2.5",
        "a command naming a lower generation than the live one is answered session_not_found instead of stale_generation";
    /// stale_generation carries no details.
    StaleGenerationWithoutDetails = "stale-generation-without-details", "PC-2.5",
        "stale_generation is answered without details {currentGeneration, receivedGeneration}";
    /// The host snapshot names an adapter endpoint's directory.
    SnapshotLeaksEndpoint = "snapshot-leaks-endpoint", "PC-2.4",
        "the handshake's host snapshot names the directory of the last host-adapter open's endpoint (adapterEndpointDir)";
    /// A session status names the session's adapter endpoint.
    EndpointInStatus = "endpoint-in-status", "PC-6",
        "the status of a session opened with a host adapter names its endpoint path (adapterEndpoint) instead of keeping the endpoint off every answer";
    /// No bound ever times out.
    NoBindTimeout = "no-bind-timeout", "PC-3.4",
        "a bind without bound never times out: the open waits on a silent adapter for ever instead of failing after requestTimeoutMs";
    /// A session's event sequence never moves on.
    EventSequenceFrozen = "event-sequence-frozen", "PC-2.3",
        "every event of a session carries sequence 1: the sequence is not raised per event";
    /// One event sequence for the whole host.
    GlobalEventSequence = "global-event-sequence", "PC-2.3",
        "events take their sequence from one host-wide counter instead of one per session";
    /// status with a sessionId answers session_not_found for a resident session.
    SessionStatusNotFound = "session-status-not-found", "PC-2.5",
        "status with the sessionId of a resident session is answered session_not_found";
    /// An open that creates a generation answers no session.
    OpenSessionNull = "open-session-null", "PC-2.5",
        "an open that creates a generation answers {created:true, session:null} instead of the session resource it opened";
    /// Tools added on a same-generation reopen are accepted.
    ToolsAddedOnReopen = "tools-added-on-reopen", "PC-3.4",
        "a live generation opened without tools and re-opened with a descriptor answers created:false instead of session_policy_conflict";
    /// A session status without its queue telemetry.
    StatusWithoutTelemetry = "status-without-telemetry", "PC-4.4",
        "status of a session with a bound tool adapter answers the session without its queue telemetry (toolQueue empty)";
    /// Events are sent whatever their size.
    NoEventCap = "no-event-cap", "PC-1.1",
        "an event over maxEventBytes is sent as it is instead of being replaced by eventDropped";
    /// The eventDropped replacing an event takes a sequence of its own.
    EventDroppedNewSequence = "event-dropped-new-sequence", "PC-1.1",
        "the eventDropped that replaces an event over maxEventBytes takes the next sequence, leaving the dropped event's sequence unused, instead of taking its place";
    /// The telemetry's per-operation summaries say nothing.
    TelemetrySummariesEmpty = "telemetry-summaries-empty", "PC-4.4",
        "the queue telemetry's per-operation queue-wait and latency summaries are null, whatever calls ran";
    /// The summaries' min and max are scaled a millionfold too small.
    TelemetryExtremesScaled = "telemetry-extremes-scaled", "PC-4.4",
        "the per-operation summaries' min and max are in the wrong unit (a millionth of their value, rounded to 0) while the mean is right: a mean above the maximum";
    /// The summaries' min never leaves 0.
    TelemetryMinStuckAtZero = "telemetry-min-stuck-at-zero", "PC-4.4",
        "the per-operation summaries' min stays 0 whatever the calls took (the first value is never taken as the least)";
    /// An adapter's error result is not counted as a failed call.
    ErrorResultsUncounted = "error-results-uncounted", "PC-4.4",
        "a call the adapter answers with an error result is not counted as failed: the failed counter stays 0 after it";
    /// Timed-out and cancelled calls are not counted.
    TelemetryEndsUncounted = "telemetry-ends-uncounted", "PC-4.4",
        "the queue telemetry counts no timed-out and no cancelled call (both counters stay 0)";
    /// A call that times out while still queued is not counted.
    QueuedTimeoutUncounted = "queued-timeout-uncounted", "PC-4.4",
        "a call that times out while still queued (never sent) is not counted as timed out: the queue telemetry counts only the active calls that expired";
    /// A call that times out while still queued is taken off the timed-out counter.
    QueuedTimeoutWraps = "queued-timeout-wraps", "PC-4.4",
        "a call that times out while still queued (never sent) is taken off the queue telemetry's timed-out counter instead of added to it: it wraps to nearly 2^64";
    /// A connection failure takes the calls it fails off the failed counter.
    TelemetryFailedWraps = "telemetry-failed-wraps", "PC-4.4",
        "when the adapter connection fails, the queue telemetry's failed counter is decremented by the calls it fails instead of incremented: it wraps to nearly 2^64";
    /// Refused and completed calls are taken off their counters.
    TelemetryCallsWrap = "telemetry-calls-wrap", "PC-4.4",
        "a call refused at admission or completed is taken off the queue telemetry's rejected / completed counter instead of added to it: both wrap to nearly 2^64";
    /// The queue reads as saturated whenever the binding is live.
    TelemetrySaturatedWhenIdle = "telemetry-saturated-when-idle", "PC-4.4",
        "the queue telemetry reports the queue saturated whenever the binding is live, even with nothing in flight";
    /// The queue reads as saturated at maxConcurrentRequests − maxQueuedRequests calls.
    TelemetrySaturatedEarly = "telemetry-saturated-early", "PC-4.4",
        "the queue telemetry reports the queue saturated once maxConcurrentRequests − maxQueuedRequests calls are in flight (one call of 2 + 1 slots), not when both are full";
    /// Saturation compares active − queued calls with the capacity.
    TelemetryOccupancySubtracted = "telemetry-occupancy-subtracted", "PC-4.4",
        "the queue telemetry compares the active calls less the queued ones (not their sum) with maxConcurrentRequests + maxQueuedRequests: a queue full with one active and one queued call of 1 + 1 slots does not read saturated";
    /// The queue never reads as saturated.
    TelemetryNeverSaturated = "telemetry-never-saturated", "PC-4.4",
        "the queue telemetry never reports the queue saturated, even while the active and queued calls fill maxConcurrentRequests and maxQueuedRequests";
    /// A settled wake key runs again.
    WakeKeyReruns = "wake-key-reruns", "PC-2.5",
        "a wake under a settled key with the same payload runs the turn again instead of replaying its journaled outcome";
    /// A wake under a running key is admitted as a new one (the busy session refuses it).
    WakeJoinMissing = "wake-join-missing", "PC-2.5",
        "the same wake sent while its turn runs is admitted as a new turn (the session answers session_busy) instead of joining the running one";
    /// The wake journal of an earlier process is not consulted.
    WakeJournalForgottenOnRestart = "wake-journal-forgotten-on-restart", "PC-6",
        "after a restart a wake key settled before it is admitted as new and its turn runs again instead of replaying the journaled outcome";
    /// A wake key reused with another payload runs as a new wake.
    WakeConflictIgnored = "wake-conflict-ignored", "PC-2.5",
        "a wake under a settled key with another payload runs as a new wake instead of idempotency_conflict";
    // ---- restart
    /// Shutdown ends the adapter connections without a revoke.
    ShutdownWithoutRevoke = "shutdown-without-revoke", "PC-3.4",
        "a graceful host shutdown (SIGTERM) ends the process without sending revoke on the adapter connections";
    /// An accepted wake found at a restart is not counted as indeterminate work.
    IndeterminateNotCounted = "indeterminate-not-counted", "PC-6",
        "a wake accepted before a restart is marked indeterminate but not counted: the host reports ready:true with indeterminate work";
    /// A wake already indeterminate at a restart is not counted again.
    IndeterminateForgottenOnSecondRestart = "indeterminate-forgotten-on-second-restart", "PC-6",
        "a wake already indeterminate when the host restarts again is not counted: after a second restart the host reports ready:true without any reconciliation";
    /// A wake already indeterminate at a restart is taken off the count.
    IndeterminateCountWraps = "indeterminate-count-wraps", "PC-6",
        "a wake already indeterminate at a restart is taken off the recovery's indeterminate count instead of counted: the count wraps to nearly 2^64 (the host still reports ready:false)";
    /// An accepted wake found at a restart is recovered as if it had been queued.
    AcceptedWakeRequeued = "accepted-wake-requeued", "PC-6",
        "a wake accepted before a restart is recovered as a queued one (failed tool_adapter_reprovision_required, not indeterminate): the same wake is answered that code instead of request_indeterminate and the host is ready";
    /// A wake still queued at a restart is recovered as if it had been accepted.
    QueuedWakeIndeterminate = "queued-wake-indeterminate", "PC-6",
        "a wake still queued behind a running turn when the host restarts (journaled, its turn never started) is recovered as indeterminate instead of failing terminally with tool_adapter_reprovision_required: the same wake is answered request_indeterminate";
    /// No quarantine after restart.
    NoQuarantine = "no-quarantine", "PC-6",
        "after a restart host-adapter sessions are not quarantined (not in quarantinedSessions)";
    /// A durable session's close writes nothing.
    CloseNotPersisted = "close-not-persisted", "PC-6",
        "the close of a durable session is answered ok without its record being removed or marked closed: a restart brings the session back";
    /// A session record stores the raw tools policy.
    PersistDescriptor = "persist-descriptor", "PC-6",
        "a new host-adapter session's record stores the raw tools policy (the descriptor, endpoint and capability handle included) instead of the nonsecret summary";
    /// Sessions without tools are quarantined too.
    QuarantinesPlainSessions = "quarantines-plain-sessions", "PC-6",
        "a restart quarantines every retained session, tools:\"none\" ones included";
    /// A retained tool-less generation re-opened after a restart stays dormant.
    PlainReopenStaysDormant = "plain-reopen-stays-dormant", "PC-6",
        "after a restart, an open of a retained tools:\"none\" generation answers created:false without making it live (its wakes stay session_not_found)";
    /// A live command on a quarantined generation is answered reprovision_required.
    QuarantinedAsReprovision = "quarantined-as-reprovision", "PC-6",
        "a live wake, status or attach of a quarantined generation is answered tool_adapter_reprovision_required instead of session_not_found";
    /// Only the limits of the retained summary are compared.
    SummaryLimitsOnly = "summary-limits-only", "PC-3.4",
        "a same-generation open whose summary differs in adapterId, adapterVersion or operation order is not a policy conflict (only the limits are compared)";
    /// The summary comparison looks at the two byte limits only.
    SummaryFirstLimitsOnly = "summary-first-limits-only", "PC-3.4",
        "a same-generation re-open is compared on IDs, version, operations and the two byte limits only: a change of maxConcurrentRequests, maxQueuedRequests, requestTimeoutMs, maxIdempotencyKeys or idempotencyTtlMs is answered created:false";
    /// The quarantine is cleared when the reprovision starts binding, not when it is bound.
    FailedReprovisionClears = "failed-reprovision-clears", "PC-6",
        "a reprovision clears the quarantine before its bind: one whose adapter closes before bound leaves the generation unlisted";
}

pub use crate::adapter::faults::NOT_BUILT;

const _: () = assert!(DaemonFault::ALL.len() <= 64 * FAULT_WORDS, "DaemonFaults is a bitset of FAULT_WORDS u64 words");

/// The words of a [`DaemonFaults`] bitset.
const FAULT_WORDS: usize = 4;

impl fmt::Display for DaemonFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DaemonFault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !cfg!(feature = "faults") {
            return Err(NOT_BUILT.into());
        }
        DaemonFault::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown daemon fault {s:?} (`pi-conform daemon-kill-matrix --list` lists them)"))
    }
}

/// A set of daemon faults (production: [`DaemonFaults::NONE`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DaemonFaults([u64; FAULT_WORDS]);

impl DaemonFaults {
    /// No fault: the conforming reference daemon.
    pub const NONE: DaemonFaults = DaemonFaults([0; FAULT_WORDS]);

    /// Whether `f` is switched on: always `false` without the `faults` feature, so that every
    /// fault branch is compiled out of a production build.
    #[inline(always)]
    pub fn has(self, f: DaemonFault) -> bool {
        cfg!(feature = "faults") && self.0[f as usize / 64] & (1 << (f as usize % 64)) != 0
    }

    /// This set plus `f`.
    pub fn with(self, f: DaemonFault) -> DaemonFaults {
        let mut words = self.0;
        words[f as usize / 64] |= 1 << (f as usize % 64);
        DaemonFaults(words)
    }

    /// Whether no fault is on.
    pub fn is_empty(self) -> bool {
        self.0 == [0; FAULT_WORDS]
    }

    /// The faults switched on, in [`DaemonFault::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = DaemonFault> {
        DaemonFault::ALL.iter().copied().filter(move |f| self.has(*f))
    }
}

impl From<DaemonFault> for DaemonFaults {
    fn from(f: DaemonFault) -> Self {
        DaemonFaults::NONE.with(f)
    }
}

impl FromIterator<DaemonFault> for DaemonFaults {
    fn from_iter<I: IntoIterator<Item = DaemonFault>>(iter: I) -> Self {
        iter.into_iter().fold(DaemonFaults::NONE, DaemonFaults::with)
    }
}

impl fmt::Display for DaemonFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(DaemonFault::name).collect();
        f.write_str(&names.join(","))
    }
}

impl fmt::Debug for DaemonFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DaemonFaults({self})")
    }
}

// ------------------------------------------------------------------ broken command parsing

/// The command line as a faulty daemon reads it before judging it
/// ([`DaemonFault::HandshakeWithoutPayloadOk`]: a missing handshake payload becomes `{}`).
pub(crate) fn lenient_value(value: &mut Value, faults: DaemonFaults) {
    if faults.has(DaemonFault::HandshakeWithoutPayloadOk)
        && value.get("operation").and_then(Value::as_str) == Some("handshake")
    {
        if let Some(o) = value.as_object_mut() {
            o.entry("payload").or_insert_with(|| json!({}));
        }
    }
}

/// Under [`DaemonFault::KeysCaseInsensitive`]: `value` as a decoder that ignores letter case
/// sees it. Every key gets a lower-case first letter (`Operations`, `MaxRequestBytes`, `Ok`
/// become the protocol's keys), and the values of `kind`, `mode`, `transport`, an adapter
/// `operation` (`fs.*`), an `operations` array and the resource policies are lower-cased.
/// Command operations (`followUp`) are left alone: they are camel case.
pub(crate) fn fold_letter_case(value: &mut Value) {
    const LOWERED: [&str; 8] =
        ["kind", "mode", "transport", "extensions", "skills", "promptTemplates", "themes", "contextFiles"];
    fn lower(v: &mut Value) {
        if let Some(s) = v.as_str() {
            *v = Value::String(s.to_ascii_lowercase());
        }
    }
    match value {
        Value::Object(map) => {
            let taken = std::mem::take(map);
            for (k, mut v) in taken {
                let mut chars = k.chars();
                let key = match chars.next() {
                    Some(c) => c.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => k,
                };
                fold_letter_case(&mut v);
                let adapter_operation =
                    key == "operation" && v.as_str().is_some_and(|s| s.to_ascii_lowercase().starts_with("fs."));
                if LOWERED.contains(&key.as_str()) || key == "tools" && v.is_string() || adapter_operation {
                    lower(&mut v);
                } else if key == "operations" {
                    v.as_array_mut().into_iter().flatten().for_each(lower);
                }
                map.insert(key, v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(fold_letter_case),
        _ => {}
    }
}

fn descriptor_mut(v: &mut Value) -> Option<&mut Value> {
    v.get_mut("payload")?.get_mut("resources")?.get_mut("tools")?.get_mut("descriptor")
}

/// A command the contract refused (`err`) that a faulty daemon accepts anyway: `Some` when
/// one of `faults` skips exactly the rule that refused it.
pub(crate) fn lenient_command(
    value: &Value,
    err: &CommandError,
    host_id: &str,
    faults: DaemonFaults,
) -> Option<Command> {
    let code = err.error.code;
    let field = err.error.field().to_string();
    if faults.has(DaemonFault::V1ToolsObjectAccepted)
        && code == Code::InvalidField
        && value.get("operation").and_then(Value::as_str) == Some("open")
        && value["payload"]["resources"]["tools"].is_object()
    {
        let v1 = route_version(value.get("protocolVersion")).ok().filter(|v| v.major == 1)?;
        let mut v2 = value.clone();
        v2["protocolVersion"] = json!("2.0");
        let mut cmd = parse_command(&v2, &HostContext { host_instance_id: host_id }).ok()?;
        cmd.version = v1;
        return Some(cmd);
    }
    if faults.has(DaemonFault::RelativeEndpointAccepted)
        && code == Code::InvalidToolAdapterEndpoint
        && field == "descriptor.endpoint.path"
    {
        let mut v = value.clone();
        let d = descriptor_mut(&mut v)?;
        let rel = d["endpoint"]["path"].as_str()?.to_string();
        let cwd = std::env::current_dir().ok()?;
        d["endpoint"]["path"] = json!(cwd.join(rel).to_string_lossy());
        return parse_command(&v, &HostContext { host_instance_id: host_id }).ok();
    }
    if faults.has(DaemonFault::SkipBindingCheck) && code == Code::ToolAdapterBindingMismatch {
        let mut v = value.clone();
        let (sid, generation) = (value.get("sessionId").cloned()?, value.get("generation").cloned()?);
        let d = descriptor_mut(&mut v)?;
        let claimed = d["binding"]["hostInstanceId"].as_str()?.to_string();
        d["binding"]["sessionId"] = sid;
        d["binding"]["generation"] = generation;
        return parse_command(&v, &HostContext { host_instance_id: &claimed }).ok();
    }
    if faults.has(DaemonFault::SkipFitCheck) && code == Code::InvalidToolAdapterLimit {
        // Only the fit check refused it when roomy byte limits make it pass; the descriptor
        // then keeps its own (too small) limits.
        let mut v = value.clone();
        let d = descriptor_mut(&mut v)?;
        let (req, resp) = (d["limits"]["maxRequestBytes"].as_u64()?, d["limits"]["maxResponseBytes"].as_u64()?);
        d["limits"]["maxRequestBytes"] = json!(1_048_576);
        d["limits"]["maxResponseBytes"] = json!(1_048_576);
        let mut cmd = parse_command(&v, &HostContext { host_instance_id: host_id }).ok()?;
        if let Some(desc) = cmd.descriptor.as_mut() {
            let limits = crate::contract::AdapterLimits {
                max_request_bytes: i64::try_from(req).ok()?,
                max_response_bytes: i64::try_from(resp).ok()?,
                ..*desc.limits()
            };
            *desc = desc.with_limits(limits);
        }
        return Some(cmd);
    }
    if faults.has(DaemonFault::FitOnePast) && code == Code::InvalidToolAdapterLimit {
        // The limit the fit check refused, one byte larger: if that passes, the frame was
        // exactly one byte over, and the descriptor keeps its own limit.
        let member = field.rsplit('.').next()?.to_string();
        if member != "maxRequestBytes" && member != "maxResponseBytes" {
            return None;
        }
        let mut v = value.clone();
        let d = descriptor_mut(&mut v)?;
        let limit = d["limits"][&member].as_u64()?;
        d["limits"][&member] = json!(limit + 1);
        let mut cmd = parse_command(&v, &HostContext { host_instance_id: host_id }).ok()?;
        if let Some(desc) = cmd.descriptor.as_mut() {
            let mut limits = *desc.limits();
            let limit = i64::try_from(limit).ok()?;
            if member == "maxRequestBytes" {
                limits.max_request_bytes = limit;
            } else {
                limits.max_response_bytes = limit;
            }
            *desc = desc.with_limits(limits);
        }
        return Some(cmd);
    }
    None
}

/// The details of a command refusal as a faulty daemon sends them
/// ([`DaemonFault::AdmissionRefusalWithoutField`]: a descriptor refusal loses `field`).
pub(crate) fn refusal_details(
    code: Code,
    mut details: serde_json::Map<String, Value>,
    faults: DaemonFaults,
) -> serde_json::Map<String, Value> {
    if faults.has(DaemonFault::AdmissionRefusalWithoutField) && ADMISSION_CODES.contains(&code) {
        details.remove("field");
    }
    details
}

/// The code a descriptor refusal is answered with under [`DaemonFault::BindingComparedFirst`]:
/// a binding-member refusal (checks 6 and 7) of a descriptor bound to another host instance,
/// session or generation becomes the mismatch of check 8.
pub(crate) fn binding_first(value: &Value, err: &CommandError, host_id: &str, faults: DaemonFaults) -> Option<Code> {
    if !faults.has(DaemonFault::BindingComparedFirst) {
        return None;
    }
    let field = err.error.details.get("field").and_then(Value::as_str).unwrap_or("");
    let member = matches!(
        err.error.code,
        Code::InvalidToolAdapterField | Code::InvalidToolAdapterBinding | Code::InvalidToolAdapterCapability
    ) && field.starts_with("descriptor.binding.");
    let b = &value["payload"]["resources"]["tools"]["descriptor"]["binding"];
    let elsewhere = b["hostInstanceId"] != host_id
        || b["sessionId"] != value["sessionId"]
        || b["generation"].as_f64() != value["generation"].as_f64();
    (member && elsewhere).then_some(Code::ToolAdapterBindingMismatch)
}

/// Under [`DaemonFault::ConnectBeforeAdmission`]: the endpoint a refused descriptor names,
/// which the faulty daemon connects to before answering the refusal.
pub(crate) fn premature_endpoint(value: &Value, err: &CommandError, faults: DaemonFaults) -> Option<PathBuf> {
    if !faults.has(DaemonFault::ConnectBeforeAdmission) || !ADMISSION_CODES.contains(&err.error.code) {
        return None;
    }
    let p = value["payload"]["resources"]["tools"]["descriptor"]["endpoint"]["path"].as_str()?;
    Some(PathBuf::from(p))
}

/// The code a faulty daemon answers a command refusal with ([`DaemonFault::GenericRefusalCode`]).
pub(crate) fn refusal_code(code: &'static str, faults: DaemonFaults) -> &'static str {
    if faults.has(DaemonFault::GenericRefusalCode) {
        "bad_request"
    } else {
        code
    }
}

/// The version a faulty daemon echoes ([`DaemonFault::NoMinorEcho`]).
pub(crate) fn echo_version(version: &str, faults: DaemonFaults) -> String {
    if faults.has(DaemonFault::NoMinorEcho) && version.starts_with("2.") {
        "2.0".into()
    } else {
        version.into()
    }
}

// ------------------------------------------------------------------ tool paths, limits

/// Whether one of `faults` lets the tool path `path` through the daemon-side path rule
/// (SPEC §5.1): the form that fault skips is the only thing wrong with it.
pub(crate) fn path_passed(path: &str, faults: DaemonFaults) -> bool {
    use crate::contract::{is_0_3_3_passed_path, validate_relative_path, PathSide};
    if faults.is_empty() {
        return false;
    }
    let valid = |p: &str| validate_relative_path(p, PathSide::Daemon, "path").is_ok();
    let control = |c: char| c < ' ';
    // The path as a limit counted in UTF-16 units sees it: each character as that many bytes.
    let in_units = || -> String {
        path.chars().map(|c| if c.is_ascii() { c.to_string() } else { "a".repeat(c.len_utf16()) }).collect()
    };
    (faults.has(DaemonFault::PassNonCanonicalPaths) && is_0_3_3_passed_path(path))
        || (faults.has(DaemonFault::PassEmptyPath) && path.is_empty())
        || (faults.has(DaemonFault::PassAbsolutePath)
            && path.starts_with('/')
            && (path.trim_start_matches('/').is_empty() || valid(path.trim_start_matches('/'))))
        || (faults.has(DaemonFault::PassBackslashPath) && path.contains('\\') && valid(&path.replace('\\', "_")))
        || (faults.has(DaemonFault::PassControlCharPath)
            && path.contains(control)
            && valid(&path.replace(control, "_")))
        || (faults.has(DaemonFault::PassDelPath) && path.contains('\u{7f}') && valid(&path.replace('\u{7f}', "_")))
        || (faults.has(DaemonFault::PathLimitInUnits) && path.len() > 4096 && valid(&in_units()))
        || (faults.has(DaemonFault::DotDotInnerOnly) && outer_dots_only(path, valid))
}

/// Whether `path`'s only defect is `..` segments at its start or one `..` or `.` segment at
/// its end (what [`DaemonFault::DotDotInnerOnly`] lets through).
fn outer_dots_only(path: &str, valid: impl Fn(&str) -> bool) -> bool {
    let mut rest = path;
    let mut stripped = false;
    while let Some(r) = rest.strip_prefix("../") {
        rest = r;
        stripped = true;
    }
    if rest == ".." {
        return true;
    }
    for end in ["/..", "/."] {
        if let Some(r) = rest.strip_suffix(end) {
            rest = r;
            stripped = true;
        }
    }
    stripped && valid(rest)
}

/// The client line limit a faulty daemon applies ([`DaemonFault::LineLimitCountsLf`],
/// [`DaemonFault::LineLimitOnePast`]).
pub(crate) fn line_limit(max: usize, faults: DaemonFaults) -> usize {
    if faults.has(DaemonFault::LineLimitCountsLf) {
        max - 1
    } else if faults.has(DaemonFault::LineLimitOnePast) {
        max + 1
    } else {
        max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_fault_lets_only_its_own_form_through() {
        let on = cfg!(feature = "faults");
        let e_acute = "\u{e9}".repeat(2049);
        // (fault, a path of its form that is otherwise valid, a path of its form that is also
        // wrong otherwise, a path of another form)
        let cases: [(DaemonFault, &str, &str, &str); 7] = [
            (DaemonFault::DotDotInnerOnly, "../x", "a/../b", "a\\b"),
            (DaemonFault::PassEmptyPath, "", "/", "a\\b"),
            (DaemonFault::PassAbsolutePath, "/a/b", "/a//b", ""),
            (DaemonFault::PassBackslashPath, "a\\b", "a\\b/..", "/a"),
            (DaemonFault::PassControlCharPath, "a\tb", "a\t/../b", "a\u{7f}"),
            (DaemonFault::PassDelPath, "a\u{7f}", "\u{7f}/./x", "a\u{1}"),
            (DaemonFault::PathLimitInUnits, &e_acute, &"a".repeat(4097), "a//b"),
        ];
        for (f, passed, refused, other) in cases {
            assert_eq!(path_passed(passed, f.into()), on, "{f}: {passed:?}");
            assert!(!path_passed(refused, f.into()), "{f}: {refused:?}");
            assert!(!path_passed(other, f.into()), "{f}: {other:?}");
            assert!(!path_passed(passed, DaemonFaults::NONE), "no fault: {passed:?}");
        }
    }

    #[test]
    fn the_line_limit_faults_move_the_limit_by_one() {
        assert_eq!(line_limit(10, DaemonFaults::NONE), 10);
        let (lf, past) = if cfg!(feature = "faults") { (9, 11) } else { (10, 10) };
        assert_eq!(line_limit(10, DaemonFault::LineLimitCountsLf.into()), lf);
        assert_eq!(line_limit(10, DaemonFault::LineLimitOnePast.into()), past);
    }
}

//! Fault switches: deliberate, test-only breakages of the reference adapter.
//!
//! Each [`Fault`] breaks exactly one rule of SPEC §4.5, §5 or §7 in the reference adapter, so
//! that the adapter conformance runner can be shown to fail: `pi-conform kill-matrix` runs the
//! adapter suite once per fault and reports which cases each one kills, and
//! `tests/kill_matrix.rs` pins that matrix to `conformance/kill-matrix.txt`.
//!
//! Production runs with [`Faults::NONE`]. Faults are reachable only through the hidden
//! `--fault NAME` flag of `serve-adapter` and `selftest`, through
//! [`crate::adapter::server::serve_with`] and through `ReferenceAdapter::start_with`.
//!
//! This module is the switch set only: [`Fault`], [`Faults`] and the figures some faults use.
//! It imports nothing of the adapter, so every layer can ask `faults.has(…)` without depending
//! on another. The code a switched-on fault runs instead lives in `super::broken`, above
//! `job.rs` and `fs/`.

use std::fmt;
use std::str::FromStr;

macro_rules! faults {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $clause:literal, $rule:literal; )*) => {
        /// One deliberate breakage of the reference adapter (see the module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Fault {
            $( $(#[$doc])* $variant, )*
        }

        impl Fault {
            /// Every fault, in matrix order.
            pub const ALL: &'static [Fault] = &[ $( Fault::$variant, )* ];

            /// The stable kebab-case name (`--fault NAME`, `conformance/kill-matrix.txt`).
            pub fn name(self) -> &'static str {
                match self { $( Fault::$variant => $name, )* }
            }

            /// The clause of `conformance/SPEC.md` whose rule it breaks.
            pub fn clause(self) -> &'static str {
                match self { $( Fault::$variant => $clause, )* }
            }

            /// One line: the rule it breaks, as the broken adapter behaves.
            pub fn description(self) -> &'static str {
                match self { $( Fault::$variant => $rule, )* }
            }
        }
    };
}

faults! {
    // ---- bind
    /// `bound` echoes the grant's operations and ceilings, not the bind's.
    BoundEchoesGrant = "bound-echoes-grant", "PC-4.5",
        "bound echoes the grant's operations and limit ceilings instead of the bind's";
    /// `bound` carries the capability handle.
    BoundLeaksHandle = "bound-leaks-handle", "PC-4.2",
        "bound carries the bind's capabilityHandle";
    /// A bind with an unknown (or no) handle is bound to the first grant.
    AcceptAnyHandle = "accept-any-handle", "PC-4.5",
        "a bind whose handle matches no grant, or that has none, is accepted (bound to the first grant)";
    /// Host, session and generation of a bind are not checked.
    IgnoreBindIdentity = "ignore-bind-identity", "PC-4.5",
        "the bind's hostInstanceId/sessionId/generation are not checked against the grant";
    /// adapterId and adapterVersion of a bind are not checked.
    IgnoreAdapterIdentity = "ignore-adapter-identity", "PC-4.5",
        "the bind's adapterId/adapterVersion are not checked against this adapter";
    /// Operations the grant lacks are accepted in a bind.
    AcceptOperationsOutsideGrant = "accept-operations-outside-grant", "PC-4.5",
        "a bind asking for an operation the grant lacks is accepted";
    /// adapterVersion of a bind is not checked (adapterId is).
    IgnoreAdapterVersion = "ignore-adapter-version", "PC-4.5",
        "the bind's adapterVersion is not checked against this adapter (its adapterId is)";
    /// Only the first limit is checked against the grant's ceiling.
    CeilingFirstLimitOnly = "ceiling-first-limit-only", "PC-4.5",
        "only maxRequestBytes is checked against the grant's ceiling; the other six limits may exceed it";
    /// Limits above the grant's ceilings are accepted.
    AcceptLimitsAboveGrant = "accept-limits-above-grant", "PC-4.5",
        "a bind asking for limits above the grant's ceilings is accepted";
    /// Unknown keys of a bind are dropped.
    AcceptBindUnknownKeys = "accept-bind-unknown-keys", "PC-7.3",
        "unknown keys in a bind are dropped and the bind accepted instead of closing";
    /// Lines before the bind are skipped.
    IgnoreFramesBeforeBind = "ignore-frames-before-bind", "PC-4.5",
        "frames of another kind before the bind are skipped instead of closing the connection";
    /// A first line that is not strict JSON is skipped.
    SkipGarbageBeforeBind = "skip-garbage-before-bind", "PC-4.5",
        "a first line that is not one strict JSON object is skipped instead of closing the connection";
    /// A bind of a grant with a live connection is bound beside it.
    EarlierConnectionKept = "earlier-connection-kept", "PC-1.2",
        "a bind of a grant that has a live connection is bound beside it: the earlier connection is neither revoked nor closed, so two connections of one generation work at once";
    /// A new connection sheds every connection still waiting for its bind.
    UnboundCapOne = "unbound-cap-one", "PC-4.5",
        "only one connection may wait for its bind: a new connection sheds (closes) the one still waiting, so two sessions opening together lose one";
    /// A second bind is answered with another `bound`.
    AcceptSecondBind = "accept-second-bind", "PC-4.5",
        "a second bind on a bound connection is answered with bound instead of closing";
    /// A bind's frame protocolVersion is not checked.
    IgnoreBindProtocolVersion = "ignore-bind-protocol-version", "PC-4.5",
        "a bind whose frame protocolVersion is not \"1.0\" is accepted (read as 1.0)";
    /// A bind whose limits cannot hold its own normalized frames is accepted.
    BindFitUnchecked = "bind-fit-unchecked", "PC-3.3",
        "a bind that fails the fit check is accepted, its too small maxRequestBytes/maxResponseBytes raised to fit (and so echoed)";
    /// The nested `limits` of a bind are compared with the grant's ceilings only.
    BindLimitsUnchecked = "bind-limits-unchecked", "PC-4.2",
        "a bind's limits are only compared with the grant's ceilings: an unknown limit key is dropped, a missing one taken from the ceiling, a value that is not an integer read leniently (a string parsed, a fraction truncated, anything else the ceiling) and clamped into its range (and so echoed)";
    /// The nested `operations` of a bind are compared with the grant only.
    BindOperationsUnchecked = "bind-operations-unchecked", "PC-4.2",
        "a bind's operations are only compared with the grant: names are matched ignoring case, duplicates and items that are not strings dropped, a lone string read as a list of one, and an empty list or null taken as the grant's operations (and so echoed)";
    // ---- invoke hygiene
    /// Unknown keys of an invoke frame are stripped and the invoke processed.
    AcceptUnknownFrameKeys = "accept-unknown-frame-keys", "PC-4.5",
        "extra keys in an invoke frame are stripped and the invoke processed instead of closing";
    /// The conforming alternative of SPEC 4.5: an attributable invoke with an unknown
    /// top-level key is answered `invalid_request` instead of closed. Only the SHOULD case
    /// that pins this project's choice may notice it.
    ExtraFrameKeyReplies = "extra-frame-key-replies", "PC-4.5",
        "an attributable invoke with an extra frame key is answered invalid_request instead of closed (the other conforming choice)";
    /// Unknown payload keys are stripped and the invoke processed.
    AcceptUnknownPayloadKeys = "accept-unknown-payload-keys", "PC-4.5",
        "extra payload keys are stripped and the invoke executed instead of invalid_request";
    /// Keys, kinds and operation names are matched ignoring letter case.
    KeysCaseInsensitive = "keys-case-insensitive", "PC-4.2",
        "keys, kinds and operation names are matched ignoring letter case (as Go's encoding/json does): Path is read as path, Invoke as invoke, FS.read as fs.read, in a bind as in an invoke";
    /// Payload numbers and booleans given as strings are converted.
    CoercePayloadTypes = "coerce-payload-types", "PC-5.2",
        "payload integers/booleans given as strings are converted instead of invalid_request";
    /// Payload fields given as JSON null are taken as absent.
    NullAsAbsent = "null-as-absent", "PC-5.2",
        "payload fields given as JSON null are dropped and the invoke executed (null read as absent) instead of invalid_request";
    /// fs.search maxResults above 10000 is clamped.
    MaxResultsAboveLimit = "max-results-above-limit", "PC-5.2",
        "fs.search maxResults above 10000 is clamped to 10000 and run instead of invalid_request";
    /// fs.search query length counted in characters, not UTF-16 units.
    QueryUnitsAsCharacters = "query-units-as-characters", "PC-5.2",
        "the fs.search query bound counts characters, not UTF-16 units: 4097 units in 4096 characters are run (cut to the whole characters within 4096 units)";
    /// requestId / idempotencyKey patterns and lengths are not checked.
    AcceptBadIds = "accept-bad-ids", "PC-4.5",
        "invoke requestId/idempotencyKey that break the id pattern or length are processed";
    /// An invoke reusing the requestId of one still in flight is processed.
    DuplicateRequestIdRuns = "duplicate-request-id-runs", "PC-4.5",
        "an invoke reusing the requestId of an invoke still in flight is processed instead of closing";
    /// The identity of an invoke is not checked against the binding.
    IgnoreInvokeIdentity = "ignore-invoke-identity", "PC-4.5",
        "an invoke whose identity (adapter version, generation, …) differs from the binding is processed";
    /// An invoke carrying the handle is processed.
    AcceptHandleInInvoke = "accept-handle-in-invoke", "PC-4.5",
        "an invoke carrying the capability handle (outside bind) is processed instead of closing";
    /// Operations the bind did not grant are executed.
    AcceptUngrantedOperation = "accept-ungranted-operation", "PC-4.5",
        "an operation the bind did not grant is executed instead of operation_not_granted";
    /// An invoke holding a number spelled with a fraction or an exponent is refused.
    FloatSpellingRefused = "float-spelling-refused", "PC-1",
        "an invoke holding a number spelled with a fraction or an exponent (2.0, 1e3) is answered invalid_request (the spelling is judged, not the value)";
    /// A bind holding a number spelled with a fraction or an exponent is closed.
    BindFloatSpellingRefused = "bind-float-spelling-refused", "PC-1",
        "a bind holding a number spelled with a fraction or an exponent (a generation 1.0, a limit 1.6e1) is closed without bound (the spelling is judged, not the value)";
    /// A fractional number is truncated to an integer.
    FractionTruncated = "fraction-truncated", "PC-1",
        "a number with a fractional part in an invoke is truncated to an integer (maxEntries 2.5 lists 2)";
    /// A frame whose text holds a `\u` escape is refused (raw bytes compared, not values).
    EscapedStringsRefused = "escaped-strings-refused", "PC-1",
        "a bind or invoke whose JSON text holds a \\u escape is closed (its raw bytes are compared, not its decoded values)";
    /// Duplicate keys of an invoke are accepted, the last one winning.
    DuplicateKeysLastWins = "duplicate-keys-last-wins", "PC-1",
        "an invoke with a duplicate key is decoded leniently (the last copy wins) and executed instead of closing";
    /// Lines over maxRequestBytes are processed.
    NoLineLimit = "no-line-limit", "PC-1.2",
        "invoke lines over maxRequestBytes are read and processed instead of closing";
    /// A line one byte over maxRequestBytes is read.
    LineLimitOnePast = "line-limit-one-past", "PC-1.2",
        "a daemon line of maxRequestBytes + 1 bytes (LF included) is read and processed instead of closing: the limit is counted without the LF";
    /// The line limit is judged at the LF only: a partial line grows without bound.
    LineLimitAtLfOnly = "line-limit-at-lf-only", "PC-1",
        "a line over maxRequestBytes is closed only once its LF arrives: a partial line that already exceeds the limit is buffered without bound";
    /// Lines are decoded lossily: invalid UTF-8 becomes U+FFFD.
    LossyUtf8Lines = "lossy-utf8-lines", "PC-1",
        "a line that is not UTF-8 is decoded lossily (U+FFFD for each bad sequence) and processed instead of closing the connection";
    /// A line is read as a stream of JSON values.
    TrailingValuesRun = "trailing-values-run", "PC-1",
        "a line holding more than one JSON value, or a value and trailing bytes, is read as a stream: each whole value is processed as a frame and the rest ignored, instead of closing the connection";
    /// An empty line closes the connection.
    EmptyLineCloses = "empty-line-closes", "PC-1",
        "an empty line (or one of a lone CR) closes the connection, before the bind too, as a line that is not JSON, instead of being skipped";
    // ---- paths and the six operations
    /// `..` paths are resolved with plain std::fs against the root path.
    DotdotAllowed = "dotdot-allowed", "PC-5.1",
        "a path with `..` segments is resolved with plain std::fs against the root path (escapes it)";
    /// Path rules are checked for fs.write only.
    PathRulesWriteOnly = "path-rules-write-only", "PC-5.1",
        "the path rules are checked for fs.write only: fs.list, fs.read, fs.search and fs.edit resolve a malformed path with plain std::fs";
    /// The handle is looked for as a whole string value only.
    HandleWholeValueOnly = "handle-whole-value-only", "PC-4.5",
        "an invoke is closed only when a whole string value is the handle: the handle inside a longer value, a key or an id is executed";
    /// symlink_refused results are redone through std::fs, following the link.
    FollowSymlinks = "follow-symlinks", "PC-7.2",
        "an operation refused with symlink_refused is redone with std::fs, following the link";
    /// fs.list entries come back in reverse order.
    ListUnsorted = "list-unsorted", "PC-5.3.list",
        "fs.list entries are not sorted bytewise (they come back reversed)";
    /// fs.list stops taking entries once it holds maxEntries and the next name sorts after them.
    ListStopsAtMax = "list-stops-at-max", "PC-5.3.list",
        "fs.list with maxEntries 1 of a directory of two entries stops taking entries once it holds one and the next name sorts after it: when the directory yields its first name first, the listing says truncated:false though an entry was left out";
    /// fs.list includes symlinks.
    ListIncludesSymlinks = "list-includes-symlinks", "PC-5.3.list",
        "fs.list includes symbolic links (typed by their targets)";
    /// fs.list passes names with control characters or non-UTF-8 bytes through.
    ListKeepsControlNames = "list-keeps-control-names", "PC-5.3.list",
        "fs.list passes names that cannot be represented through: control characters kept, bytes that are not UTF-8 decoded lossily (U+FFFD)";
    /// fs.list includes FIFOs, sockets and devices.
    ListIncludesSpecialFiles = "list-includes-special-files", "PC-5.3.list",
        "fs.list includes FIFOs, sockets and devices (as files)";
    /// not_utf8 reads are answered with lossy content.
    ReadLossy = "read-lossy", "PC-5.3.read",
        "fs.read of non-UTF-8 bytes returns lossy content (U+FFFD) instead of not_utf8";
    /// A socket is answered as an empty regular file.
    SocketAsEmptyFile = "socket-as-empty-file", "PC-5.3",
        "fs.stat and fs.read of a socket answer as if it were an empty regular file instead of unsupported_file_type";
    /// A read from exactly the end of a file is refused.
    ReadAtEndRefused = "read-at-end-refused", "PC-5.3.read",
        "fs.read with offset equal to the file's size is refused invalid_offset instead of empty content with eof:true";
    /// A read of an empty file says eof:false.
    EmptyReadNotEof = "empty-read-not-eof", "PC-5.3.read",
        "fs.read of an empty file from offset 0 says eof:false";
    /// fs.search reports overlapping occurrences.
    SearchOverlapping = "search-overlapping", "PC-5.3.search",
        "fs.search reports overlapping occurrences instead of non-overlapping ones";
    /// fs.search columns count bytes.
    SearchByteColumns = "search-byte-columns", "PC-5.3.search",
        "fs.search columns count UTF-8 bytes instead of Unicode scalar values";
    /// A long line's window is clamped to the line, never shifted.
    SearchWindowClamped = "search-window-clamped", "PC-5.3.search",
        "the window of a line over 4096 characters spans 1024 before to 3072 after the match, clamped to the line instead of shifted (shorter near either end)";
    /// A directory search builds its match paths from the path as sent.
    SearchPrefixAsSent = "search-prefix-as-sent", "PC-5.1",
        "a directory search named dir/ or ./ builds match paths from the path as sent (dir//a.txt, .//hello.txt) instead of the canonical path";
    /// fs.search resumes its UTF-8 check inside a character kept across the first chunk boundary.
    SearchKeptBytesMiscounted = "search-kept-bytes-miscounted", "PC-5.3.search",
        "fs.search of a file over 256 KiB without a match in its first 256 KiB resumes its UTF-8 check at the second of the bytes kept across that boundary for the query: when that byte is inside a character, the file is taken for not UTF-8 and gives no match";
    /// A match whose text window starts reading inside a multi-byte character is dropped.
    SearchWindowCutCharacter = "search-window-cut-character", "PC-5.3.search",
        "fs.search drops a match more than 12291 bytes into a line over 4096 bytes when the text window's read starts inside a multi-byte character (the cut character is not skipped, so the window is taken for a changed file)";
    /// A tree search gives each file past its first 32 room for the matches left, not one more.
    SearchLaterFilesNoSpare = "search-later-files-no-spare", "PC-5.3.search",
        "a directory search gives each file past the first 32 in path order room for the matches still wanted only, not one more: when such a file's matches are cut by maxResults and no later file matches, the search says truncated:false";
    /// A directory search says `truncated` when nothing was cut or left out.
    SearchAlwaysTruncated = "search-always-truncated", "PC-5.3.search",
        "a directory search answers truncated:true even when every match fit and nothing was left out";
    /// fs.search takes sequences UTF-8 forbids (overlong forms, surrogates, code points past
    /// U+10FFFF) for characters, so a file whose only flaw is one is searched as text.
    SearchLenientUtf8 = "search-lenient-utf8", "PC-5.3.search",
        "fs.search takes overlong forms, surrogates and code points past U+10FFFF for characters: a file whose only flaw is one is searched as text and its matches returned";
    /// fs.search takes a stray continuation byte 0x80 (no lead byte before it) for a character.
    SearchStray80Accepted = "search-stray-80-accepted", "PC-5.3.search",
        "fs.search takes a stray continuation byte 0x80 for a character (as a UTF-8 check that skips ASCII and lets 0x80 pass as ASCII would), so a file whose only flaw is one is searched as text";
    /// fs.search's window of a long line of three-byte characters is one character short.
    SearchReachShort = "search-reach-short", "PC-5.3.search",
        "fs.search's text window of a line over 4096 characters looks at most 3 × 4096 − 3 bytes past the match (not 3 × 4096 + 3), so after a match followed by three-byte characters the window holds 4095 characters, not 4096";
    /// fs.search of a file over 256 KiB loses the occurrences a multiple of 256 KiB cuts.
    SearchChunkSeams = "search-chunk-seams", "PC-5.3.search",
        "fs.search of a file of 256 KiB to 2 MiB loses every occurrence cut by a multiple of 256 KiB (a chunked scan that carries nothing across chunks)";
    /// A read cut by the response budget is refused instead of shortened.
    ReadBudgetRefused = "read-budget-refused", "PC-5.3.read",
        "an fs.read whose window does not fit the response budget is answered response_too_large instead of a shortened window";
    /// A read cut by the response budget counts a control character without a short escape
    /// as one byte, not the six of its `\u00XX` escape.
    ReadControlCountedRaw = "read-control-counted-raw", "PC-5.3.read",
        "an fs.read cut by the response budget counts each control character without a short escape (U+0001, sent as \\u0001) as one byte: the window it keeps does not fit, and is answered response_too_large instead of a shorter window";
    /// fs.write ignores expectedDigest.
    WriteIgnoresDigest = "write-ignores-digest", "PC-5.3.write",
        "fs.write ignores expectedDigest (no not_found / digest_mismatch guard)";
    /// create:false refuses every write.
    CreateFalseRefusesAll = "create-false-refuses-all", "PC-5.3.write",
        "fs.write with create:false is refused not_found even when the file exists";
    /// overwrite:false refuses every write.
    OverwriteFalseRefusesAll = "overwrite-false-refuses-all", "PC-5.3.write",
        "fs.write with overwrite:false is refused already_exists even when the file is missing";
    /// fs.edit refuses every expectedDigest.
    EditRefusesDigest = "edit-refuses-digest", "PC-5.3.edit",
        "fs.edit with an expectedDigest is refused digest_mismatch even when the digest is the file's";
    /// fs.write resets the permission bits of a replaced file.
    WriteResetsMode = "write-resets-mode", "PC-5.3.write",
        "fs.write does not keep an existing file's permission bits (resets them to 0644)";
    /// fs.edit resets the permission bits of the edited file.
    EditResetsMode = "edit-resets-mode", "PC-5.3.edit",
        "fs.edit does not keep the edited file's permission bits (resets them to 0644)";
    /// Ambiguous edits replace the first occurrence.
    EditFirstOccurrence = "edit-first-occurrence", "PC-5.3.edit",
        "an ambiguous fs.edit replaces the first occurrence instead of edit_ambiguous";
    /// Edits up to the failing one are applied and written.
    EditPartial = "edit-partial", "PC-5.3.edit",
        "a failing fs.edit writes the edits before the failing one (not all-or-nothing)";
    /// fs.edit ignores expectedDigest.
    EditIgnoresDigest = "edit-ignores-digest", "PC-5.3.edit",
        "fs.edit ignores expectedDigest (no digest_mismatch guard)";
    /// fs.edit refuses an edit that grows the file by more than its size.
    EditGrowthRefused = "edit-growth-refused", "PC-5.3.edit",
        "fs.edit refuses invalid_request an edit whose newText grows the file by more than the file's own size (a buffer sized by the file)";
    /// fs.edit of a file over 1 MiB is refused as too large.
    EditLargeFileRefused = "edit-large-file-refused", "PC-5.3.edit",
        "fs.edit of a file over 1 MiB is refused invalid_request (too large to edit), where the reference edits files up to 64 MiB";
    /// The memory an fs.edit reserves is never given back.
    EditMemoryLeaked = "edit-memory-leaked", "PC-5.3.edit",
        "the memory an fs.edit of a file of 1 MiB or more reserves (its file's size) is never given back: once such edits of 128 MiB in all have run, every later one waits for ever";
    /// Edit failures quote the file's beginning in their message.
    ErrorMessageQuotesContent = "error-message-quotes-content", "PC-5.3.errors",
        "the message of an fs.edit refused edit_not_found, edit_ambiguous or not_utf8 quotes the first 64 characters of the file";
    /// not_found messages name the file's absolute path, spelled with `\/`.
    MessageNamesPath = "message-names-path", "PC-5.3.errors",
        "the message of a not_found error names the requested file's absolute path, every `/` of the result line spelled `\\/`";
    /// not_found is reported as io_error.
    WrongNotFoundCode = "wrong-not-found-code", "PC-5.3",
        "a missing file or parent is reported as io_error instead of not_found";
    // ---- limits
    /// The response budget is ignored and oversize lines are sent.
    NoResponseBudget = "no-response-budget", "PC-4.5",
        "the response budget is ignored: result lines over maxResponseBytes are sent";
    /// A listing the response budget cut says `truncated:false`.
    BudgetCutNotTruncated = "budget-cut-not-truncated", "PC-4.5",
        "an fs.list or fs.search result cut to fit maxResponseBytes says truncated:false (only a maxEntries/maxResults cut says true)";
    /// A result line exactly maxResponseBytes long is refused.
    BudgetOffByOne = "budget-off-by-one", "PC-4.5",
        "a result line exactly maxResponseBytes long (LF included) is answered response_too_large";
    /// A listing the response budget cut, filling it to the byte, loses its last item.
    BudgetExactItemDropped = "budget-exact-item-dropped", "PC-4.5",
        "an fs.list or fs.search result cut by a limit (truncated:true) that fills the response budget to the byte is counted as if truncated:false, one byte longer: its last item is dropped too, and a single item is answered response_too_large";
    /// A listing or search holding exactly maxEntries/maxResults items says truncated:true.
    TruncatedAtLimit = "truncated-at-limit", "PC-5.3",
        "fs.list/fs.search say truncated:true when they hold exactly maxEntries/maxResults items";
    /// Without `maxEntries`/`maxResults` every entry and match is returned.
    NoDefaultLimit = "no-default-limit", "PC-5.3",
        "fs.list/fs.search without maxEntries/maxResults return every entry and match (up to 10000), not the default 1000";
    /// `expectedDigest` is compared, then the file written after a pause, holding nothing.
    DigestCheckRacy = "digest-check-racy", "PC-5.3.write",
        "fs.write compares expectedDigest, then writes after a pause without holding the file: writes racing under one digest can all succeed";
    /// A read whose window is full says eof:false even at the end of the file.
    EofByShortWindow = "eof-by-short-window", "PC-5.3.read",
        "fs.read says eof:false whenever bytesRead equals maxBytes, even at the end of the file";
    /// A one-byte read window looks three bytes past its start, not four.
    ReadLookaheadShort = "read-lookahead-short", "PC-5.3.read",
        "fs.read with maxBytes 1 at a 4-byte character looks only 3 bytes ahead, sees a broken character and answers not_utf8 instead of empty content with bytesRead 0 and eof:false";
    /// A read at an offset inside a character cut short by the end of the file is never answered.
    CutCharacterOffsetPanics = "cut-character-offset-panics", "PC-5.3.read",
        "fs.read at an offset inside a character cut short by the end of the file panics (a slice past the bytes read): the request is never answered";
    /// The queue is unbounded: never busy.
    NoBusy = "no-busy", "PC-4.5",
        "the queue is unbounded: requests beyond maxConcurrent + maxQueued are never refused busy";
    /// One request more than the queue holds is admitted.
    BusyOneLate = "busy-one-late", "PC-4.5",
        "maxQueuedRequests + 1 requests may wait: busy comes one invoke late";
    /// The queue is treated as 0: busy as soon as every slot runs.
    BusyEarly = "busy-early", "PC-4.5",
        "maxQueuedRequests is treated as 0: busy as soon as maxConcurrentRequests run";
    /// Every admitted request runs at once: nothing waits in the queue.
    ConcurrencyUnbounded = "concurrency-unbounded", "PC-4.5",
        "maxConcurrentRequests is not held: every admitted request (up to maxConcurrentRequests + maxQueuedRequests) starts at once instead of waiting in the queue (fs.search is slowed to 300 ms)";
    /// A busy refusal is stored as the key's outcome and replayed to its retry.
    BusyRemembered = "busy-remembered", "PC-4.5",
        "a write refused busy is remembered under its idempotency key: its retry is refused busy again";
    // ---- abort
    /// aborted:true is sent, then the result anyway (writes take 300 ms under this fault).
    AbortSendsResult = "abort-sends-result", "PC-4.5",
        "after aborted:true the target's result is still sent (fs.write is slowed to 300 ms)";
    /// An abort of a queued target is answered aborted:false after the target ran.
    AbortQueuedIgnored = "abort-queued-ignored", "PC-4.5",
        "an abort of a queued target does not cancel it: the target runs and aborted:false follows its result";
    /// An abort of a running read-only target is answered aborted:false after its result.
    AbortRunningIgnored = "abort-running-ignored", "PC-4.5",
        "an abort of a running read-only request is treated as past a commit point: its result, then aborted:false";
    /// An abort whose ids break the frame-id pattern is answered.
    AbortIdsUnchecked = "abort-ids-unchecked", "PC-4.2",
        "an abort whose requestId or targetRequestId breaks the frame-id pattern or length is answered (aborted:false, unknown_request, the bad id echoed) instead of closing";
    /// An unknown abort target gets aborted:false without unknown_request.
    AbortUnknownNoError = "abort-unknown-no-error", "PC-4.5",
        "an abort of an unknown request is answered aborted:false without the unknown_request error";
    // ---- idempotency
    /// Replays execute again.
    NoIdempotency = "no-idempotency", "PC-4.5",
        "a mutating request replayed under the same key and payload is executed again";
    /// A duplicate of a mutating request still in flight runs again.
    InFlightDuplicateRuns = "in-flight-duplicate-runs", "PC-4.5",
        "a duplicate (same key and payload) of a write still in flight runs again instead of waiting for the first";
    /// The waiters of an aborted primary are never run nor answered.
    AbortStrandsDuplicate = "abort-strands-duplicate", "PC-4.5",
        "aborting a queued write strands its in-flight duplicate: the waiter is never run nor answered";
    /// The waiters of a primary that failed retryably are never run nor answered.
    RetryableFailureStrandsDuplicate = "retryable-failure-strands-duplicate", "PC-4.5",
        "a duplicate waiting on a write or edit whose outcome is a retryable error (io_error) is never run nor answered";
    /// An aborted waiting duplicate stays on its primary's waiter list.
    AbortLeavesWaiter = "abort-leaves-waiter", "PC-4.5",
        "an abort of a duplicate waiting on its primary answers aborted:true but leaves it waiting: the primary's outcome is replayed to it after the abort";
    /// Every failure forgets its key: only successes are replayed.
    ErrorsNotKept = "errors-not-kept", "PC-4.5",
        "a mutating request that fails (digest_mismatch, already_exists, …) forgets its key: its retry under the same key and payload runs again instead of replaying the failure";
    /// The idempotency fingerprint keeps the payload's member order.
    FingerprintMemberOrder = "fingerprint-member-order", "PC-4.5",
        "the idempotency fingerprint is taken over the payload with its members in the order sent, not its canonical JSON: a replay of the same payload with its members in another order is idempotency_conflict";
    /// A key reused with another payload is executed.
    NoIdempotencyConflict = "no-idempotency-conflict", "PC-4.5",
        "a key reused with another payload is executed instead of idempotency_conflict";
    /// The idempotency cache holds one key fewer than maxIdempotencyKeys.
    IdempotencyKeysOneShort = "idempotency-keys-one-short", "PC-4.5",
        "the idempotency cache holds maxIdempotencyKeys - 1 keys: at the limit the earliest key is already forgotten";
    /// The idempotency cache holds one key more than maxIdempotencyKeys.
    IdempotencyKeysOneOver = "idempotency-keys-one-over", "PC-4.5",
        "the idempotency cache holds maxIdempotencyKeys + 1 keys: one past the limit the earliest key is still remembered";
    /// Idempotency keys never expire.
    IdempotencyTtlIgnored = "idempotency-ttl-ignored", "PC-4.5",
        "idempotency keys never expire: a replay after idempotencyTtlMs returns the stored outcome instead of running anew";
    // ---- revoke and EOF
    /// revoke closes without answering revoked.
    RevokeNoReply = "revoke-no-reply", "PC-4.5",
        "revoke closes the connection without answering revoked";
    /// After revoked the connection keeps working.
    KeepWorkingAfterRevoke = "keep-working-after-revoke", "PC-4.5",
        "after answering revoked the connection stays open and keeps executing invokes";
    /// Revoke and EOF start the queued requests instead of dropping them.
    RevokeRunsQueued = "revoke-runs-queued", "PC-4.5",
        "revoke or EOF starts every queued request (unanswered) instead of dropping it";
    /// EOF from the daemon is ignored.
    EofIgnored = "eof-ignored", "PC-4.5",
        "the connection is kept open after the daemon's EOF (no revocation)";
    // ---- secrets
    /// The content guard looks for the bound handle only, not the other grants' handles.
    ScanBoundHandleOnly = "scan-bound-handle-only", "PC-4.5",
        "the content guard looks for the connection's own handle only: a file holding another grant's handle (another session's descriptor in the root) is read out";
    /// The scan for the other grants' handles starts afresh at each chunk of a file.
    OtherGrantScanPerChunk = "other-grant-scan-per-chunk", "PC-4.5",
        "the content guard's scan for the other grants' handles starts afresh at each 256 KiB chunk of a file: another grant's handle cut by a chunk boundary is read out";
    /// The content scan refuses a file ending in a long run of base64url bytes.
    TrailingWordRefused = "trailing-word-refused", "PC-5.3.read",
        "the content guard answers io_error for a file whose last 43 bytes or more are base64url bytes (a digest or a key ending a text file) instead of letting it be read";
    /// The scan for the other grants' handles looks at the first window of each base64url run only.
    OtherGrantRunStartOnly = "other-grant-run-start-only", "PC-4.5",
        "the content guard's scan for the other grants' handles looks only at the first 43 bytes of each run of base64url bytes: another grant's handle with base64url bytes before it is read out";
    /// The scan for the other grants' handles skips the rest of a chunk that starts with a
    /// separator while a long run goes on from the chunk before.
    OtherGrantChunkWrap = "other-grant-chunk-wrap", "PC-4.5",
        "the content guard's scan for the other grants' handles stops for the rest of a chunk that starts with a byte outside the base64url alphabet while a run of 43 or more alphabet bytes ends the chunk before: another grant's handle later in that chunk is read out";
    /// The bound handle is looked for in files by the minted-shape scan only.
    BoundScanMintedOnly = "bound-scan-minted-only", "PC-4.5",
        "the content guard looks for the bound handle only as a handle of the minted shape (43 base64url characters): a connection bound with a hand-written grant of another length reads a file holding its own handle out in windows";
    /// Results containing the handle are sent.
    NoCapabilityScan = "no-capability-scan", "PC-7.1",
        "results whose content contains the capability handle are sent instead of capability_in_content";
    /// fs.read of a file holding the handle is answered window by window; only the result
    /// line is checked for the whole handle.
    SecretWindowedRead = "secret-windowed-read", "PC-4.5",
        "fs.read of a file holding the handle is answered per window; only each result line is checked for the whole handle";
    /// fs.search of a file holding the handle returns its match windows; only the result line
    /// is checked for the whole handle.
    SecretWindowedSearch = "secret-windowed-search", "PC-4.5",
        "fs.search of a file holding the handle returns match windows; only each result line is checked for the whole handle";
    /// fs.edit of a file holding the handle runs; only the result line is checked.
    EditUnguarded = "edit-unguarded", "PC-4.5",
        "fs.edit of a file holding the handle runs (only each result line is checked for the whole handle): its replacement or edit_not_found tells whether an oldText occurs in the file";
    /// fs.search results are sent without the final scan of the result line: only the content
    /// guard runs, so a match path holding the handle goes out.
    SearchResultUnscanned = "search-result-unscanned", "PC-4.5",
        "fs.search result lines are not scanned for the handle (only file contents are): a match path holding the handle is sent";
    /// The handle in an invoke is looked for in the raw bytes only: an escaped spelling passes.
    HandleScanRawOnly = "handle-scan-raw-only", "PC-4.5",
        "the handle in an invoke is looked for in the raw line only, so a \\u-escaped spelling is executed";
    /// Results spell the handle with `\u` escapes (and no content guard), so a raw scan of the
    /// line never sees it.
    EscapedHandleInResults = "escaped-handle-in-results", "PC-7.1",
        "files holding the handle are read, and the handle is sent \\u-escaped in the result, past the adapter's own raw-byte scan";
    // ---- well-formed JSON that breaks the contract, and the semantics behind it
    /// `modifiedAt` with an offset instead of the canonical `Z`.
    ModifiedAtOffset = "modified-at-offset", "PC-5.2",
        "fs.stat/fs.list modifiedAt ends in +00:00 instead of the canonical Z form";
    /// `modifiedAt` with its month counted from zero (C's `tm_mon` without the `+ 1`).
    ModifiedAtMonthFromZero = "modified-at-month-from-zero", "PC-5.3.stat",
        "fs.stat/fs.list modifiedAt has its month counted from zero: a January time reads 00, any other month one early";
    /// `not_found` carries `retryable:true`.
    NotFoundRetryable = "not-found-retryable", "PC-5.3.errors",
        "not_found errors carry retryable:true (the code's flag is false)";
    /// fs.write ignores cancellation for a while; its result follows `aborted:true` late.
    AbortResultLate = "abort-result-late", "PC-4.5",
        "fs.write ignores cancellation for 1.2 s and its result is sent after aborted:true";
    /// fs.search of a file runs a query with regex metacharacters as a regular expression.
    SearchRegex = "search-regex", "PC-5.3.search",
        "fs.search of a file treats a query with regex metacharacters as a regular expression";
    /// fs.write of an existing file truncates it and writes in place, slowly.
    WriteInPlace = "write-in-place", "PC-5.3.write",
        "fs.write of an existing file truncates it and writes it in place in slow chunks (not atomic)";
    // ---- the edges of rules the middle cases test (src/conform/adapter/edges.rs)
    /// fs.write or fs.edit of a symlink whose target does not exist follows it.
    DanglingSymlinkFollowed = "dangling-symlink-followed", "PC-5.1",
        "a symlink whose target does not exist is followed (only an existing target is refused)";
    /// The grant of the bind is checked for fs.write and fs.edit only.
    UngrantedReadsAllowed = "ungranted-reads-allowed", "PC-4.5",
        "fs.list, fs.stat, fs.read and fs.search run although the bind did not grant them";
    /// A bind whose handle is a granted handle without its last character binds.
    HandleLastCharOptional = "handle-last-char-optional", "PC-4.5",
        "a bind with a granted handle missing its last character binds (a prefix match)";
    /// fs.read refuses a file with a non-UTF-8 byte anywhere, not only in the window.
    ReadWholeFileUtf8 = "read-whole-file-utf8", "PC-5.3.read",
        "fs.read is not_utf8 when any byte of the file is not UTF-8, even outside the window";
    /// fs.search of a named file holding NUL is refused not_utf8.
    SearchNamedNulRefused = "search-named-nul-refused", "PC-5.3.search",
        "fs.search of a file named directly that contains NUL is refused not_utf8, not answered with no matches";
    /// An abort whose identity differs from the binding is answered (only invokes are judged).
    IgnoreAbortIdentity = "ignore-abort-identity", "PC-4.5",
        "an abort whose identity (adapter version, generation, …) differs from the binding is answered";
    /// A bind's maxQueuedRequests 0 is read as no bound on the queue.
    NoQueueUnbounded = "no-queue-unbounded", "PC-4.5",
        "maxQueuedRequests 0 is read as an unbounded queue: nothing is refused busy";
    /// fs.list answers an empty listing, truncated, when not even one entry fits the budget.
    NothingFitsEmptyList = "nothing-fits-empty-list", "PC-5.3.errors",
        "fs.list answers {entries:[], truncated:true} when not even one entry fits the response budget";
    /// fs.edit with an expectedDigest of a missing file is digest_mismatch.
    EditMissingDigestMismatch = "edit-missing-digest-mismatch", "PC-5.3",
        "fs.edit with an expectedDigest of a missing file answers digest_mismatch, not not_found";
    // ---- a MUST broken only where a SHOULD case looks (the frame judge fails it anyway)
    /// fs.edit of a file of 1 MiB or more reports `replacements:0` (the edit is made).
    LargeEditReplacementsZero = "large-edit-replacements-zero", "PC-5.3.edit",
        "fs.edit of a file of 1 MiB or more reports replacements:0 though it made the edit";
    // ---- what a result says about its invoke (contract::answer, judged on every result)
    /// fs.write counts `bytesWritten` in characters (Unicode scalar values), not UTF-8 bytes.
    WriteBytesAsChars = "write-bytes-as-chars", "PC-5.3.write",
        "fs.write reports bytesWritten as the content's count of characters, not of UTF-8 bytes";
    /// fs.write reports the digest of the version it replaced (empty when it created the file).
    WriteDigestOfPrevious = "write-digest-of-previous", "PC-5.3.write",
        "fs.write reports the SHA-256 of the version it replaced (of nothing for a new file), not of the new bytes";
    /// fs.edit reports one replacement whatever the number of edits.
    EditReplacementsOne = "edit-replacements-one", "PC-5.3.edit",
        "fs.edit reports replacements:1 whatever the number of edits applied";
    /// fs.search of a directory gives match paths relative to that directory, not to the root.
    SearchPathsRelativeToSearched = "search-paths-relative-to-searched", "PC-5.3.search",
        "fs.search of a subdirectory gives match paths relative to it, not root-relative";
}

/// Why `--fault` is refused by a build without the `faults` feature.
pub const NOT_BUILT: &str =
    "this build has no fault switches (they are a test aid): rebuild with `cargo build --features faults`";

const _: () = assert!(Fault::ALL.len() <= 64 * FAULT_WORDS, "Faults is a bitset of FAULT_WORDS u64 words");

/// Words of the [`Faults`] bitset.
const FAULT_WORDS: usize = 4;

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !cfg!(feature = "faults") {
            return Err(NOT_BUILT.into());
        }
        Fault::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown fault {s:?} (`pi-conform kill-matrix --list` lists them)"))
    }
}

/// A set of faults (production: [`Faults::NONE`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Faults([u64; FAULT_WORDS]);

impl Faults {
    /// No fault: the conforming reference adapter.
    pub const NONE: Faults = Faults([0; FAULT_WORDS]);

    /// Whether `f` is switched on: always `false` without the `faults` feature, so that every
    /// fault branch is compiled out of a production build.
    #[inline(always)]
    pub fn has(self, f: Fault) -> bool {
        cfg!(feature = "faults") && self.0[f as usize / 64] & (1 << (f as usize % 64)) != 0
    }

    /// This set plus `f`.
    pub fn with(self, f: Fault) -> Faults {
        let mut words = self.0;
        words[f as usize / 64] |= 1 << (f as usize % 64);
        Faults(words)
    }

    /// Whether no fault is on.
    pub fn is_empty(self) -> bool {
        self.0 == [0; FAULT_WORDS]
    }

    /// The faults switched on, in [`Fault::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Fault> {
        Fault::ALL.iter().copied().filter(move |f| self.has(*f))
    }
}

impl From<Fault> for Faults {
    fn from(f: Fault) -> Self {
        Faults::NONE.with(f)
    }
}

impl FromIterator<Fault> for Faults {
    fn from_iter<I: IntoIterator<Item = Fault>>(iter: I) -> Self {
        iter.into_iter().fold(Faults::NONE, Faults::with)
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Fault::name).collect();
        f.write_str(&names.join(","))
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faults({self})")
    }
}

/// How long `fs.write` waits before running under [`Fault::AbortSendsResult`], so that an
/// abort sent right behind it always lands while it is in flight.
pub const SLOW_WRITE: std::time::Duration = std::time::Duration::from_millis(300);

/// How long `fs.search` waits (cancellably) before running under
/// [`Fault::ConcurrencyUnbounded`]: as long as a slower adapter's search of the runner's
/// haystack takes, so that a request run beside it is answered well before it ends (this
/// adapter searches the 32 MiB haystack in a few milliseconds, too close to the runner's
/// 100 ms tolerance to tell a request run beside it from one started as it ended).
pub const SLOW_SEARCH: std::time::Duration = std::time::Duration::from_millis(300);

/// How long `fs.write` ignores cancellation under [`Fault::AbortResultLate`]: longer than
/// half a step (what the runner once waited after `aborted:true`), shorter than a step.
pub const LATE_RESULT: std::time::Duration = std::time::Duration::from_millis(1200);

/// Longest line read after the bind under [`Fault::NoLineLimit`].
pub const NO_LINE_LIMIT: usize = 64 * 1024 * 1024;

/// The data budget handed to operations under [`Fault::NoResponseBudget`] (1 GiB: ignored).
pub const NO_BUDGET: usize = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for f in Fault::ALL {
            assert_eq!(f.name().parse::<Fault>(), Ok(*f));
            assert!(seen.insert(f.name()), "{} twice", f.name());
            assert!(
                f.name().bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{}",
                f.name()
            );
            assert!(f.clause().starts_with("PC-"));
            assert!(!f.description().is_empty());
        }
        assert!("no-such-fault".parse::<Fault>().is_err());
    }

    #[test]
    fn the_set_holds_what_was_added() {
        let s: Faults = [Fault::NoBusy, Fault::EofIgnored].into_iter().collect();
        assert!(s.has(Fault::NoBusy) && s.has(Fault::EofIgnored) && !s.has(Fault::BusyEarly));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![Fault::NoBusy, Fault::EofIgnored]);
        assert_eq!(s.to_string(), "no-busy,eof-ignored");
        assert!(Faults::NONE.is_empty() && !s.is_empty());
    }
}

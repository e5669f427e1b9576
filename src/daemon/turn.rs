//! The scripted agent's turn as a sans-I/O state machine: the stand-in for a model that turns
//! `TOOL <fs_x> <json>` prompt lines into tool calls through the session's adapter and echoes
//! every other line as assistant text (SPEC §4.4 for the concurrency it exercises).
//!
//! The shell (`daemon::host`) drives it in quinn-proto's shape: [`Turn::poll_batch`] hands out
//! the next calls to start, [`Turn::handle_outcome`] takes each call's outcome back,
//! [`Turn::poll_event`] yields the session events to deliver, and [`Turn::finish`] gives the
//! turn's result. Everything a call needs checked before it may reach the adapter (the tool
//! name, the arguments, the daemon-side path rule, whether the session has an adapter) is
//! decided here; the shell only starts the admitted calls on the link and awaits them. It does
//! no I/O, reads no clock and draws no randomness: call ids derive from the wake's key.

use std::collections::VecDeque;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::core::DErr;
use super::faults::DaemonFaults;
use super::record::{data, error_body};
use super::runtime::CallError;
use crate::contract::types::protocol_v2 as v2;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{validate_relative_path, DaemonCode, PathSide};

/// One session event of the turn, for the shell to number and deliver.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEvent {
    /// The event name.
    pub name: &'static str,
    /// Whether it carries the wake's `requestId` (`sessionIdle` does not).
    pub with_request: bool,
    /// The event's data.
    pub data: Value,
}

/// One tool call to start: its id, and the operation and arguments to send, or why it never
/// reaches the adapter.
#[derive(Debug)]
pub struct Call {
    /// `call-<16 hex of the wake>-<prompt line>`.
    pub call_id: String,
    /// What to send, or the local refusal (its outcome, already known).
    pub start: Result<(ToolOperation, Value), DErr>,
}

/// A turn in progress (see the module docs).
pub struct Turn {
    lines: Vec<String>,
    next: usize,
    call_prefix: String,
    has_link: bool,
    faults: DaemonFaults,
    text: Vec<String>,
    /// `toolCalls`, in prompt order.
    calls: Vec<v2::ToolCallEntry>,
    /// The current batch: (call id, tool), in prompt order, until their outcomes are in.
    pending: Vec<(String, String)>,
    events: VecDeque<TurnEvent>,
    aborted: bool,
    done: bool,
}

fn event<T: serde::Serialize>(name: &'static str, d: &T) -> TurnEvent {
    TurnEvent { name, with_request: true, data: data(d) }
}

/// The data of `promptAccepted`, `agentStart` and `sessionIdle`: `{}`.
fn empty() -> v2::EmptyEventData {
    v2::EmptyEventData(serde_json::Map::new())
}

impl Turn {
    /// A turn of the wake `wake_key` in `generation` on `prompt`; `has_link` when the session
    /// has a bound adapter. `promptAccepted` and `agentStart` are queued.
    pub fn new(prompt: &str, generation: u64, wake_key: &str, has_link: bool, faults: DaemonFaults) -> Turn {
        let digest = Sha256::digest(format!("{generation}\0{wake_key}").as_bytes());
        let mut events = VecDeque::new();
        events.push_back(event("promptAccepted", &empty()));
        events.push_back(event("agentStart", &empty()));
        Turn {
            lines: prompt.lines().map(str::to_string).collect(),
            next: 0,
            call_prefix: hex::encode(digest)[..16].to_string(),
            has_link,
            faults,
            text: Vec::new(),
            calls: Vec::new(),
            pending: Vec::new(),
            events,
            aborted: false,
            done: false,
        }
    }

    /// The next event to deliver.
    pub fn poll_event(&mut self) -> Option<TurnEvent> {
        self.events.pop_front()
    }

    /// The next calls to start, in prompt order, with a `toolCallStart` queued for each;
    /// `None` when the prompt is used up or `abort_requested` (checked before every line).
    ///
    /// Consecutive read-only calls (`fs_list`, `fs_stat`, `fs_read`, `fs_search`) form one
    /// batch: the shell starts (admits) all of them before it awaits any, so the adapter
    /// client's limits decide what is sent, queued or refused with `adapter_queue_capacity`.
    /// Any other tool line — `fs_write`, `fs_edit`, an unknown tool — is a batch of its own,
    /// started only after everything before it ended. Text lines are collected on the way.
    /// Every outcome of the previous batch must be handed back first.
    pub fn poll_batch(&mut self, abort_requested: bool) -> Option<Vec<Call>> {
        debug_assert!(self.pending.is_empty(), "the previous batch is still running");
        if self.done {
            return None;
        }
        loop {
            // An abort asked while the turn runs ends it aborted, also when it came during
            // the last call (the call was cut short: the turn did not complete).
            if abort_requested {
                self.aborted = true;
                self.done = true;
                return None;
            }
            let Some(line) = self.lines.get(self.next) else {
                self.done = true;
                return None;
            };
            if tool_line(line).is_some() {
                break;
            }
            self.text.push(line.clone());
            self.next += 1;
        }
        let first = self.next;
        let mut end = first + 1;
        if tool_line(&self.lines[first]).is_some_and(|(tool, _)| is_read_only_tool(tool)) {
            while self.lines.get(end).and_then(|l| tool_line(l)).is_some_and(|(tool, _)| is_read_only_tool(tool)) {
                end += 1;
            }
        }
        self.next = end;
        let mut batch = Vec::with_capacity(end - first);
        for n in first..end {
            let Some((tool, args)) = tool_line(&self.lines[n]) else { continue };
            let call_id = format!("call-{}-{n}", self.call_prefix);
            let start = v2::ToolCallStartEventData { tool: tool.into(), tool_call_id: call_id.clone() };
            self.events.push_back(event("toolCallStart", &start));
            let start = prepare_call(tool, args, self.has_link, self.faults);
            self.pending.push((call_id.clone(), tool.to_string()));
            batch.push(Call { call_id, start });
        }
        Some(batch)
    }

    /// The outcome of a call of the current batch, handed back in the order the batch gave
    /// them: its `toolCalls` entry and a `toolCallEnd` are queued. An id that is not the next
    /// pending call is ignored.
    pub fn handle_outcome(&mut self, call_id: &str, outcome: Result<Value, DErr>) {
        if self.pending.first().is_none_or(|(id, _)| id != call_id) {
            return;
        }
        let (call_id, tool) = self.pending.remove(0);
        let (data, error) = match outcome {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(error_body(&e))),
        };
        let end = v2::ToolCallEndEventData {
            code: error.as_ref().map(|e| e.code.to_string()),
            // The result rides on the event too, so an event can outgrow maxEventBytes and
            // be replaced by eventDropped (PC-1.1).
            data: data.as_ref().and_then(Value::as_object).cloned().unwrap_or_default(),
            ok: error.is_none(),
            tool: tool.clone(),
            tool_call_id: call_id.clone(),
        };
        self.events.push_back(event("toolCallEnd", &end));
        self.calls.push(v2::ToolCallEntry { data, error, ok: end.ok, tool, tool_call_id: call_id });
    }

    /// The end of the turn: `agentEnd` and `sessionIdle` are queued; the result is the text
    /// and the tool calls, or `aborted` when an abort was seen before a line.
    pub fn finish(&mut self) -> Result<v2::TurnResult, DErr> {
        self.done = true;
        self.events.push_back(event("agentEnd", &v2::AgentEndEventData { aborted: self.aborted }));
        self.events.push_back(TurnEvent { name: "sessionIdle", with_request: false, data: data(&empty()) });
        if self.aborted {
            return Err(DErr::of(DaemonCode::Aborted, "the turn was aborted"));
        }
        Ok(v2::TurnResult { text: self.text.join("\n"), tool_calls: std::mem::take(&mut self.calls) })
    }
}

/// A `TOOL <tool> <args>` prompt line: the tool and its arguments (`{}` when absent).
fn tool_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("TOOL ")?;
    Some(rest.split_once(' ').unwrap_or((rest, "{}")))
}

/// The read-only tools, which a turn runs concurrently.
fn is_read_only_tool(tool: &str) -> bool {
    matches!(tool, "fs_list" | "fs_stat" | "fs_read" | "fs_search")
}

/// What a call sends, or why it never reaches the adapter, in this order: the tool name, the
/// arguments (a JSON object), the daemon-side path rule, an adapter to send it to.
fn prepare_call(tool: &str, args: &str, has_link: bool, faults: DaemonFaults) -> Result<(ToolOperation, Value), DErr> {
    let op: ToolOperation = tool.replacen('_', ".", 1).parse().map_err(|_| {
        DErr::of(DaemonCode::UnknownTool, "the tool is not one of fs_list fs_stat fs_read fs_search fs_write fs_edit")
    })?;
    let payload: Value = serde_json::from_str(args)
        .map_err(|_| DErr::of(DaemonCode::InvalidToolArguments, "tool arguments must be a JSON object"))?;
    if !payload.is_object() {
        return Err(DErr::of(DaemonCode::InvalidToolArguments, "tool arguments must be a JSON object"));
    }
    if let Some(p) = payload.get("path").and_then(Value::as_str) {
        if !super::faults::path_passed(p, faults) {
            validate_relative_path(p, PathSide::Daemon, "path").map_err(|e| DErr::new(e.code.as_str(), &e.message))?;
        }
    }
    if !has_link {
        return Err(DErr::of(DaemonCode::ToolUnavailable, "this session has no tool adapter"));
    }
    Ok((op, payload))
}

/// An adapter call's error as the turn reports it: code, message, `retryable`, and
/// `details.indeterminate` / `details.retryAfterMs` when they apply.
pub fn call_error(e: CallError) -> DErr {
    let mut d = DErr::new(&e.code, &e.message).with_details(&v2::ToolCallErrorDetails {
        indeterminate: e.indeterminate.then_some(true),
        retry_after_ms: e.retry_after_ms,
    });
    d.retryable = e.retryable;
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn drain(t: &mut Turn) -> Vec<(&'static str, Value)> {
        std::iter::from_fn(|| t.poll_event()).map(|e| (e.name, e.data)).collect()
    }

    fn names(events: &[(&'static str, Value)]) -> Vec<&'static str> {
        events.iter().map(|e| e.0).collect()
    }

    #[test]
    fn reads_run_as_one_batch_and_a_write_runs_alone_in_prompt_order() {
        let prompt = "hello\nTOOL fs_read {\"path\":\"a\"}\nTOOL fs_stat {\"path\":\"a\"}\nTOOL fs_write {\"path\":\"b\",\"content\":\"x\"}\nTOOL fs_list\nbye";
        let mut t = Turn::new(prompt, 3, "k1", true, DaemonFaults::NONE);
        assert_eq!(names(&drain(&mut t)), ["promptAccepted", "agentStart"]);
        let b1 = t.poll_batch(false).expect("the two reads");
        assert_eq!(b1.len(), 2);
        let prefix = &hex::encode(Sha256::digest(b"3\0k1"))[..16];
        assert_eq!(b1[0].call_id, format!("call-{prefix}-1"), "ids name the wake and the prompt line");
        assert_eq!(b1[1].call_id, format!("call-{prefix}-2"));
        assert_eq!(b1[0].start.as_ref().unwrap(), &(ToolOperation::FsRead, json!({"path": "a"})));
        let ev = drain(&mut t);
        assert_eq!(names(&ev), ["toolCallStart", "toolCallStart"]);
        assert_eq!(ev[0].1, json!({"toolCallId": b1[0].call_id, "tool": "fs_read"}));
        t.handle_outcome(&b1[0].call_id, Ok(json!({"content": "A"})));
        t.handle_outcome(&b1[1].call_id, Err(DErr::of(DaemonCode::ToolUnavailable, "gone")));
        let ev = drain(&mut t);
        // A success carries the call's data; a failure has none.
        assert_eq!(
            ev[0].1,
            json!({"toolCallId": b1[0].call_id, "tool": "fs_read", "ok": true, "code": null, "data": {"content": "A"}})
        );
        assert_eq!(ev[1].1["code"], "tool_unavailable");
        assert!(ev[1].1.get("data").is_none());
        let b2 = t.poll_batch(false).expect("the write, alone");
        assert_eq!(b2.len(), 1);
        assert_eq!(b2[0].start.as_ref().unwrap().0, ToolOperation::FsWrite);
        t.handle_outcome(&b2[0].call_id, Ok(json!({})));
        let b3 = t.poll_batch(false).expect("the list, no arguments");
        assert_eq!(b3[0].start.as_ref().unwrap(), &(ToolOperation::FsList, json!({})));
        t.handle_outcome(&b3[0].call_id, Ok(json!({"entries": []})));
        assert!(t.poll_batch(false).is_none(), "the text line after it ends the prompt");
        let r = data(&t.finish().unwrap());
        assert_eq!(r["text"], "hello\nbye");
        let calls = r["toolCalls"].as_array().unwrap();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0]["data"], json!({"content": "A"}));
        assert_eq!(calls[1]["error"]["code"], "tool_unavailable");
        assert_eq!(calls[1]["ok"], false);
        // What the journal stores decodes back to the same result (a replay sends it again).
        let back: v2::TurnResult = serde_json::from_value(r.clone()).expect("a stored result decodes");
        assert_eq!(data(&back), r);
        let ev = drain(&mut t);
        assert_eq!(names(&ev)[ev.len() - 2..], ["agentEnd", "sessionIdle"]);
        assert_eq!(ev[ev.len() - 2].1, json!({"aborted": false}));
    }

    #[test]
    fn calls_are_refused_before_the_adapter_with_the_exact_code() {
        let mut t = Turn::new(
            "TOOL fs_fly {}\nTOOL fs_read nope\nTOOL fs_read [1]\nTOOL fs_read {\"path\":\"../x\"}\nTOOL fs_read {\"path\":\"./\"}",
            1,
            "k",
            true,
            DaemonFaults::NONE,
        );
        let mut codes = Vec::new();
        while let Some(batch) = t.poll_batch(false) {
            for c in batch {
                let e = c.start.unwrap_err();
                codes.push(e.code.clone());
                t.handle_outcome(&c.call_id, Err(e));
            }
        }
        assert_eq!(
            codes,
            [
                "unknown_tool",
                "invalid_tool_arguments",
                "invalid_tool_arguments",
                "invalid_tool_adapter_path",
                "invalid_tool_adapter_path"
            ]
        );
        let r = data(&t.finish().unwrap());
        assert!(r["toolCalls"].as_array().unwrap().iter().all(|c| c["ok"] == false));
        // Without an adapter a well-formed call is tool_unavailable; the fault lets `./` by.
        let mut t = Turn::new("TOOL fs_stat {\"path\":\"a\"}", 1, "k", false, DaemonFaults::NONE);
        assert_eq!(t.poll_batch(false).unwrap()[0].start.as_ref().unwrap_err().code, "tool_unavailable");
        let mut t = Turn::new(
            "TOOL fs_stat {\"path\":\"./\"}",
            1,
            "k",
            true,
            crate::daemon::faults::DaemonFault::PassNonCanonicalPaths.into(),
        );
        let ok = t.poll_batch(false).unwrap().remove(0).start;
        assert_eq!(ok.is_ok(), cfg!(feature = "faults"));
    }

    #[test]
    fn an_abort_before_a_line_ends_the_turn_aborted() {
        let mut t = Turn::new("one\nTOOL fs_stat {\"path\":\"a\"}\ntwo", 1, "k", true, DaemonFaults::NONE);
        let b = t.poll_batch(false).unwrap();
        t.handle_outcome(&b[0].call_id, Ok(json!({})));
        assert!(t.poll_batch(true).is_none());
        assert!(t.poll_batch(false).is_none(), "an aborted turn stays ended");
        let e = t.finish().unwrap_err();
        assert_eq!((e.code.as_str(), e.retryable), ("aborted", DaemonCode::Aborted.default_retryable()));
        let ev = drain(&mut t);
        assert_eq!(ev[ev.len() - 2], ("agentEnd", json!({"aborted": true})));
        assert_eq!(ev.last().unwrap().0, "sessionIdle");
        // An abort seen after the last line is too late: the turn completes.
        let mut t = Turn::new("only text", 1, "k", true, DaemonFaults::NONE);
        assert!(t.poll_batch(false).is_none());
        assert!(t.poll_batch(true).is_none());
        assert_eq!(t.finish().unwrap().text, "only text");
    }

    #[test]
    fn an_outcome_out_of_order_is_ignored() {
        let mut t =
            Turn::new("TOOL fs_stat {\"path\":\"a\"}\nTOOL fs_stat {\"path\":\"b\"}", 1, "k", true, DaemonFaults::NONE);
        let b = t.poll_batch(false).unwrap();
        drain(&mut t);
        t.handle_outcome(&b[1].call_id, Ok(json!({})));
        t.handle_outcome("call-nope", Ok(json!({})));
        assert!(t.poll_event().is_none());
        t.handle_outcome(&b[0].call_id, Ok(json!({"n": 0})));
        t.handle_outcome(&b[1].call_id, Ok(json!({"n": 1})));
        let r = data(&t.finish().unwrap());
        assert_eq!(r["toolCalls"][0]["data"]["n"], 0);
        assert_eq!(r["toolCalls"][1]["data"]["n"], 1);
    }

    #[test]
    fn call_errors_keep_indeterminate_and_retry_after() {
        let e = call_error(CallError {
            code: "adapter_queue_capacity".into(),
            message: "full".into(),
            retryable: true,
            indeterminate: true,
            retry_after_ms: Some(25),
        });
        assert_eq!(
            e.body(),
            json!({"code": "adapter_queue_capacity", "message": "full", "retryable": true,
            "details": {"indeterminate": true, "retryAfterMs": 25}})
        );
    }
}

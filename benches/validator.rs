//! Validator throughput against plain `serde_json` parsing of the same lines (the floor).
//!
//! Run: `cargo bench --bench validator`. For each document kind (a descriptor as a daemon
//! admits it, an `fs.stat` and a 4 KiB `fs.read` invoke as an adapter reads them, an
//! `fs.stat` and a 4 KiB `fs.read` result as a daemon reads them, a v2 `open` command), the
//! bench times, back to back in one process:
//!
//! - the floor: `serde_json::from_slice::<serde_json::Value>` of the line;
//! - the validator: the crate's whole judgement of the same line (strict decode, every
//!   semantic rule, the JSON Schema), exactly what the reference adapter and daemon call
//!   (`judge_adapter_frame`, `admit_descriptor`, `parse_command`).
//!
//! It reports lines per second for both and the ratio validator/floor (higher is better; the
//! target is ≥ 0.3). Each repetition alternates the two in blocks, and the reported ratio is
//! the median of the per-repetition ratios, so background load hits both sides alike.
//! `PI_BENCH_REPS` (default 7) and `PI_BENCH_MS` (time per side per repetition, default 300)
//! tune it; `PI_BENCH_ONLY` keeps the kinds whose name contains it (for profiling).

use std::hint::black_box;
use std::time::{Duration, Instant};

use pi_conform::contract::command::{parse_command, HostContext};
use pi_conform::contract::descriptor::{admit_descriptor, ExpectedBinding};
use pi_conform::contract::frame::{judge_adapter_frame, Binding, Direction};
use serde_json::{json, Value};

const DESCRIPTOR: &str = include_str!("../vectors/bases/descriptor.json");
const INVOKE: &str = include_str!("../vectors/bases/invoke.json");
const RESULT: &str = include_str!("../vectors/bases/result.json");
const OPEN_V2: &str = include_str!("../vectors/bases/open-v2.json");

fn compact(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("serializes")
}

fn main() {
    let reps: usize = std::env::var("PI_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(7).max(1);
    let ms: u64 = std::env::var("PI_BENCH_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(300).max(10);
    let per_side = Duration::from_millis(ms);

    let descriptor: Value = serde_json::from_str(DESCRIPTOR).expect("descriptor base");
    let expected = ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };
    let admitted = admit_descriptor(&descriptor, Some(&expected)).expect("the worked example is admitted");
    let binding = Binding::from(&admitted);

    let mut stat_invoke: Value = serde_json::from_str(INVOKE).expect("invoke base");
    stat_invoke["operation"] = json!("fs.stat");
    stat_invoke["payload"] = json!({"path": "src/protocol.ts"});
    let read_invoke: Value = serde_json::from_str(INVOKE).expect("invoke base");
    let mut stat_result: Value = serde_json::from_str(RESULT).expect("result base");
    stat_result["operation"] = json!("fs.stat");
    stat_result["data"] = json!({
        "type": "file", "size": 4096, "modifiedAt": "2026-12-02T17:34:25.123Z"
    });
    let mut read_result: Value = serde_json::from_str(RESULT).expect("result base");
    let content: String = (0..4096).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    read_result["data"] = json!({"content": content, "bytesRead": 4096, "eof": false});
    let open: Value = serde_json::from_str(OPEN_V2).expect("open base");

    type Judge<'a> = Box<dyn Fn(&[u8]) -> bool + 'a>;
    let frame = |dir: Direction| -> Judge<'_> {
        let b = &binding;
        Box::new(move |line: &[u8]| judge_adapter_frame(line, b, dir).is_ok())
    };
    let host = HostContext { host_instance_id: "host-019f" };
    let cases: Vec<(&str, Vec<u8>, Judge<'_>)> = vec![
        (
            "descriptor (admit_descriptor)",
            compact(&descriptor),
            Box::new(|line: &[u8]| {
                pi_conform::wire::decode_line(line).is_ok_and(|v| admit_descriptor(&v, Some(&expected)).is_ok())
            }),
        ),
        ("fs.stat invoke (to adapter)", compact(&stat_invoke), frame(Direction::ToAdapter)),
        ("fs.read invoke (to adapter)", compact(&read_invoke), frame(Direction::ToAdapter)),
        ("fs.stat result (to daemon)", compact(&stat_result), frame(Direction::ToDaemon)),
        ("fs.read 4 KiB result (to daemon)", compact(&read_result), frame(Direction::ToDaemon)),
        (
            "v2 open command (parse_command)",
            compact(&open),
            Box::new(|line: &[u8]| pi_conform::wire::decode_line(line).is_ok_and(|v| parse_command(&v, &host).is_ok())),
        ),
    ];

    println!("validator vs plain serde_json::from_slice::<Value> (lines/s; ratio = validator/serde_json)");
    println!("{} repetitions of {} ms per side", reps, ms);
    let mut table = Vec::new();
    let only = std::env::var("PI_BENCH_ONLY").unwrap_or_default();
    for (name, line, judge) in cases.iter().filter(|(n, _, _)| n.contains(only.as_str())) {
        assert!(judge(line), "{name}: the validator must accept the bench line");
        let floor = |l: &[u8]| serde_json::from_slice::<Value>(l).is_ok();
        // Warm-up.
        rate(&floor, line, per_side / 3);
        rate(judge, line, per_side / 3);
        let mut ratios = Vec::new();
        let mut v_rates = Vec::new();
        let mut f_rates = Vec::new();
        for _ in 0..reps {
            let f = rate(&floor, line, per_side);
            let v = rate(judge, line, per_side);
            ratios.push(v / f);
            v_rates.push(v);
            f_rates.push(f);
        }
        let ratio = median(ratios.clone());
        println!(
            "{name:<36} {:>5} B  validator {:>9.0}/s  serde_json {:>9.0}/s  ratio {:.3}  (per rep: {})",
            line.len(),
            median(v_rates.clone()),
            median(f_rates.clone()),
            ratio,
            ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" ")
        );
        table.push((name.to_string(), ratio));
    }
    // Where a validator call goes (a diagnostic, not a target): the stages alone, on the
    // fs.stat invoke line.
    let line = compact(&stat_invoke);
    let value = pi_conform::wire::decode_line(&line).expect("decodes");
    let span = per_side;
    let floor = rate(&|l: &[u8]| serde_json::from_slice::<Value>(l).is_ok(), &line, span);
    let strict = rate(&|l: &[u8]| pi_conform::wire::decode_line(l).is_ok(), &line, span);
    let schema = rate(
        &|_: &[u8]| {
            pi_conform::contract::schema::first_violation(pi_conform::contract::schema::Entry::Frame, &value).is_none()
        },
        &line,
        span,
    );
    let whole = rate(&*frame(Direction::ToAdapter), &line, span);
    let us = |r: f64| 1e6 / r;
    println!(
        "breakdown fs.stat invoke: serde_json {:.2} µs, strict decode {:.2} µs, schema {:.2} µs, whole judgement {:.2} µs",
        us(floor),
        us(strict),
        us(schema),
        us(whole)
    );
    let line = compact(&descriptor);
    let strict = rate(&|l: &[u8]| pi_conform::wire::decode_line(l).is_ok(), &line, span);
    let schema = rate(
        &|_: &[u8]| {
            pi_conform::contract::schema::first_violation(pi_conform::contract::schema::Entry::Descriptor, &descriptor)
                .is_none()
        },
        &line,
        span,
    );
    let typed = rate(
        &|_: &[u8]| {
            <pi_conform::contract::types::tool_adapter::HostToolAdapterDescriptor as serde::Deserialize>::deserialize(
                &descriptor,
            )
            .is_ok()
        },
        &line,
        span,
    );
    let whole = rate(&|_: &[u8]| admit_descriptor(&descriptor, Some(&expected)).is_ok(), &line, span);
    println!(
        "breakdown descriptor: strict decode {:.2} µs, schema {:.2} µs, typed decode {:.2} µs, admit_descriptor on the value {:.2} µs",
        us(strict),
        us(schema),
        us(typed),
        us(whole)
    );
    let worst = table.iter().map(|(_, r)| *r).fold(f64::INFINITY, f64::min);
    println!("lowest ratio {worst:.3} (target >= 0.3: {})", if worst >= 0.3 { "met" } else { "NOT met" });
}

/// Calls per second of `f` on `line`, over about `span`.
fn rate(f: &dyn Fn(&[u8]) -> bool, line: &[u8], span: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < span {
        for _ in 0..64 {
            black_box(f(black_box(line)));
        }
        n += 64;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

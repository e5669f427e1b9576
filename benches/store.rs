//! The reference daemon's catalog writes, in process (issue 25, durable open): how long a
//! session record takes to become durable through the store's writer thread, for the two
//! paths a write can take, interleaved in one run on one state directory:
//!
//! - **new record** — a session id no file holds yet (what a durable `open` writes): written
//!   into a pre-made slot and answered after one data flush (SPEC §3.4, DECISION on
//!   durability);
//! - **rewrite** — the baseline: the record of an existing session written again (a new
//!   generation): temporary file, data flush, rename, directory flush.
//!
//! Each timed write is followed, untimed, by what an open–close pair makes the writer do next
//! (the new record's removal, as `close` with `retainSession:false`), and a pause in which the
//! writer does its idle work (renaming answered slots, preparing new ones), as between two
//! opens of a client. Prints the medians, the 10th and 90th percentiles and the ratio.
//!
//! Knobs: `PI_BENCH_N` timed writes of each kind (300), `PI_BENCH_PAUSE_US` the pause after
//! each (500), `PI_BENCH_DIR` where the state directory is made (the system's temporary
//! directory: put it on the filesystem you care about).

use std::time::{Duration, Instant};

use pi_conform::daemon::store::{SessionRecord, Store};
use serde_json::json;

fn env_num(k: &str, d: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn record(id: &str, generation: u64) -> SessionRecord {
    SessionRecord {
        session_id: id.into(),
        generation,
        open_version: "2.0".into(),
        cwd: "/srv/agent".into(),
        mode: "new".into(),
        policy: Some(json!({"protocolVersion": "1.0", "adapterId": "bench", "adapterVersion": "1.0.0",
            "operations": ["fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"],
            "limits": {"maxRequestBytes": 1048576, "maxResponseBytes": 1048576}})),
        state: "dormant".into(),
        recovery: None,
        wakes: 0,
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_num("PI_BENCH_N", 300).max(10) as usize;
    let pause = Duration::from_micros(env_num("PI_BENCH_PAUSE_US", 500));
    let base = std::env::var_os("PI_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new().prefix("pc-bench-store").tempdir_in(&base).expect("temporary directory");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let store = Store::open_exclusive(&dir.path().join("state")).expect("state directory");
    let (mut fresh, mut rewrite) = (Vec::with_capacity(n), Vec::with_capacity(n));
    rt.block_on(async {
        store.queue_session(&record("kept", 1)).durable().await.expect("write");
        let warmup = 20;
        for i in 0..n + warmup {
            // A new record, then its removal (untimed).
            let id = format!("s{i}");
            let t = Instant::now();
            store.queue_session(&record(&id, 1)).durable().await.expect("write");
            let a = t.elapsed().as_secs_f64() * 1e6;
            store.queue_remove_session(&id).durable().await.expect("remove");
            std::thread::sleep(pause);
            // The baseline: an existing record written again.
            let t = Instant::now();
            store.queue_session(&record("kept", i as u64 + 2)).durable().await.expect("write");
            let b = t.elapsed().as_secs_f64() * 1e6;
            std::thread::sleep(pause);
            if i >= warmup {
                fresh.push(a);
                rewrite.push(b);
            }
        }
    });
    let (f50, r50) = (pct(&mut fresh, 0.5), pct(&mut rewrite, 0.5));
    println!("catalog write durable, {n} each, state directory under {}:", base.display());
    println!(
        "  new record (slot)    median {f50:8.0} µs   p10 {:8.0}   p90 {:8.0}",
        pct(&mut fresh, 0.1),
        pct(&mut fresh, 0.9)
    );
    println!(
        "  rewrite (baseline)   median {r50:8.0} µs   p10 {:8.0}   p90 {:8.0}",
        pct(&mut rewrite, 0.1),
        pct(&mut rewrite, 0.9)
    );
    println!("ratio new record / rewrite (medians): {:.3}", f50 / r50);
}

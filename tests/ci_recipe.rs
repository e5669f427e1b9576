//! The CI recipe for adapter authors (issue 26, item 8; docs/ci.md, examples/ci/) works: its
//! script, run for real with `bash` against the reference adapter started by
//! `pi-conform adapter --command` (as an author's adapter is), exits 0 with the JUnit and HTML
//! reports written; a broken adapter makes it exit 1 with the reports still written; a missing
//! setting is a usage error that writes nothing. The workflow and the script that docs/ci.md
//! shows are the files, byte for byte.
//!
//! Everything runs in a temporary directory, under a time limit, with the size of every file
//! the script and its children write capped (`ulimit -f`) and at most [`CAP`] bytes of any
//! output read back.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most bytes any file the script writes may hold, and the most read back of any output.
const CAP: u64 = 16 * 1024 * 1024;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pi-conform")
}

/// At most [`CAP`] bytes of `path` (empty when it does not exist).
fn read_capped(path: &Path) -> String {
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        f.take(CAP).read_to_end(&mut out).unwrap();
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    reports: PathBuf,
}

/// Runs examples/ci/pi-conform-adapter.sh with `env` (and nothing else of the test's
/// environment but PATH and HOME) and `args`, in a fresh directory under `dir`; its files are
/// capped at [`CAP`] bytes each, its run at five minutes.
fn run_script(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Ran {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let script = root().join("examples/ci/pi-conform-adapter.sh");
    // `ulimit -f` counts 512-byte blocks in POSIX sh.
    let limit = format!("ulimit -f {} && exec bash \"$0\" \"$@\"", CAP / 512);
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(limit).arg(&script).args(args).current_dir(&work).env_clear();
    for var in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.env("REPORT_DIR", work.join("reports"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the CI script ran more than 5 minutes:\n{}", read_capped(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for f in [&out, &err] {
        assert!(std::fs::metadata(f).unwrap().len() < CAP, "{} outgrew the cap", f.display());
    }
    Ran { code: status.code(), stdout: read_capped(&out), stderr: read_capped(&err), reports: work.join("reports") }
}

/// The settings for the reference adapter as the author's adapter, plus `extra` flags of
/// `serve-adapter`.
fn reference_adapter(extra: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PI_CONFORM", bin().to_string()),
        ("ADAPTER_ID", "pi-conform-reference".to_string()),
        ("ADAPTER_VERSION", env!("CARGO_PKG_VERSION").to_string()),
        ("ADAPTER_COMMAND", format!("exec '{}' serve-adapter {extra} --socket {{socket}} --grants {{grants}}", bin())),
    ]
}

/// The `<testcase>` elements of a JUnit report, and how many hold a `<failure>`.
fn junit_cases(xml: &str) -> (usize, usize) {
    let mut reader = quick_xml::Reader::from_str(xml);
    let (mut cases, mut failures) = (0, 0);
    loop {
        match reader.read_event().expect("well-formed JUnit XML") {
            quick_xml::events::Event::Eof => break,
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => match e.name().as_ref() {
                b"testcase" => cases += 1,
                b"failure" => failures += 1,
                _ => {}
            },
            _ => {}
        }
    }
    (cases, failures)
}

#[test]
fn the_script_passes_the_reference_adapter_and_keeps_both_reports() {
    let dir = tempfile::tempdir().unwrap();
    // A part of the suite (arguments go on to `pi-conform adapter`): the whole suite against
    // the reference adapter is tests/runner.rs's job.
    let ran = run_script(dir.path(), &reference_adapter(""), &["--id", "adapter.bind", "--id", "adapter.stat"]);
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("verdict: CONFORMANT"), "{}", ran.stdout);
    assert!(ran.stderr.trim_end().ends_with(&format!("exit 0 (conformant); reports in {}", ran.reports.display())));
    let junit = read_capped(&ran.reports.join("pi-conform.junit.xml"));
    let (cases, failures) = junit_cases(&junit);
    assert!(cases > 0 && failures == 0, "{cases} test cases, {failures} failures:\n{junit}");
    assert!(junit.contains("adapter.stat.not-found") && !junit.contains("<error"), "{junit}");
    let html = read_capped(&ran.reports.join("pi-conform.html"));
    assert!(html.to_ascii_lowercase().starts_with("<!doctype html>"), "{}", &html[..html.len().min(200)]);
    assert!(html.contains("CONFORMANT") && !html.contains("NOT CONFORMANT"));
    // The log is kept beside them, as printed.
    let log = read_capped(&ran.reports.join("pi-conform.txt"));
    assert!(log.contains("verdict: CONFORMANT"), "{log}");
    for f in ["pi-conform.junit.xml", "pi-conform.html", "pi-conform.txt"] {
        let len = std::fs::metadata(ran.reports.join(f)).unwrap().len();
        assert!(len > 0 && len < CAP, "{f}: {len} bytes");
    }
}

#[test]
fn a_broken_adapter_fails_the_job_and_the_reports_are_still_kept() {
    let dir = tempfile::tempdir().unwrap();
    // The reference adapter with one rule broken on purpose (a hidden test-aid switch):
    // a missing file is `io_error` instead of `not_found`.
    let ran = run_script(dir.path(), &reference_adapter("--fault wrong-not-found-code"), &["--id", "adapter.stat"]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("verdict: NOT CONFORMANT"), "{}", ran.stdout);
    assert!(ran.stderr.contains("exit 1 (a MUST failed"), "{}", ran.stderr);
    let junit = read_capped(&ran.reports.join("pi-conform.junit.xml"));
    let (_, failures) = junit_cases(&junit);
    assert!(failures >= 1 && junit.contains("adapter.stat.not-found"), "{junit}");
    assert!(read_capped(&ran.reports.join("pi-conform.html")).contains("NOT CONFORMANT"));
}

#[test]
fn a_missing_setting_is_a_usage_error_that_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = reference_adapter("");
    env.retain(|(k, _)| *k != "ADAPTER_ID");
    let ran = run_script(dir.path(), &env, &[]);
    assert_eq!(ran.code, Some(2), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("set ADAPTER_ID"), "{}", ran.stderr);
    assert!(!ran.reports.exists(), "nothing is written on a usage error");
    // pi-conform itself missing is one too.
    let mut env = reference_adapter("");
    env[0].1 = dir.path().join("no-such-pi-conform").display().to_string();
    let ran = run_script(&dir.path().join("again"), &env, &[]);
    assert_eq!(ran.code, Some(2), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("not found"), "{}", ran.stderr);
}

/// The body of the first fenced block of `lang` after the heading `heading` in `text`.
fn shown(text: &str, heading: &str, lang: &str) -> String {
    let after = text.split_once(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}")).1;
    let body = after.split_once(&format!("```{lang}\n")).unwrap_or_else(|| panic!("no {lang} block")).1;
    let mut out = String::new();
    for line in body.lines() {
        if line == "```" {
            return out;
        }
        out.push_str(line);
        out.push('\n');
    }
    panic!("the {lang} block under {heading:?} is not closed");
}

#[test]
fn docs_ci_shows_the_recipes_files_verbatim_and_the_workflow_keeps_the_reports() {
    let doc = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let workflow = std::fs::read_to_string(root().join("examples/ci/pi-conform.yml")).unwrap();
    let script = std::fs::read_to_string(root().join("examples/ci/pi-conform-adapter.sh")).unwrap();
    assert_eq!(shown(&doc, "## The workflow", "yaml"), workflow, "docs/ci.md shows another workflow");
    assert_eq!(shown(&doc, "## The script", "bash"), script, "docs/ci.md shows another script");
    // The workflow installs pi-conform pinned, runs the script, and uploads the reports even
    // when the suite fails.
    for needle in [
        "cargo install --locked --git \"$PI_CONFORM_GIT\" --rev \"$PI_CONFORM_REV\" pi-conform",
        "run: ci/pi-conform-adapter.sh",
        "if: always()",
        "uses: actions/upload-artifact@",
        "path: ${{ env.REPORT_DIR }}",
        "ADAPTER_COMMAND:",
        "ADAPTER_ID:",
        "ADAPTER_VERSION:",
    ] {
        assert!(workflow.contains(needle), "the workflow lacks {needle:?}");
    }
    assert!(!workflow.contains('\t'), "YAML has no tabs");
    // The script runs the adapter suite with both reports, and is executable.
    for needle in
        ["adapter --command", "--junit \"$REPORT_DIR/pi-conform.junit.xml\"", "--html \"$REPORT_DIR/pi-conform.html\""]
    {
        assert!(script.contains(needle), "the script lacks {needle:?}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root().join("examples/ci/pi-conform-adapter.sh")).unwrap().permissions().mode();
    assert!(mode & 0o111 != 0, "examples/ci/pi-conform-adapter.sh is not executable");
    let st = Command::new("bash").arg("-n").arg(root().join("examples/ci/pi-conform-adapter.sh")).status().unwrap();
    assert!(st.success(), "bash -n refuses the script");
}

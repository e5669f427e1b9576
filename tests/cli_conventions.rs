//! The command line's conventions, driven as a user and a CI job drive it: the real binary,
//! real pipes, real files. Run output (one line per case, `failures:`, --fail-fast,
//! --max-fail, -q, KNOWN), error wording, broken pipes, empty filters, `validate` streaming
//! and binary input, `validate --document`.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pi-conform"));
    c.env_remove("NO_COLOR");
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The ids listed under `failures:`.
fn failures_list(out: &str) -> Vec<String> {
    let Some(list) = out.split("\nfailures:\n").nth(1) else { return vec![] };
    list.lines().take_while(|l| l.starts_with("    ")).map(|l| l.trim().to_string()).collect()
}

// The reference adapter with two rules broken on purpose (hidden test-aid switches):
// `wrong-not-found-code` fails adapter.stat.not-found; `dotdot-allowed` fails the two
// adapter.path.dotdot-* cases.
const BROKEN: [&str; 4] = ["--fault", "wrong-not-found-code", "--fault", "dotdot-allowed"];

/// The cases the broken runs below select: the two adapter.path.dotdot-* cases and every
/// adapter.stat case.
const SELECTED: [&str; 4] = ["--id", "adapter.path.dotdot", "--id", "adapter.stat"];

/// How many cases `SELECTED` picks, read from the catalogue (it grows; a count written here
/// went stale when adapter.stat.socket-unsupported was added).
fn selected_count() -> usize {
    let (code, out, err) = run(&[&["selftest", "--list", "--format", "json"][..], &SELECTED].concat());
    assert_eq!(code, 0, "{err}");
    out.lines().count()
}

/// The progress mark of case `i` of `n` as a per-case line starts (`[ 3/10]`).
fn mark(i: usize, n: usize) -> String {
    let w = n.to_string().len();
    format!("[{i:>w$}/{n}]")
}

#[test]
fn outside_a_terminal_each_case_is_one_line_as_it_finishes_then_the_failures_list() {
    let n = selected_count();
    let args = [&["selftest"][..], &BROKEN, &SELECTED].concat();
    let (code, out, err) = run(&args);
    assert_eq!(code, 1, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    // The 2 dotdot cases, then the stat cases, numbered, in catalogue order.
    assert_eq!(lines.len(), n, "{out}");
    assert!(lines[0].starts_with(&format!("{} FAIL  adapter.path.dotdot-escape (PC-5.1, MUST) ", mark(1, n))), "{out}");
    assert!(
        lines.iter().any(|l| l.starts_with(&format!("{} PASS  adapter.stat.file (PC-5.3.stat, MUST) ", mark(3, n)))),
        "{out}"
    );
    // Every per-case line comes before the first detail block.
    assert!(out.find(lines[n - 1]).unwrap() < out.find("\nFAIL adapter.").unwrap(), "{out}");
    assert_eq!(
        failures_list(&out),
        ["adapter.path.dotdot-escape", "adapter.path.dotdot-inner", "adapter.stat.not-found"],
        "{out}"
    );
    // No ANSI colour when standard output is not a terminal (--color auto).
    assert!(!out.contains('\x1b'), "{out}");
    // The Why of a wrong code says what the adapter did, the rule, and what it should do.
    assert!(
        out.contains(
            "Why:         the adapter answered error `io_error`; PC-5.3.stat (MUST): A missing path is not_found; \
             it should answer error `not_found` instead"
        ),
        "{out}"
    );
}

#[test]
fn fail_fast_and_max_fail_stop_the_run_and_report_what_was_not_run() {
    let n = selected_count();
    let args = [&["selftest"][..], &BROKEN, &SELECTED, &["--fail-fast"]].concat();
    let (code, out, err) = run(&args);
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(failures_list(&out), ["adapter.path.dotdot-escape"], "{out}");
    assert!(
        out.contains(&format!("stopped early (--fail-fast / --max-fail): {} selected cases not run", n - 1)),
        "{out}"
    );
    assert!(out.contains(&format!(", {} not run;", n - 1)), "{out}");
    // --max-fail 2 runs past the first failure and stops at the second; JSON lists the rest.
    let args = [&["selftest"][..], &BROKEN, &SELECTED, &["--max-fail", "2", "--format", "json"]].concat();
    let (code, out, err) = run(&args);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is only the JSON report");
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    assert_eq!(v["summary"]["notRun"], n - 2);
    assert_eq!(v["notRun"][0], "adapter.stat.file");
    // Beside a JSON report the per-case lines go to standard error.
    assert!(err.contains(&format!("{} FAIL  adapter.path.dotdot-inner", mark(2, n))), "{err}");
    // A limit of 0 is a usage error.
    let (code, _, err) = run(&["selftest", "--max-fail", "0"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn quiet_prints_failures_only_and_known_failures_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline.txt");
    std::fs::write(&baseline, "adapter.path.dotdot-escape\nadapter.path.dotdot-inner\n").unwrap();
    let base =
        [&["selftest"][..], &BROKEN, &["--id", "adapter.path.dotdot", "--id", "adapter.stat.not-found"]].concat();
    let with_baseline = [&base[..], &["--baseline", baseline.to_str().unwrap()]].concat();
    let (code, out, err) = run(&with_baseline);
    assert_eq!(code, 1, "{out}\n{err}");
    let known: Vec<&str> = out.lines().filter(|l| l.starts_with("KNOWN ")).collect();
    assert_eq!(known.len(), 2, "{out}");
    assert!(known[0].starts_with("KNOWN adapter.path.dotdot-escape (PC-5.1, MUST): known failure (baseline): "));
    // A known failure has no detail block: no Requirement/Transcript lines for it.
    assert_eq!(out.matches("  Requirement:").count(), 1, "{out}");
    assert_eq!(failures_list(&out), ["adapter.stat.not-found"]);
    let (code, out, err) = run(&[&with_baseline[..], &["-q"]].concat());
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(!out.lines().any(|l| l.starts_with('[') || l.starts_with("KNOWN") || l.starts_with("selftest:")), "{out}");
    assert!(out.starts_with("FAIL adapter.stat.not-found (PC-5.3.stat, MUST)\n"), "{out}");
    assert!(out.contains("verdict: NOT CONFORMANT"), "{out}");
}

#[test]
fn color_always_colours_and_never_or_no_color_does_not() {
    let args = ["selftest", "--id", "adapter.stat.file", "-q"];
    let (_, out, _) = run(&[&args[..], &["--color", "always"]].concat());
    assert!(out.contains("\x1b[1;32mCONFORMANT\x1b[0m"), "{out:?}");
    let (_, out, _) = run(&[&args[..], &["--color", "never"]].concat());
    assert!(!out.contains('\x1b'), "{out:?}");
    let out = bin().args(args).env("NO_COLOR", "1").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
}

#[test]
fn a_closed_pipe_ends_quietly_with_exit_0() {
    for args in [&["adapter", "--list"][..], &["vectors"], &["daemon", "--list"]] {
        let mut child = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 16];
        out.read_exact(&mut first).unwrap();
        drop(out); // what `| head -c 16` does
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe") && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A run whose standard error and output both close early (`2>&1 | head -1`) ends quietly:
/// no panic on the per-case lines, exit 0 when the report cannot be written either.
#[test]
fn a_run_with_both_streams_closed_ends_quietly() {
    let mut child = bin()
        .args(["selftest", "--id", "adapter.stat", "--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn filters_that_match_nothing_exit_2_in_every_mode() {
    for args in [
        &["adapter", "--list", "--tag", "nosuch"][..],
        &["daemon", "--list", "--tag", "nosuch"],
        &["selftest", "--list", "--id", "nosuch"],
        &["selftest", "--id", "nosuch"],
        &["vectors", "--id", "nosuch"],
        &["vectors", "--check", "--id", "nosuch"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("no case matches the filters") || err.contains("no vector id starts with"), "{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

fn grant(dir: &std::path::Path, root: &std::path::Path, extra: &[&str]) -> (i32, String, String) {
    let grants = dir.join("grants.json");
    let socket = dir.join("a.sock");
    let args = [
        &[
            "grant",
            "--grants",
            grants.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
            "--root",
            root.to_str().unwrap(),
            "--host-instance",
            "host-a",
            "--session",
            "s-1",
            "--generation",
            "1",
        ][..],
        extra,
    ]
    .concat();
    run(&args)
}

fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn grant_with_a_missing_root_says_so_once() {
    let dir = private_dir();
    let (code, out, err) = grant(dir.path(), &dir.path().join("missing"), &[]);
    assert_eq!(code, 2, "{out}");
    let want = format!("pi-conform: root {} does not exist\n", dir.path().join("missing").display());
    assert_eq!(err, want);
    assert!(!dir.path().join("grants.json").exists(), "nothing written on a refusal");
}

#[test]
fn validate_document_judges_a_pretty_printed_descriptor_whole() {
    let dir = private_dir();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let desc = dir.path().join("d.json");
    let (code, _, err) = grant(dir.path(), &root, &["--output", desc.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&desc).unwrap();
    assert!(text.lines().count() > 20, "grant writes a pretty-printed descriptor");
    let d = desc.to_str().unwrap();
    let (code, out, err) =
        run(&["validate", "--document", d, "--host-instance", "host-a", "--session", "s-1", "--generation", "1"]);
    assert_eq!((code, out.as_str()), (0, format!("document {d}: valid descriptor\n").as_str()), "{err}");
    // Bound to another host than the judging one: refused with the code and the member.
    let (code, out, _) = run(&["validate", "--document", d, "--session", "s-1", "--generation", "1"]);
    assert_eq!(code, 1);
    assert!(out.contains("invalid descriptor: tool_adapter_binding_mismatch field=binding.hostInstanceId"), "{out}");
    // Read as NDJSON instead, it is line after line of invalid_json, with a hint.
    let (code, out, err) = run(&["validate", d]);
    assert_eq!(code, 1);
    assert!(out.contains("line 1: invalid command: invalid_json field=line"), "{out}");
    assert!(err.contains(&format!("hint: {d} looks like one pretty-printed JSON document")), "{err}");
    // A handle never appears in any verdict.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let handle = v["binding"]["capabilityHandle"].as_str().unwrap();
    assert!(!out.contains(handle) && !err.contains(handle));
    // An unknown member is named, in validate and in the runner.
    let mut v2 = v.clone();
    v2["binding"]["extraMember"] = serde_json::json!(1);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_string_pretty(&v2).unwrap()).unwrap();
    let b = bad.to_str().unwrap();
    let (code, out, _) =
        run(&["validate", "--document", b, "--host-instance", "host-a", "--session", "s-1", "--generation", "1"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("invalid descriptor: invalid_tool_adapter_binding field=descriptor.binding.extraMember"),
        "{out}"
    );
    let (code, _, err) = run(&["adapter", "/nonexistent.sock", "--descriptor", b, "--root", root.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "the descriptor is refused: invalid_tool_adapter_binding at member \"descriptor.binding.extraMember\": \
             binding has an unknown key"
        ),
        "{err}"
    );
    assert!(!err.contains(handle));
}

#[test]
fn strict_json_errors_carry_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("dup.json");
    std::fs::write(&f, "{\n  \"protocolVersion\": \"1.0\",\n  \"protocolVersion\": \"1.0\"\n}\n").unwrap();
    let p = f.to_str().unwrap();
    let (code, _, err) = run(&["adapter", "/nonexistent.sock", "--descriptor", p, "--root", "/tmp"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("descriptor {p}:3:19: not strict JSON: duplicate object key \"protocolVersion\"")),
        "{err}"
    );
    let (code, out, _) = run(&["validate", "--document", p]);
    assert_eq!(code, 1);
    assert!(
        out.contains(
            "invalid_json field=line: line is not one strict JSON text at line 3 column 19: duplicate object key"
        ),
        "{out}"
    );
    // Per NDJSON line: the column.
    let mut child = bin().args(["validate"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"{\"a\":1 \"b\":2}\n").unwrap();
    let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
    assert!(out.starts_with("line 1: invalid command: invalid_json field=line: line is not one strict JSON text at column 8: expected `,` or `}`"), "{out}");
}

/// Every line gets a verdict whatever bytes it holds, and the next line is judged: a NUL or
/// another raw control byte is `invalid_json` (as Pi Daemon 0.3.3 answers it), invalid UTF-8
/// `invalid_utf8`; a binary blob is judged line by line, never refused as "not text".
#[test]
fn validate_gives_every_line_a_verdict_whatever_bytes_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("lines");
    let valid = b"\"a.txt\"";
    let mut bytes = Vec::new();
    for line in [&b"\x00"[..], b"\"a\x00.txt\"", b"{\"a\":\x01}", b"\xff\xfe", valid] {
        bytes.extend_from_slice(line);
        bytes.push(b'\n');
    }
    std::fs::write(&f, &bytes).unwrap();
    let (code, out, err) = run(&["validate", "--kind", "path", "--format", "json", f.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let verdicts: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let codes: Vec<&str> = verdicts
        .iter()
        .map(|v| v["result"]["code"].as_str().unwrap_or(v["result"]["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(codes, ["invalid_json", "invalid_json", "invalid_json", "invalid_utf8", "valid"], "{out}");
    assert!(!err.contains("not text"), "{err}");
    // A binary blob: a verdict per line, to the end.
    let blob = dir.path().join("blob");
    let mut bytes = valid.to_vec();
    bytes.push(b'\n');
    bytes.extend((0..100_000u32).map(|i| (i % 251) as u8));
    bytes.push(b'\n');
    bytes.extend_from_slice(valid);
    std::fs::write(&blob, &bytes).unwrap();
    let (code, out, _) = run(&["validate", "--kind", "path", blob.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0] == "line 1: valid path" && lines.len() > 300, "{}", lines.len());
    let last = lines[lines.len() - 2];
    assert!(last.ends_with(": valid path"), "the last line is judged too: {last}");
    // A document holding a NUL is judged too.
    let doc = dir.path().join("doc.json");
    std::fs::write(&doc, b"{\"a\":\"\x00\"}").unwrap();
    let (code, out, err) = run(&["validate", "--document", doc.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("invalid_json"), "{out}");
}

/// `validate -` judges each line as it arrives: the first verdict is out while the input is
/// still open, and a large input never sits in memory whole.
#[test]
fn validate_streams_verdicts_in_constant_memory() {
    let mut child = bin().args(["validate"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(b"\"a/b.txt\"\n").unwrap();
    stdin.flush().unwrap();
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "line 1: valid path\n");
    // 64 MiB more in 1 MiB writes, then the child's peak memory, read while it still runs.
    let line = format!("{}\n", serde_json::json!("x".repeat(1000)));
    let chunk = line.repeat(1024 * 1024 / line.len());
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        rest
    });
    for _ in 0..64 {
        stdin.write_all(chunk.as_bytes()).unwrap();
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    drop(stdin);
    let rest = reader.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.ends_with(" valid, 0 invalid\n"), "{}", &rest[rest.len().saturating_sub(200)..]);
    eprintln!("validate: peak RSS {hwm_kb} kB after 64 MiB of input");
    assert!(hwm_kb < 48 * 1024, "peak RSS {hwm_kb} kB after 64 MiB of input: the input is being held");
}

#[test]
fn completions_generate_for_each_shell_and_bash_parses_them() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for sub in ["selftest", "adapter", "validate", "completions"] {
            assert!(out.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let (_, script, _) = run(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pi-conform.bash");
    std::fs::write(&f, &script).unwrap();
    let st = Command::new("bash").arg("-n").arg(&f).status().unwrap();
    assert!(st.success(), "bash -n refuses the completion script");
    // Sourced, it completes the subcommands of `pi-conform sel`.
    let probe = format!(
        "source {}; COMP_WORDS=(pi-conform sel); COMP_CWORD=1; _pi__conform pi-conform sel pi-conform; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        f.display()
    );
    let out = Command::new("bash").arg("-c").arg(probe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "selftest\n", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn man_pages_render_for_the_tool_and_every_visible_command() {
    let (code, out, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(out.contains(".TH pi-conform 1"), "{out}");
    assert!(out.contains(".SH SUBCOMMANDS") || out.contains("selftest"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mut pages: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    pages.sort();
    for want in ["pi-conform.1", "pi-conform-adapter.1", "pi-conform-selftest.1", "pi-conform-validate.1"] {
        assert!(pages.iter().any(|p| p == want), "{want} missing: {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("kill-matrix") && p.contains("daemon")), "hidden command paged");
    let adapter = std::fs::read_to_string(dir.path().join("pi-conform-adapter.1")).unwrap();
    assert!(adapter.contains("fail\\-fast") && adapter.contains("max\\-fail"), "options are documented");
}

/// `--color` reaches the logs of the servers too: `always` colours them even into a file,
/// `never` (and `auto` outside a terminal) does not.
#[test]
fn server_logs_follow_color() {
    let dir = private_dir();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let (code, _, err) = grant(dir.path(), &root, &["--output", dir.path().join("d.json").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for (choice, coloured) in [("always", true), ("never", false), ("auto", false)] {
        let sock = dir.path().join(format!("{choice}.sock"));
        let mut child = bin()
            .args(["--color", choice, "serve-adapter", "--socket", sock.to_str().unwrap(), "--grants"])
            .arg(dir.path().join("grants.json"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(t.elapsed() < std::time::Duration::from_secs(20), "the adapter did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let mut log = String::new();
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        child.wait().unwrap();
        assert!(!log.is_empty(), "{choice}: no log");
        assert_eq!(log.contains('\x1b'), coloured, "{choice}: {log:?}");
    }
}

// ------------------------------------------------------------------ issue 26

/// Waits for `child` at most `secs`; kills it and fails otherwise.
fn wait_bounded(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let t = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("did not end within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `pi-conform selftest … | head -1` under `set -o pipefail`: the reader goes after the first
/// line, long before the report; the run still finishes (the JUnit file is whole) and exits
/// with its verdict (1: a MUST failed), with no word about the pipe.
#[test]
fn a_closed_pipe_keeps_the_verdict_in_the_exit_status() {
    for format in ["human", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let junit = dir.path().join("junit.xml");
        let mut child = bin()
            .args(["selftest", "--id", "adapter.stat", "--format", format, "--junit", junit.to_str().unwrap()])
            .args(BROKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 1];
        out.read_exact(&mut first).unwrap();
        drop(out); // `| head -c 1`
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = wait_bounded(&mut child, 120);
        assert_eq!(status.code(), Some(1), "{format}: the verdict is lost: {err}");
        assert!(!err.contains("Broken pipe") && !err.contains("panicked"), "{format}: {err}");
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(xml.contains("adapter.stat.not-found") && xml.contains("<failure"), "{format}: {xml}");
    }
}

/// `validate` with its reader gone still judges every line and exits 1 for an invalid one,
/// however late in the input it comes.
#[test]
fn validate_with_a_closed_pipe_still_exits_with_its_verdict() {
    let mut child =
        bin().args(["validate", "--kind", "path"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let mut input = child.stdin.take().unwrap();
    for _ in 0..20_000 {
        input.write_all(b"\"a.txt\"\n").unwrap();
    }
    input.write_all(b"\"../x\"\n").unwrap();
    drop(input);
    let status = wait_bounded(&mut child, 60);
    assert_eq!(status.code(), Some(1), "the last line is invalid");
}

/// Ctrl-C during `adapter --command`: one line on standard error, no case reported as an
/// error or failure after it, no harness error, exit 130.
#[test]
fn an_interrupted_command_run_says_one_line_and_exits_130() {
    let bin_path = env!("CARGO_BIN_EXE_pi-conform");
    let command = format!("exec '{bin_path}' serve-adapter --socket {{socket}} --grants {{grants}}");
    let mut runner =
        bin().args(["adapter", "--command", &command]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(runner.stdout.take().unwrap());
    // Interrupt once the suite is under way: after the third case line.
    let mut seen = Vec::new();
    while seen.iter().filter(|l: &&String| l.starts_with('[')).count() < 3 {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the run ended early: {seen:?}");
        seen.push(line);
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&runner), rustix::process::Signal::INT).unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    runner.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = wait_bounded(&mut runner, 30);
    assert_eq!(status.code(), Some(130), "{rest}{err}");
    assert_eq!(err.lines().collect::<Vec<_>>(), ["pi-conform: interrupted; the adapter was stopped"], "{err}");
    for l in rest.lines() {
        assert!(!l.contains("ERROR") && !l.contains("FAIL"), "a case after the interrupt: {l}");
    }
    assert!(!rest.contains("INCONCLUSIVE") && !rest.contains("failures:"), "no report of a cut run: {rest}");
}

/// A refused preflight with `--command` names the identity the grant was minted for and what
/// the adapter answered, shows the end of the adapter's own output (the reference adapter logs
/// `bind refused … wrong_adapter`), never the handle, and is inconclusive (exit 5), not
/// unreachable: the adapter answered.
#[test]
fn a_refused_preflight_names_the_minted_identity_and_the_adapters_output() {
    let bin_path = env!("CARGO_BIN_EXE_pi-conform");
    let command = format!("exec '{bin_path}' serve-adapter --socket {{socket}} --grants {{grants}}");
    let (code, out, err) = run(&["adapter", "--command", &command, "--adapter-id", "someone-else"]);
    assert_eq!(code, 5, "{out}{err}");
    assert!(err.contains("preflight failed"), "{err}");
    assert!(err.contains("closed the connection without `bound`") && err.contains("it answered no frame"), "{err}");
    assert!(err.contains("the runner minted the grant for adapterId \"someone-else\""), "{err}");
    assert!(err.contains("bind refused") && err.contains("wrong_adapter"), "the adapter's own words: {err}");
    assert!(!err.contains("unreachable"), "{err}");
    assert!(!out.contains("adapter suite against"), "no case ran: {out}");
}

/// A stub daemon on a real socket that answers each line with `reply` (or says nothing when
/// `None`); returns the socket's directory.
fn stub_daemon(reply: Option<&'static str>) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("d.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                // Mute (`None`): reads every line and keeps the connection, says nothing.
                for line in BufReader::new(conn).lines() {
                    if line.is_err() {
                        return;
                    }
                    if let Some(r) = reply {
                        let _ = writeln!(w, "{r}");
                    }
                }
            });
        }
    });
    (dir, sock)
}

/// Exit codes are distinct: 2 a usage error, 4 nothing answers, 5 the target answered but the
/// run is inconclusive (a daemon whose handshake lacks `data.host.hostInstanceId`, one that
/// answers with a line that is not JSON).
#[test]
fn usage_unreachable_and_inconclusive_have_distinct_exit_codes() {
    // Usage: a typo, and a daemon run without its socket.
    let (code, _, err) = run(&["adapter", "--no-such-flag"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["daemon"]);
    assert_eq!((code, err.contains("give the daemon's socket")), (2, true), "{err}");
    // Nothing listens: unreachable.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let (code, _, err) = run(&["daemon", missing.to_str().unwrap(), "--time-scale", "0.25"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("target unreachable"), "{err}");
    // Listens but never says a word: nothing answers, unreachable.
    let (_d, sock) = stub_daemon(None);
    let (code, _, err) = run(&["daemon", sock.to_str().unwrap(), "--time-scale", "0.25"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("target unreachable") && err.contains("no handshake response: timeout"), "{err}");
    // Answers, but the handshake has no host id: inconclusive, and never called unreachable.
    let (_d, sock) = stub_daemon(Some(r#"{"type":"response","requestId":"pc-hs","ok":true,"data":{}}"#));
    let (code, _, err) = run(&["daemon", sock.to_str().unwrap(), "--time-scale", "0.25"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("answered the handshake, but without data.host.hostInstanceId"), "{err}");
    assert!(!err.contains("unreachable"), "{err}");
    // Answers with a line that is not JSON: inconclusive.
    let (_d, sock) = stub_daemon(Some("HTTP/1.1 400 Bad Request"));
    let (code, _, err) = run(&["daemon", sock.to_str().unwrap(), "--time-scale", "0.25"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("a line that is not JSON") && !err.contains("unreachable"), "{err}");
}

/// Counts agree with their nouns: `1 known failure`, `0 warnings`, `0 harness errors`.
#[test]
fn the_summary_line_says_one_in_the_singular() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline");
    std::fs::write(&baseline, "adapter.stat.not-found\n").unwrap();
    let (code, out, err) = run(&[
        "selftest",
        "--id",
        "adapter.stat",
        "--fault",
        "wrong-not-found-code",
        "--baseline",
        baseline.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let summary = out.lines().find(|l| l.starts_with("adapter suite against")).unwrap();
    assert!(summary.contains(", 1 known failure (baseline), 0 warnings, "), "{summary}");
    assert!(summary.contains(", 0 harness errors, 0 stale baseline entries"), "{summary}");
    assert_eq!(pi_conform::conform::report::count(1, "warning", "warnings"), "1 warning");
    assert_eq!(pi_conform::conform::report::count(2, "warning", "warnings"), "2 warnings");
}

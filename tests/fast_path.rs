//! The fast path (hand-written rules only, the schema not evaluated on a document the rules
//! accept) gives byte-for-byte the verdict of the full path (rules, then the JSON Schema) on
//! every golden vector and on many small perturbations of each: every member removed, set to
//! values of every JSON type and to boundary values, strings lengthened, shortened, emptied
//! and given odd characters, numbers moved across their bounds, arrays grown, shrunk and
//! duplicated, and an unknown key added to every object. Code, field, message and disposition
//! are compared (the whole serialized verdict).
//!
//! The fast path includes the one-pass accept path of frames and descriptors
//! (`contract::onepass`: decoded straight into borrowed typed views, no `Value`); inside
//! `with_schema_confirmation` it declines, so the full path is the validator as it was. Every
//! document the one-pass path accepts must be accepted by the full path, and the one-pass path
//! must decide most of the valid frames and descriptors.

use pi_conform::contract::descriptor::ExpectedBinding;
use pi_conform::contract::frame::Direction;
use pi_conform::contract::onepass;
use pi_conform::contract::schema::with_schema_confirmation;
use pi_conform::judge::{judge_line, Context, Kind};
use pi_conform::vectors::{default_dir, VectorSet};
use serde_json::{json, Value};
use std::collections::HashSet;

fn replacements(v: &Value) -> Vec<Value> {
    let mut out = vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(9_007_199_254_740_993u64),
        json!(""),
        json!("x"),
        json!([]),
        json!({}),
    ];
    match v {
        Value::String(s) => {
            out.push(json!(format!("{s}x")));
            out.push(json!(format!("{s}€")));
            out.push(json!(format!("{s}😀")));
            out.push(json!(format!("/{s}")));
            out.push(json!(format!("../{s}")));
            out.push(json!(format!("{s}\u{0}")));
            out.push(json!(format!(" {s}")));
            out.push(json!(s.to_uppercase()));
            if !s.is_empty() {
                let mut t = s.clone();
                t.pop();
                out.push(json!(t));
            }
            for n in [16usize, 17, 32, 33, 64, 65, 128, 129, 256, 257, 1025] {
                out.push(json!("a".repeat(n)));
            }
        }
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                for d in [i - 1, i + 1, -i, i * 2, i.saturating_mul(1000), 1, 65536, 4_194_304, 4_194_305] {
                    out.push(json!(d));
                }
                out.push(json!(i as f64 + 0.5));
            }
            out.push(json!(u64::MAX));
        }
        Value::Bool(b) => out.push(json!(!b)),
        Value::Array(a) => {
            if let Some(first) = a.first() {
                let mut t = a.clone();
                t.push(first.clone());
                out.push(Value::Array(t));
                out.push(Value::Array(a[1..].to_vec()));
                out.push(Value::Array(vec![first.clone(); 7]));
            }
            let mut t = a.clone();
            t.push(json!("fs.move"));
            out.push(Value::Array(t));
        }
        Value::Object(_) | Value::Null => {}
    }
    out
}

/// Every single perturbation of `doc`.
fn perturb(doc: &Value, out: &mut Vec<Value>) {
    fn walk(root: &Value, path: &mut Vec<PathSeg>, node: &Value, out: &mut Vec<Value>) {
        for r in replacements(node) {
            out.push(set(root, path, Some(r)));
        }
        match node {
            Value::Object(m) => {
                let mut extra = node.clone();
                extra.as_object_mut().unwrap().insert("zzExtra".into(), json!(1));
                out.push(set(root, path, Some(extra)));
                for (k, v) in m {
                    path.push(PathSeg::Key(k.clone()));
                    out.push(set(root, path, None));
                    walk(root, path, v, out);
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    path.push(PathSeg::Index(i));
                    walk(root, path, v, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    walk(doc, &mut Vec::new(), doc, out);
}

#[derive(Clone)]
enum PathSeg {
    Key(String),
    Index(usize),
}

/// `root` with the node at `path` replaced (`Some`) or removed (`None`; a removed array element
/// never happens: arrays are only ever replaced whole).
fn set(root: &Value, path: &[PathSeg], new: Option<Value>) -> Value {
    let mut out = root.clone();
    let Some((last, parents)) = path.split_last() else {
        return new.unwrap_or(Value::Null);
    };
    let mut node = &mut out;
    for seg in parents {
        node = match seg {
            PathSeg::Key(k) => node.get_mut(k.as_str()).unwrap(),
            PathSeg::Index(i) => node.get_mut(*i).unwrap(),
        };
    }
    match (last, new) {
        (PathSeg::Key(k), Some(v)) => {
            node.as_object_mut().unwrap().insert(k.clone(), v);
        }
        (PathSeg::Key(k), None) => {
            node.as_object_mut().unwrap().shift_remove(k.as_str());
        }
        (PathSeg::Index(i), Some(v)) => node[*i] = v,
        (PathSeg::Index(_), None) => unreachable!("arrays are replaced whole"),
    }
    out
}

/// Whether the one-pass path alone accepts a frame: to the daemon, only a frame without an
/// error body is accepted there (one with an error body also needs the adapter's error-code
/// rule, `contract::adapter_output`, on the full path).
fn one_pass_frame(line: &[u8], b: &pi_conform::contract::frame::Binding, dir: Direction) -> bool {
    use pi_conform::contract::frame::FrameKind;
    if dir == Direction::ToAdapter {
        return onepass::accept_frame(line, b, dir).is_some();
    }
    // What `adapter_output_passes` decides without the full judge.
    matches!(
        onepass::accept_adapter_output(line, b),
        Some(FrameKind::Result { ok: true, .. } | FrameKind::Bound | FrameKind::Revoked | FrameKind::Aborted(true))
    )
}

#[test]
fn fast_and_full_paths_give_identical_verdicts_on_every_vector_and_perturbation() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let mut seen: HashSet<(Vec<u8>, String)> = HashSet::new();
    let (mut judged, mut valid, mut differences) = (0usize, 0usize, Vec::new());
    // Valid frames and descriptors, and how many of them the one-pass accept path decided.
    let (mut valid_one_pass_kinds, mut accepted_in_one_pass) = (0usize, 0usize);
    let mut by_kind = std::collections::BTreeMap::<String, usize>::new();
    // Every perturbation in a release build (~90 s); every 32nd in a debug build, where the same
    // loop is ten times slower (CI's `cargo test`), unless PI_CONFORM_FAST_PATH_FULL is set.
    // The vectors themselves are always judged.
    let stride = if cfg!(debug_assertions) && std::env::var_os("PI_CONFORM_FAST_PATH_FULL").is_none() { 32 } else { 1 };
    let mut n = 0usize;
    for v in &set.vectors {
        if !matches!(v.kind, Kind::Frame | Kind::Descriptor | Kind::Command) {
            continue;
        }
        let ctx: Context = set.context(v).expect("vector context");
        let mut lines = vec![set.line(v).expect("vector line")];
        if let Ok(doc) = set.document(v) {
            let mut docs = Vec::new();
            perturb(&doc, &mut docs);
            lines.extend(docs.iter().map(|d| serde_json::to_vec(d).unwrap()));
        }
        let ctx_key =
            format!("{:?}|{:?}|{}|{}|{}", v.kind, ctx.direction, ctx.host_instance_id, ctx.session_id, ctx.generation)
                + &v.context.get("descriptor").map(Value::to_string).unwrap_or_default();
        for (i, line) in lines.into_iter().enumerate() {
            n += 1;
            if i > 0 && n % stride != 0 {
                continue;
            }
            if !seen.insert((line.clone(), ctx_key.clone())) {
                continue;
            }
            let one_pass = match (v.kind, &ctx.binding) {
                (Kind::Frame, Some(b)) => one_pass_frame(&line, b, ctx.direction),
                (Kind::Descriptor, _) => onepass::accept_descriptor(
                    &line,
                    Some(&ExpectedBinding {
                        host_instance_id: &ctx.host_instance_id,
                        session_id: &ctx.session_id,
                        generation: ctx.generation,
                    }),
                )
                .is_some(),
                _ => false,
            };
            let fast = judge_line(&line, Some(v.kind), &ctx);
            let full = with_schema_confirmation(|| judge_line(&line, Some(v.kind), &ctx));
            judged += 1;
            *by_kind.entry(format!("{:?}", v.kind)).or_default() += 1;
            if fast.1.is_valid() {
                valid += 1;
                if matches!(v.kind, Kind::Frame | Kind::Descriptor) {
                    valid_one_pass_kinds += 1;
                }
            }
            if one_pass {
                accepted_in_one_pass += 1;
                if !full.1.is_valid() {
                    differences.push(format!(
                        "{}: accepted in one pass, refused by the full path ({})",
                        v.id,
                        String::from_utf8_lossy(&line)
                    ));
                }
            }
            let (a, b) = (serde_json::to_string(&fast.1).unwrap(), serde_json::to_string(&full.1).unwrap());
            if a != b || fast.0 != full.0 {
                differences.push(format!("{} ({}): fast {a} full {b}", v.id, String::from_utf8_lossy(&line)));
            }
        }
    }
    eprintln!(
        "judged {judged} distinct documents ({by_kind:?}), {valid} valid; of the \
         {valid_one_pass_kinds} valid frames and descriptors, {accepted_in_one_pass} accepted in one pass"
    );
    // The one-pass path must carry the accept path, not just exist: it declines only the forms
    // it leaves to the full path (bind, bound, integral floats, `\u` escapes, the handle).
    assert!(
        accepted_in_one_pass * 10 >= valid_one_pass_kinds * 7,
        "only {accepted_in_one_pass} of {valid_one_pass_kinds} valid frames and descriptors accepted in one pass"
    );
    assert!(judged > 20_000 / stride, "only {judged} documents judged");
    assert!(
        valid > 500 / stride,
        "only {valid} perturbed documents are valid: the perturbations test too little of the accept path"
    );
    assert!(
        differences.is_empty(),
        "{} differences between the fast and the full path:\n{}",
        differences.len(),
        differences.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Byte-level edits of a line: the JSON syntax the one-pass scanner reads itself (whitespace,
/// escapes, number forms, literals, separators, UTF-8, control characters), which the
/// perturbations above never reach (they are re-serialized by serde_json, always compact).
fn byte_edits(line: &[u8], doc: Option<&Value>) -> Vec<Vec<u8>> {
    const BYTES: &[u8] = b" \t\r\n\"\\,:{}[]01-.eE+ntfu/a\x00\x01\x1f\x7f\x80\xc3\xe2\xef\xf0\xff";
    let mut out: Vec<Vec<u8>> = doc.iter().map(|d| serde_json::to_vec_pretty(d).unwrap()).collect();
    let with = |i: usize, cut: usize, put: &[u8]| [&line[..i], put, &line[i + cut..]].concat();
    // Every member written twice (a duplicate key, at any depth).
    fn members(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    out.push(format!("{}:{}", Value::String(k.clone()), x));
                    members(x, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| members(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    if let Some(d) = doc {
        members(d, &mut all);
    }
    let text = String::from_utf8_lossy(line);
    for m in all {
        if let Some(i) = text.find(&m) {
            out.push(with(i, 0, format!("{m},").as_bytes()));
        }
    }
    for i in 0..=line.len() {
        // Two inserted bytes, and at each byte its removal and one replacement, drawn in turn
        // from the set (every position meets every byte over the lines).
        out.push(with(i, 0, &[BYTES[i % BYTES.len()]]));
        out.push(with(i, 0, &[BYTES[(i * 7 + 3) % BYTES.len()]]));
        let Some(&c) = line.get(i) else { continue };
        out.push(with(i, 1, b""));
        out.push(with(i, 1, &[BYTES[(i * 5 + 1) % BYTES.len()]]));
        // The byte as a `\u` escape (in a string, the same text; elsewhere, a syntax error),
        // and as a surrogate half.
        if c.is_ascii_alphanumeric() || c == b'/' || c == b'.' {
            out.push(with(i, 1, format!("\\u{:04x}", c).as_bytes()));
            out.push(with(i, 1, format!("\\u{:04X}", c).as_bytes()));
            out.push(with(i, 0, b"\\ud83d"));
        }
        if c == b'/' {
            out.push(with(i, 1, b"\\/"));
        }
        // After a number: a fraction, an exponent, a sign, a leading zero.
        if c.is_ascii_digit() && !line.get(i + 1).is_some_and(u8::is_ascii_digit) {
            for tail in [&b".0"[..], b"e0", b"E+0", b".5", b"e-1", b"0"] {
                out.push(with(i + 1, 0, tail));
            }
            if i > 0 && !line[i - 1].is_ascii_digit() {
                out.push(with(i, 0, b"0"));
                out.push(with(i, 0, b"-"));
            }
        }
        // Whitespace of every kind around every structural byte.
        if b"{}[],:".contains(&c) {
            out.push(with(i, 1, &[b' ', c, b'\t']));
            out.push(with(i, 1, &[b'\r', c, b'\n']));
        }
    }
    out
}

#[test]
fn one_pass_accepts_only_what_the_full_path_accepts_byte_for_byte() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let (mut judged, mut accepted, mut differences) = (0usize, 0usize, Vec::new());
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    // Every line in a release build; a sample in a debug build (as above).
    let stride = if cfg!(debug_assertions) && std::env::var_os("PI_CONFORM_FAST_PATH_FULL").is_none() { 29 } else { 1 };
    let mut n = 0usize;
    for v in &set.vectors {
        if !matches!(v.kind, Kind::Frame | Kind::Descriptor) {
            continue;
        }
        let ctx: Context = set.context(v).expect("vector context");
        let line = set.line(v).expect("vector line");
        if !judge_line(&line, Some(v.kind), &ctx).1.is_valid() {
            continue;
        }
        let doc = set.document(v).ok();
        for edit in byte_edits(&line, doc.as_ref()) {
            n += 1;
            if n % stride != 0 || !seen.insert([edit.as_slice(), v.id.as_bytes()].concat()) {
                continue;
            }
            // The one-pass verdict alone, then the whole judgement on both paths.
            let one_pass = match (v.kind, &ctx.binding) {
                (Kind::Frame, Some(b)) => one_pass_frame(&edit, b, ctx.direction),
                (Kind::Descriptor, _) => {
                    let exp = ExpectedBinding {
                        host_instance_id: &ctx.host_instance_id,
                        session_id: &ctx.session_id,
                        generation: ctx.generation,
                    };
                    let accepted = onepass::accept_descriptor(&edit, Some(&exp)).is_some();
                    assert_eq!(accepted, onepass::descriptor_accepted(&edit, Some(&exp)), "{}", v.id);
                    accepted
                }
                _ => false,
            };
            let fast = judge_line(&edit, Some(v.kind), &ctx);
            let full = with_schema_confirmation(|| judge_line(&edit, Some(v.kind), &ctx));
            judged += 1;
            accepted += usize::from(one_pass);
            if one_pass && !full.1.is_valid() {
                differences.push(format!(
                    "{}: accepted in one pass, refused by the full path ({})",
                    v.id,
                    String::from_utf8_lossy(&edit)
                ));
            }
            let (a, b) = (serde_json::to_string(&fast.1).unwrap(), serde_json::to_string(&full.1).unwrap());
            if a != b {
                differences.push(format!("{} ({}): fast {a} full {b}", v.id, String::from_utf8_lossy(&edit)));
            }
        }
    }
    eprintln!("byte-level edits: judged {judged} distinct lines, {accepted} accepted in one pass");
    assert!(judged > 100_000 / stride, "only {judged} edited lines judged");
    // Whitespace, escapes and replaced bytes inside strings keep many lines valid: the scanner
    // must accept those, not merely refuse everything unusual.
    assert!(accepted * 10 > judged, "only {accepted} of {judged} edited lines accepted in one pass");
    assert!(
        differences.is_empty(),
        "{} differences between the fast and the full path:\n{}",
        differences.len(),
        differences.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

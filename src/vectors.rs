//! Golden vectors (`vectors/*.json`): loading, materializing and checking them against the
//! validator. The format is documented in `vectors/README.md`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::descriptor::admit_descriptor;
use crate::contract::frame::{Binding, Direction};
use crate::contract::PathSide;
use crate::judge::{judge_line, Context, Kind, Verdict};

/// Why the vector set could not be used.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not a vector array.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The expected verdict of a vector.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `valid` or `invalid`.
    pub verdict: String,
    /// The expected code (invalid only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The expected `details.field` (invalid only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// `reply` or `close` (frames read by an adapter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposition: Option<String>,
}

/// One patch operation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchOp {
    /// `set` or `remove`.
    pub op: String,
    /// JSON Pointer.
    pub path: String,
    /// The value for `set` (may be `null`).
    #[serde(default)]
    pub value: Value,
}

/// A vector as written in a file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    /// Stable id.
    pub id: String,
    /// Clause of `conformance/SPEC.md`.
    pub clause: String,
    /// Document kind.
    pub kind: Kind,
    /// Context overrides.
    #[serde(default)]
    pub context: Map,
    /// The document itself.
    #[serde(default, deserialize_with = "present")]
    pub input: Option<Value>,
    /// A base document name.
    #[serde(default)]
    pub base: Option<String>,
    /// Operations applied to the base.
    #[serde(default)]
    pub patch: Vec<PatchOp>,
    /// The exact line.
    #[serde(default)]
    pub raw: Option<String>,
    /// The exact line as hex.
    #[serde(rename = "rawHex", default)]
    pub raw_hex: Option<String>,
    /// The expected verdict.
    pub expect: Expect,
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
    /// The file it came from (set by the loader).
    #[serde(skip)]
    pub file: String,
}

type Map = serde_json::Map<String, Value>;

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        <Kind as clap::ValueEnum>::from_str(&s, false).map_err(serde::de::Error::custom)
    }
}

/// The vector set: every file of a directory, plus its bases.
#[derive(Debug)]
pub struct VectorSet {
    /// The directory.
    pub dir: PathBuf,
    /// Every vector, in file then array order.
    pub vectors: Vec<Vector>,
}

/// The name of the vector set built into the binary (no file is read for it).
pub const EMBEDDED: &str = "(built-in)";

/// The vector files built into the binary at compile time: `vectors/*.json`, by file name.
/// `tests`: `embedded_set_is_the_vectors_directory` keeps this list equal to the directory.
pub const EMBEDDED_FILES: &[(&str, &str)] = &[
    ("commands.json", include_str!("../vectors/commands.json")),
    ("descriptors.json", include_str!("../vectors/descriptors.json")),
    ("events.json", include_str!("../vectors/events.json")),
    ("fit.json", include_str!("../vectors/fit.json")),
    ("frames.json", include_str!("../vectors/frames.json")),
    ("framing.json", include_str!("../vectors/framing.json")),
    ("paths.json", include_str!("../vectors/paths.json")),
    ("responses.json", include_str!("../vectors/responses.json")),
];

/// The bases (`vectors/bases/*.json`) built into the binary, by base name.
pub const EMBEDDED_BASES: &[(&str, &str)] = &[
    ("abort", include_str!("../vectors/bases/abort.json")),
    ("aborted", include_str!("../vectors/bases/aborted.json")),
    ("bind", include_str!("../vectors/bases/bind.json")),
    ("bound", include_str!("../vectors/bases/bound.json")),
    ("descriptor", include_str!("../vectors/bases/descriptor.json")),
    ("event", include_str!("../vectors/bases/event.json")),
    ("handshake", include_str!("../vectors/bases/handshake.json")),
    ("invoke", include_str!("../vectors/bases/invoke.json")),
    ("open-v1", include_str!("../vectors/bases/open-v1.json")),
    ("open-v2", include_str!("../vectors/bases/open-v2.json")),
    ("response-error", include_str!("../vectors/bases/response-error.json")),
    ("response", include_str!("../vectors/bases/response.json")),
    ("result-error", include_str!("../vectors/bases/result-error.json")),
    ("result", include_str!("../vectors/bases/result.json")),
    ("revoke", include_str!("../vectors/bases/revoke.json")),
    ("revoked", include_str!("../vectors/bases/revoked.json")),
    ("wake", include_str!("../vectors/bases/wake.json")),
];

/// The vectors shipped with this build: the set embedded in the binary ([`EMBEDDED`]), so
/// an installed binary needs no checkout. `--dir DIR` loads a directory instead.
pub fn default_dir() -> PathBuf {
    PathBuf::from(EMBEDDED)
}

/// The `vectors/` directory of the source checkout this binary was built from (tests and
/// tools that edit the vectors; an installed binary may not have it).
pub fn source_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

fn read(path: &Path) -> Result<String, VectorError> {
    std::fs::read_to_string(path).map_err(|source| VectorError::Io { path: path.to_path_buf(), source })
}

impl VectorSet {
    /// Load every `*.json` of `dir` (not `bases/`), checking ids are unique and every vector
    /// names exactly one document.
    ///
    /// `dir` = [`default_dir()`] ([`EMBEDDED`]) loads the set built into the binary.
    pub fn load(dir: &Path) -> Result<Self, VectorError> {
        let texts: Vec<(PathBuf, std::borrow::Cow<'static, str>)> = if dir == Path::new(EMBEDDED) {
            EMBEDDED_FILES.iter().map(|(name, text)| (dir.join(name), std::borrow::Cow::Borrowed(*text))).collect()
        } else {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|source| VectorError::Io { path: dir.to_path_buf(), source })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
                .collect();
            files.sort();
            files.into_iter().map(|f| read(&f).map(|t| (f, std::borrow::Cow::Owned(t)))).collect::<Result<_, _>>()?
        };
        let mut vectors = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (f, text) in texts {
            let fmt = |message: String| VectorError::Format { path: f.clone(), message };
            let mut vs: Vec<Vector> = serde_json::from_str(&text).map_err(|e| fmt(e.to_string()))?;
            for v in &mut vs {
                v.file = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
                let sources = [v.input.is_some(), v.base.is_some(), v.raw.is_some(), v.raw_hex.is_some()];
                if sources.iter().filter(|x| **x).count() != 1 {
                    return Err(fmt(format!("vector {} must have exactly one of input, base, raw, rawHex", v.id)));
                }
                if !seen.insert(v.id.clone()) {
                    return Err(fmt(format!("duplicate vector id {}", v.id)));
                }
            }
            vectors.extend(vs);
        }
        Ok(Self { dir: dir.to_path_buf(), vectors })
    }

    /// The base document `name` (`vectors/bases/<name>.json`).
    pub fn base(&self, name: &str) -> Result<Value, String> {
        if name.contains('/') || name.contains("..") {
            return Err(format!("bad base name {name}"));
        }
        if self.dir == Path::new(EMBEDDED) {
            let text = EMBEDDED_BASES.iter().find(|(n, _)| *n == name).ok_or(format!("base {name}: no such base"))?.1;
            return serde_json::from_str(text).map_err(|e| format!("base {name}: {e}"));
        }
        let p = self.dir.join("bases").join(format!("{name}.json"));
        let text = std::fs::read_to_string(&p).map_err(|e| format!("base {name}: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("base {name}: {e}"))
    }

    /// The exact line a vector stands for (LF excluded).
    pub fn line(&self, v: &Vector) -> Result<Vec<u8>, String> {
        if let Some(raw) = &v.raw {
            return Ok(raw.as_bytes().to_vec());
        }
        if let Some(hex) = &v.raw_hex {
            return decode_hex(hex).ok_or_else(|| format!("{}: rawHex is not hex", v.id));
        }
        let doc = self.document(v)?;
        serde_json::to_vec(&doc).map_err(|e| e.to_string())
    }

    /// The document of a vector with `input` or `base` + `patch`.
    pub fn document(&self, v: &Vector) -> Result<Value, String> {
        let mut doc = match (&v.input, &v.base) {
            (Some(i), _) => i.clone(),
            (None, Some(b)) => self.base(b)?,
            _ => return Err(format!("{}: not a JSON document vector", v.id)),
        };
        for op in &v.patch {
            apply(&mut doc, op).map_err(|e| format!("{}: patch {}: {e}", v.id, op.path))?;
        }
        Ok(doc)
    }

    /// The judging context of a vector.
    pub fn context(&self, v: &Vector) -> Result<Context, String> {
        let mut ctx = Context::default();
        let c = &v.context;
        if let Some(h) = c.get("hostInstanceId").and_then(Value::as_str) {
            ctx.host_instance_id = h.into();
        }
        if let Some(s) = c.get("sessionId").and_then(Value::as_str) {
            ctx.session_id = s.into();
        }
        if let Some(g) = c.get("generation").and_then(Value::as_i64) {
            ctx.generation = g;
        }
        ctx.direction = match c.get("direction").and_then(Value::as_str) {
            None | Some("to-adapter") => Direction::ToAdapter,
            Some("to-daemon") => Direction::ToDaemon,
            Some(o) => return Err(format!("{}: unknown direction {o}", v.id)),
        };
        ctx.side = match c.get("side").and_then(Value::as_str) {
            None | Some("daemon") => PathSide::Daemon,
            Some("adapter") => PathSide::Adapter,
            Some(o) => return Err(format!("{}: unknown side {o}", v.id)),
        };
        if v.kind == Kind::Frame {
            let d = match c.get("descriptor") {
                None => self.base("descriptor")?,
                Some(Value::String(name)) => self.base(name)?,
                Some(inline) => inline.clone(),
            };
            let d = admit_descriptor(&d, None).map_err(|e| format!("{}: context descriptor refused: {e}", v.id))?;
            ctx.binding = Some(Binding::from(&d));
        }
        Ok(ctx)
    }

    /// Judge one vector. A frame vector pins what a daemon (towards the daemon) or an adapter
    /// (towards the adapter) must do with the frame, so it is judged by those rules
    /// ([`crate::judge::judge_frame_by_daemon_rules`]); `validate --direction to-daemon` and the
    /// adapter runner add the adapter's own obligations on what it sends (a listing sorted, a
    /// `bytesRead` that is its content's length), which a daemon does not check.
    pub fn judge(&self, v: &Vector) -> Result<Verdict, String> {
        let ctx = self.context(v)?;
        let line = self.line(v)?;
        if v.kind == Kind::Frame {
            return Ok(crate::judge::judge_frame_by_daemon_rules(&line, &ctx));
        }
        Ok(judge_line(&line, Some(v.kind), &ctx).1)
    }
}

/// Whether a verdict meets an expectation (code, field and disposition when given).
pub fn meets(verdict: &Verdict, expect: &Expect) -> bool {
    match (verdict, expect.verdict.as_str()) {
        (Verdict::Valid, "valid") => true,
        (Verdict::Invalid { code, field, disposition, .. }, "invalid") => {
            expect.code.as_deref().is_none_or(|c| c == code)
                && expect.field.as_deref().is_none_or(|f| f == field)
                && expect.disposition.as_deref().is_none_or(|d| Some(d) == disposition.as_deref())
        }
        _ => false,
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn apply(doc: &mut Value, op: &PatchOp) -> Result<(), String> {
    let (parent_ptr, last) = op.path.rsplit_once('/').ok_or("pointer must start with /")?;
    let last = last.replace("~1", "/").replace("~0", "~");
    let parent = doc.pointer_mut(parent_ptr).ok_or("parent does not exist")?;
    match (op.op.as_str(), parent) {
        ("set", Value::Object(m)) => {
            m.insert(last, op.value.clone());
        }
        ("remove", Value::Object(m)) => {
            m.shift_remove(&last).ok_or("key does not exist")?;
        }
        ("set", Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| "bad index")?;
            match i.cmp(&a.len()) {
                std::cmp::Ordering::Less => a[i] = op.value.clone(),
                std::cmp::Ordering::Equal => a.push(op.value.clone()),
                std::cmp::Ordering::Greater => return Err("index out of range".into()),
            }
        }
        ("remove", Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| "bad index")?;
            if i >= a.len() {
                return Err("index out of range".into());
            }
            a.remove(i);
        }
        _ => return Err(format!("cannot {} here", op.op)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(dir: &Path) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
            .collect();
        v.sort();
        v
    }

    /// The embedded set is exactly the checkout's `vectors/` (a new or renamed file must be
    /// added to the lists).
    #[test]
    fn embedded_set_is_the_vectors_directory() {
        let files: Vec<(String, String)> = EMBEDDED_FILES.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
        assert_eq!(files, listing(&source_dir()), "EMBEDDED_FILES differs from vectors/*.json");
        let bases: Vec<(String, String)> =
            EMBEDDED_BASES.iter().map(|(n, t)| (format!("{n}.json"), t.to_string())).collect();
        assert_eq!(bases, listing(&source_dir().join("bases")), "EMBEDDED_BASES differs from vectors/bases");
    }

    #[test]
    fn the_embedded_and_the_directory_set_judge_alike() {
        let embedded = VectorSet::load(&default_dir()).unwrap();
        let on_disk = VectorSet::load(&source_dir()).unwrap();
        assert_eq!(embedded.vectors.len(), on_disk.vectors.len());
        assert!(embedded.vectors.len() > 900, "{}", embedded.vectors.len());
        for (a, b) in embedded.vectors.iter().zip(&on_disk.vectors) {
            assert_eq!((&a.id, &a.file), (&b.id, &b.file));
            assert_eq!(embedded.judge(a), on_disk.judge(b), "{}", a.id);
        }
    }
}

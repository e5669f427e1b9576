//! The relative path rule (SPEC §5.1).

use super::error::{Code, ContractError};

/// Which side judges a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathSide {
    /// What a daemon may send: canonical forms only (`invalid_tool_adapter_path`).
    Daemon,
    /// What a conforming adapter accepts: also `./` (the root) and one trailing `/`
    /// (`invalid_path`).
    Adapter,
}

/// Longest path in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest path component in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A path that passed the rule: its components beneath the root (empty = the root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPath {
    /// The components, none empty, `.` or `..`.
    pub components: Vec<String>,
    /// The path ended in one `/` (adapter side only): it must name a directory.
    pub trailing_slash: bool,
}

impl ToolPath {
    /// Whether the path names the root itself.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The canonical form (`.` for the root).
    pub fn canonical(&self) -> String {
        if self.components.is_empty() {
            ".".into()
        } else {
            self.components.join("/")
        }
    }
}

/// Check a root-relative POSIX path, before any filesystem access.
///
/// Refused: empty, over 4096 bytes, absolute, a backslash, C0 or DEL, a `..` segment and
/// non-canonical forms (`a//b`, `./a`, `a/./b`, `a/.`). `.` is the root. The adapter side
/// also accepts `./` and a single trailing `/`, and refuses a component over 255 bytes
/// (SPEC §5.3: a filesystem limit the daemon side does not apply). `field` names the
/// path in the error; the error never contains the path itself.
pub fn validate_relative_path(path: &str, side: PathSide, field: &str) -> Result<ToolPath, ContractError> {
    check_path(path, side, side == PathSide::Adapter, field)
}

/// A path inside a result (`fs.search` match paths), as a daemon judges it: the adapter-side
/// forms (`./`, one trailing `/`) and no component limit, as Pi Daemon 0.3.3 judges it (the
/// 255-byte component limit is what an adapter refuses in its input, not a rule on data).
pub fn validate_result_path(path: &str, field: &str) -> Result<ToolPath, ContractError> {
    check_path(path, PathSide::Adapter, false, field)
}

fn check_path(path: &str, side: PathSide, component_limit: bool, field: &str) -> Result<ToolPath, ContractError> {
    let code = match side {
        PathSide::Daemon => Code::InvalidToolAdapterPath,
        PathSide::Adapter => Code::InvalidPath,
    };
    let (body, trailing_slash) =
        path_form(path, side, component_limit).map_err(|why| ContractError::new(code, field, format!("path {why}")))?;
    let components = match body {
        None => vec![],
        Some(body) => body.split('/').map(str::to_string).collect(),
    };
    Ok(ToolPath { components, trailing_slash })
}

/// Whether `path` passes the rule of [`validate_relative_path`] (`result_path`: of
/// [`validate_result_path`] instead), without building the components: for the one-pass
/// validator, which only needs the verdict.
pub(crate) fn is_valid_path(path: &str, side: PathSide, result_path: bool) -> bool {
    if result_path {
        path_form(path, PathSide::Adapter, false).is_ok()
    } else {
        path_form(path, side, side == PathSide::Adapter).is_ok()
    }
}

/// The rule itself, written once: `Ok((body, trailing_slash))` where `body` is the
/// `/`-separated components (`None` for the root), or why the path is refused.
fn path_form(path: &str, side: PathSide, component_limit: bool) -> Result<(Option<&str>, bool), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return Err("exceeds 4096 bytes");
    }
    if path.starts_with('/') {
        return Err("is absolute");
    }
    if path.contains('\\') {
        return Err("contains a backslash");
    }
    if super::text::has_control(path) {
        return Err("contains a control character");
    }
    if path == "." {
        return Ok((None, false));
    }
    let mut body = path;
    let mut trailing_slash = false;
    if side == PathSide::Adapter {
        if path == "./" {
            return Ok((None, true));
        }
        if let Some(stripped) = path.strip_suffix('/') {
            body = stripped;
            trailing_slash = true;
        }
    }
    for seg in body.split('/') {
        match seg {
            "" => return Err("is not canonical (empty segment)"),
            "." => return Err("is not canonical (`.` segment)"),
            ".." => return Err("contains a `..` segment"),
            s if component_limit && s.len() > MAX_COMPONENT_BYTES => return Err("has a component over 255 bytes"),
            _ => {}
        }
    }
    Ok((Some(body), trailing_slash))
}

/// Whether `path` is one of the non-canonical forms Pi Daemon 0.3.3 passes on to adapters
/// (SPEC §9 of the team spec, conformance/SPEC.md PC-5.1): `./`, or one trailing `/` after a
/// canonical daemon-side path (`a/`, `a/b/`; not `a//`).
pub fn is_0_3_3_passed_path(path: &str) -> bool {
    path == "./"
        || path
            .strip_suffix('/')
            .is_some_and(|p| !p.is_empty() && validate_relative_path(p, PathSide::Daemon, "path").is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_differ_only_on_dot_slash_and_trailing_slash() {
        for p in ["./", "a/", "a/b/"] {
            assert!(validate_relative_path(p, PathSide::Adapter, "path").is_ok(), "{p}");
            let e = validate_relative_path(p, PathSide::Daemon, "path").unwrap_err();
            assert_eq!(e.code, Code::InvalidToolAdapterPath);
        }
        let e = validate_relative_path("a//", PathSide::Adapter, "payload.path").unwrap_err();
        assert_eq!((e.code, e.field()), (Code::InvalidPath, "payload.path"));
    }

    #[test]
    fn root_and_components() {
        let p = validate_relative_path(".", PathSide::Daemon, "path").unwrap();
        assert!(p.is_root());
        let p = validate_relative_path("a/b/", PathSide::Adapter, "path").unwrap();
        assert_eq!(p.components, vec!["a", "b"]);
        assert!(p.trailing_slash);
        assert_eq!(p.canonical(), "a/b");
    }

    #[test]
    fn only_the_0_3_3_forms_count_as_passed_paths() {
        assert!(is_0_3_3_passed_path("./") && is_0_3_3_passed_path("a/") && is_0_3_3_passed_path("a/b/"));
        for p in ["a//", "a", "../", "/", "a//b", "./a", "a/./", "", "a/../"] {
            assert!(!is_0_3_3_passed_path(p), "{p}");
        }
    }
}

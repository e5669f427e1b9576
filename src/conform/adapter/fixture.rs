//! The fixture tree the adapter suite lays in the adapter's root, the sentinel beside it,
//! and the side-effect oracle that snapshots both around every case.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Marker file that makes a root ours to wipe and re-lay.
pub const MARKER: &str = ".pi-conform-fixture";
/// Text only the sentinel holds: no adapter output may ever contain it.
pub const SENTINEL_TEXT: &str = "SENTINEL-7f3a needle outside the root";
/// Pieces of [`SENTINEL_TEXT`] that no adapter could send unless it read the sentinel (a
/// windowed read or a search line holds one without the whole text; "7f3a" alone could be
/// part of a digest, so each piece has a letter or a space no hex digest has).
pub const SENTINEL_PIECES: [&str; 3] = ["SENTINEL-7f3a", "7f3a needle", "needle outside the root"];

/// Size of `big.txt` (larger than any read window a 1 MiB budget allows).
pub const BIG_SIZE: usize = 3 * 1024 * 1024 / 2;

/// Where `needle` starts (0-based character) in the one line of `window/start.txt` (6000
/// characters) and of `window/end.txt` (5000 characters).
pub const WINDOW_START_AT: usize = 100;
pub const WINDOW_END_AT: usize = 4900;

/// One line of `len` ASCII characters, `x` before `needle` at `at`, `y` after it, then LF.
pub fn window_line(len: usize, at: usize) -> String {
    format!("{}needle{}\n", "x".repeat(at), "y".repeat(len - at - "needle".len()))
}

/// Lay the fixture: the root must be empty or hold our marker (then it is wiped first).
pub fn lay(root: &Path, sentinel: &Path) -> std::io::Result<Fixture> {
    prepare(root)?;
    prepare(sentinel)?;
    let w = |p: &str, b: &[u8]| -> std::io::Result<()> {
        let path = root.join(p);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(path, b)
    };
    w(MARKER, b"pi-conform fixture: this directory is wiped and re-laid by the runner\n")?;
    w("hello.txt", b"hello world\n")?;
    w("notes.md", b"alpha needle beta\nsecond line\nneedle needle\n")?;
    w("dir/a.txt", b"a needle\n")?;
    w("dir/b.txt", b"b\n")?;
    w("dir/sub/c.txt", b"needle in c\n")?;
    for n in ["B", "Z", "_", "a", "\u{e9}"] {
        w(&format!("sorted/{n}"), b"x")?;
    }
    std::fs::create_dir_all(root.join("sorted/m"))?;
    w("utf8.txt", "a\u{e9}\u{20ac}\u{1f600}z\n".as_bytes())?;
    w("uni.txt", "\u{e9}\u{20ac}\u{1f600}needle\n".as_bytes())?;
    w("latin1.txt", b"caf\xe9 needle\n")?;
    w("nul.txt", b"needle\x00binary\n")?;
    w("crlf.txt", b"one\r\ntwo needle\r\n")?;
    w("overlap.txt", b"aaaa\n")?;
    // fs.search is literal: regex and glob metacharacters, case, multi-byte text, CRLF lines.
    w(
        "meta.txt",
        concat!(
            "regex: a.c abc aac a*c a+c a?c (x) [ab] {2} a|b \\d ^start end$ x?y \\. $ .* ^ $\r\n",
            "glob: *.txt ?.md [!a] {a,b} ** file.txt f.md fxmd\r\n",
            "start Start START sTaRt\r\n",
            "\u{fc}n\u{ef}c\u{f6}d\u{e9} \u{2713} \u{1f600}.\u{1f600} \u{e9}.\u{e9} \u{e9}x\u{e9} \u{1f600}x\u{1f600}\r\n",
            "the end\n",
        )
        .as_bytes(),
    )?;
    w("edit.txt", b"foo bar foo\nunique line\naaa\n")?;
    let mut long = "x".repeat(6000);
    long.push_str("needle");
    long.push_str(&"y".repeat(3994));
    long.push('\n');
    w("long.txt", long.as_bytes())?;
    // Lines over 4096 characters with the match near their start and near their end: the
    // window is shifted to stay inside the line (always 4096 characters).
    w("window/start.txt", window_line(6000, WINDOW_START_AT).as_bytes())?;
    w("window/end.txt", window_line(5000, WINDOW_END_AT).as_bytes())?;
    let mut big = Vec::with_capacity(BIG_SIZE);
    let mut i = 0u64;
    while big.len() < BIG_SIZE {
        big.extend_from_slice(format!("line {i:08} of the big file\n").as_bytes());
        i += 1;
    }
    big.truncate(BIG_SIZE);
    w("big.txt", &big)?;
    std::fs::create_dir_all(root.join("links"))?;
    std::os::unix::fs::symlink(sentinel.join("secret.txt"), root.join("links/out.txt"))?;
    std::os::unix::fs::symlink("../hello.txt", root.join("links/in.txt"))?;
    std::os::unix::fs::symlink(sentinel, root.join("links/outdir"))?;
    std::os::unix::fs::symlink("../dir", root.join("links/indir"))?;
    std::fs::create_dir_all(root.join("special"))?;
    let fifo = rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("special/fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .is_ok();
    let device = rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("special/null"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    let (mixed_fifo, socket) = lay_mixed(root, sentinel, &w)?;
    std::fs::write(sentinel.join("secret.txt"), SENTINEL_TEXT)?;
    std::fs::write(sentinel.join(MARKER), b"pi-conform sentinel\n")?;
    Ok(Fixture { root: root.to_path_buf(), sentinel: sentinel.to_path_buf(), fifo: fifo && mixed_fifo, device, socket })
}

/// The names of `mixed/` that fs.list returns, in bytewise order, with their sizes (`None`:
/// a directory). Every other entry there is a symlink (to a file, to a directory, out of the
/// root), a FIFO or a socket. Locale order would differ (`_`, `a`, `B`, `\u{e9}`).
pub const MIXED_LISTED: &[(&str, Option<u64>)] = &[
    ("B.txt", Some(2)),
    ("_.txt", Some(2)),
    ("a.txt", Some(2)),
    ("empty.txt", Some(0)),
    ("emptydir", None),
    ("latin1.txt", Some(12)),
    ("nul.txt", Some(8)),
    ("plain.txt", Some(12)),
    ("sub", None),
    ("\u{e9}t\u{e9}.txt", Some(19)),
];

/// `mixed/`: one of every kind and size class of entry a rule tells apart, in the directory
/// and again in `mixed/sub/` (issue 24: fixture edges). Returns whether the FIFOs and the
/// socket could be made.
fn lay_mixed(
    root: &Path,
    sentinel: &Path,
    w: &dyn Fn(&str, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<(bool, bool)> {
    for (name, body) in [
        ("B.txt", &b"B\n"[..]),
        ("_.txt", b"_\n"),
        ("a.txt", b"a\n"),
        ("empty.txt", b""),
        ("latin1.txt", b"caf\xe9 needle\n"),
        ("nul.txt", b"needle\x00\n"),
        ("plain.txt", "x \u{e9} needle\n".as_bytes()),
        ("\u{e9}t\u{e9}.txt", "needle \u{1f600} needle\n".as_bytes()),
    ] {
        w(&format!("mixed/{name}"), body)?;
    }
    std::fs::create_dir_all(root.join("mixed/emptydir"))?;
    w("mixed/sub/deep.txt", b"needle deep\n")?;
    w("mixed/sub/latin1.txt", b"\xe9 needle\n")?;
    w("mixed/sub/nul.txt", b"needle\x00\n")?;
    std::os::unix::fs::symlink("../hello.txt", root.join("mixed/link-file"))?;
    std::os::unix::fs::symlink("../dir", root.join("mixed/link-dir"))?;
    std::os::unix::fs::symlink(sentinel, root.join("mixed/link-out"))?;
    std::os::unix::fs::symlink(sentinel, root.join("mixed/sub/link-out"))?;
    let mut fifo = true;
    for p in ["mixed/fifo", "mixed/sub/fifo"] {
        fifo &= rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join(p),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .is_ok();
    }
    // A socket file stays after its listener is dropped (the path may be too long to bind).
    let socket = std::os::unix::net::UnixListener::bind(root.join("mixed/sock")).is_ok();
    Ok((fifo, socket))
}

fn prepare(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir),
        Err(e) => Err(e),
        Ok(m) if !m.is_dir() => Err(std::io::Error::other(format!("{} is not a directory", dir.display()))),
        Ok(_) => {
            let entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
            if entries.is_empty() {
                return Ok(());
            }
            if !dir.join(MARKER).exists() {
                return Err(std::io::Error::other(format!(
                    "{} is not empty and holds no {MARKER} marker: refusing to wipe it (give an empty directory)",
                    dir.display()
                )));
            }
            for e in entries {
                let t = e.file_type()?;
                if t.is_dir() {
                    std::fs::remove_dir_all(e.path())?;
                } else {
                    std::fs::remove_file(e.path())?;
                }
            }
            Ok(())
        }
    }
}

/// A laid fixture.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The adapter's root.
    pub root: PathBuf,
    /// The sentinel directory beside it.
    pub sentinel: PathBuf,
    /// Whether the FIFO could be made.
    pub fifo: bool,
    /// Whether the character device could be made (needs privilege).
    pub device: bool,
    /// Whether the socket `mixed/sock` could be made.
    pub socket: bool,
}

/// One filesystem object as the oracle sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    kind: char,
    size: u64,
    mode: u32,
    digest: Option<[u8; 32]>,
    target: Option<PathBuf>,
}

/// A snapshot: relative path → node.
pub type Snapshot = BTreeMap<PathBuf, Node>;

/// Snapshot a tree without following symlinks.
pub fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, out: &mut Snapshot) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        let ft = m.file_type();
        let rel = p.strip_prefix(base).unwrap_or(&p).to_path_buf();
        let kind = if ft.is_symlink() {
            'l'
        } else if ft.is_dir() {
            'd'
        } else if ft.is_file() {
            'f'
        } else {
            's'
        };
        let digest = if kind == 'f' { std::fs::read(&p).ok().map(|b| Sha256::digest(&b).into()) } else { None };
        let target = if kind == 'l' { std::fs::read_link(&p).ok() } else { None };
        let size = if kind == 'd' { 0 } else { m.size() };
        out.insert(rel, Node { kind, size, mode: m.permissions().mode() & 0o7777, digest, target });
        if kind == 'd' {
            walk(base, &p, out);
        }
    }
}

/// Changes between two snapshots, except under the `allowed` relative paths.
pub fn diff(before: &Snapshot, after: &Snapshot, allowed: &[&str]) -> Vec<String> {
    let ok = |p: &Path| allowed.iter().any(|a| p == Path::new(a));
    let mut out = Vec::new();
    for (p, n) in before {
        match after.get(p) {
            None if !ok(p) => out.push(format!("removed {}", p.display())),
            Some(m) if m != n && !ok(p) && !(n.kind == 'd' && m.kind == 'd' && n.mode == m.mode) => {
                out.push(format!("changed {}", p.display()))
            }
            _ => {}
        }
    }
    for p in after.keys() {
        if !before.contains_key(p) && !ok(p) {
            out.push(format!("created {}", p.display()));
        }
    }
    out
}

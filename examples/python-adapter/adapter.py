#!/usr/bin/env python3
"""A Pi host tool adapter in Python's standard library (Python 3.11+, Linux).

Written from conformance/SPEC.md (clauses PC-1, PC-1.2, PC-4.1, PC-4.2, PC-4.5, PC-5.1 to
PC-5.3): it shares no code with pi-conform's reference adapter and is the second independent
implementation the conformance runner is checked against.

    python3 adapter.py --socket /run/user/1000/pi/tools.sock --grants grants.json \
        [--adapter-id python-example] [--adapter-version 0.1.0]

The grants file is the one `pi-conform grant --adapter-id python-example
--adapter-version 0.1.0 ...` writes (docs/adapter-authors.md, schemas/grants.schema.json):
it holds the SHA-256 of each capability handle, never the handle. It is read afresh at every
`bind`, so a grant removed from the file cannot bind again.

SIGTERM / SIGINT: stop accepting, remove the socket, exit. Logs go to standard error and never
carry the handle, file content or the root's absolute path.
"""

import argparse
import collections
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import stat
import sys
import threading
import time

# ------------------------------------------------------------------ the contract (PC-3.2, PC-4)

PROTOCOL = "1.0"
OPERATIONS = ("fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit")
MUTATING = ("fs.write", "fs.edit")
# PC-3.2.10: every limit is mandatory; (min, max) inclusive, canonical order.
LIMITS = (
    ("maxRequestBytes", 2048, 4194304),
    ("maxResponseBytes", 1024, 4194304),
    ("maxConcurrentRequests", 1, 64),
    ("maxQueuedRequests", 0, 256),
    ("requestTimeoutMs", 100, 120000),
    ("maxIdempotencyKeys", 1, 4096),
    ("idempotencyTtlMs", 1000, 86400000),
)
IDENTITY = ("protocolVersion", "kind", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation")
FRAME_KEYS = {
    "bind": set(IDENTITY) | {"capabilityHandle", "operations", "limits"},
    "invoke": set(IDENTITY) | {"requestId", "idempotencyKey", "operation", "payload"},
    "abort": set(IDENTITY) | {"requestId", "targetRequestId"},
    "revoke": set(IDENTITY),
}
# PC-5.3.errors: the closed set of codes and their retryable flag.
RETRYABLE = {
    "invalid_path": False, "invalid_request": False, "operation_not_granted": False,
    "not_found": False, "not_a_directory": False, "not_a_file": False, "already_exists": False,
    "symlink_refused": False, "unsupported_file_type": False, "not_utf8": False,
    "invalid_offset": False, "digest_mismatch": False, "edit_not_found": False,
    "edit_ambiguous": False, "idempotency_conflict": False, "response_too_large": False,
    "capability_in_content": False, "permission_denied": False, "unknown_request": False,
    "busy": True, "io_error": True,
}
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
HANDLE_RE = re.compile(r"[A-Za-z0-9_-]{32,512}")
DIGEST_RE = re.compile(r"[0-9a-f]{64}")
MAX_SAFE = 2**53 - 1
MAX_CONTENT = 4194304
MAX_TEXT_UNITS = 4096
PRE_BIND_LINE = 4096  # the largest legal bind is 2291 bytes (PC-4.5); anything longer is hostile
MAX_UNBOUND = 64
BIND_DEADLINE_S = 10.0


def log(msg):
    print(f"python-adapter: {msg}", file=sys.stderr, flush=True)


class Refuse(Exception):
    """The connection must be closed without a word (PC-4.5)."""


class AdErr(Exception):
    """An operation's typed failure, answered `result ok:false`."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


# ------------------------------------------------------------------ strict JSON (PC-1)


class BadJson(Exception):
    pass


def _pairs(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise BadJson("duplicate key")
        obj[k] = v
    return obj


def _no_constant(name):
    raise BadJson(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant)


def decode_line(raw):
    text = raw.decode("utf-8")  # strict: overlong forms, surrogates and FE/FF are refused
    if text.startswith("\ufeff"):
        raise BadJson("BOM")
    return _DECODER.decode(text)  # one value, whitespace around it allowed, nothing else


def encode(frame):
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def as_int(v):
    """An integral JSON number (2, 2.0, 1e3) as an int, else None (PC-1, Numbers)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -MAX_SAFE <= v <= MAX_SAFE else None
    if isinstance(v, float) and v.is_integer() and abs(v) <= MAX_SAFE:
        return int(v)
    return None


def units(s):
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def utf8(s):
    """UTF-8 bytes of a string, or None if it holds a lone surrogate."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return None


def strings_of(value):
    """Every key and string inside a decoded JSON value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, x in v.items():
                yield k
                stack.append(x)
        elif isinstance(v, list):
            stack.extend(v)


# ------------------------------------------------------------------ grants


def load_grants(path):
    """The grants file as `pi-conform grant` writes it (version 1). Refused unless it is a
    regular file of ours with mode 0600; opened without following a symlink or blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600:
            raise ValueError("the grants file must be a regular file of ours with mode 0600")
        with os.fdopen(os.dup(fd), "rb") as f:
            doc = decode_line(f.read(64 * 1024 * 1024))
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or set(doc) != {"version", "grants"} or doc["version"] != 1:
        raise ValueError("not a version 1 grants file")
    if not isinstance(doc["grants"], list):
        raise ValueError("grants must be an array")
    keys = {"handleSha256", "root", "hostInstanceId", "sessionId", "generation", "operations", "limits"}
    out = []
    for g in doc["grants"]:
        # rootDevice/rootInode (optional, together): the root pinned by `grant`.
        pin = {"rootDevice", "rootInode"} & set(g) if isinstance(g, dict) else set()
        # handleFingerprint (optional): a content-scan prefilter this adapter does not use.
        fp = {"handleFingerprint"} & set(g) if isinstance(g, dict) else set()
        if not isinstance(g, dict) or set(g) - pin - fp != keys or len(pin) == 1:
            raise ValueError("a grant has missing or unknown keys")
        if not isinstance(g["handleSha256"], str) or not re.fullmatch(r"[0-9a-fA-F]{64}", g["handleSha256"]):
            raise ValueError("handleSha256 must be 64 hex characters")
        if not isinstance(g["root"], str) or not g["root"].startswith("/"):
            raise ValueError("root must be an absolute path")
        if not all(isinstance(o, str) and o in OPERATIONS for o in g["operations"]):
            raise ValueError("unknown operation in a grant")
        lim = g["limits"]
        if not isinstance(lim, dict) or any(as_int(lim.get(k)) is None for k, _, _ in LIMITS):
            raise ValueError("a grant's limits are incomplete")
        out.append(g)
    return out


# ------------------------------------------------------------------ paths (PC-5.1)


def parse_path(p):
    """(segments, trailing slash) of an adapter-side path, or AdErr invalid_path."""
    b = utf8(p)
    if p == "" or b is None or len(b) > 4096:
        raise AdErr("invalid_path", "path is empty, too long or not UTF-8")
    if p.startswith("/") or "\\" in p or any(ord(c) < 0x20 or ord(c) == 0x7F for c in p):
        raise AdErr("invalid_path", "path is absolute or holds a backslash or control character")
    if p in (".", "./"):
        return [], False
    trailing = p.endswith("/")
    if trailing:
        p = p[:-1]
    segs = p.split("/")
    for s in segs:
        if s in ("", ".", ".."):
            raise AdErr("invalid_path", "path is not canonical")
        if len(s.encode("utf-8")) > 255:
            raise AdErr("invalid_path", "a path component is over 255 bytes")
    return segs, trailing


def oserr(e, what):
    if e.errno == errno.ENOENT:
        return AdErr("not_found", f"{what} does not exist")
    if e.errno in (errno.EACCES, errno.EPERM):
        return AdErr("permission_denied", f"{what}: permission denied")
    if e.errno == errno.ENOTDIR:
        return AdErr("not_a_directory", f"{what}: a component is not a directory")
    if e.errno == errno.ELOOP:
        return AdErr("symlink_refused", f"{what}: symlinks are refused")
    if e.errno == errno.EISDIR:
        return AdErr("not_a_file", f"{what} is a directory")
    return AdErr("io_error", f"{what}: {os.strerror(e.errno)}")


# O_PATH plus a reopen through /proc/self/fd opens exactly the inode that was checked.
O_PATH = getattr(os, "O_PATH", 0) if os.path.isdir("/proc/self/fd") else 0
UMASK = os.umask(0o022)
os.umask(UMASK)


def classify(dirfd, name):
    """lstat of `name` in `dirfd`, never following it."""
    return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


def kind_error(st, what):
    if stat.S_ISLNK(st.st_mode):
        return AdErr("symlink_refused", f"{what} is a symlink")
    return AdErr("unsupported_file_type", f"{what} is not a regular file or directory")


def open_dir_in(dirfd, name, what):
    """Open directory `name` beneath `dirfd`, refusing symlinks (O_NOFOLLOW) and non-dirs."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            try:
                st = classify(dirfd, name)
            except OSError:
                raise oserr(e, what)
            if stat.S_ISLNK(st.st_mode):
                raise AdErr("symlink_refused", f"{what}: a component is a symlink")
            raise AdErr("not_a_directory", f"{what}: a component is not a directory")
        raise oserr(e, what)


class Root:
    """The session root, held open: every path is resolved beneath this descriptor with a
    component-wise O_NOFOLLOW walk, so `..`, symlinks and renames cannot lead outside."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self):
        os.close(self.fd)

    def parent(self, segs, what):
        """An open descriptor of the directory holding the last segment (caller closes)."""
        fd = os.dup(self.fd)
        try:
            for s in segs[:-1]:
                nfd = open_dir_in(fd, s, what)
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def open_dir(self, segs, what):
        if not segs:
            return os.dup(self.fd)
        pfd = self.parent(segs, what)
        try:
            return open_dir_in(pfd, segs[-1], what)
        finally:
            os.close(pfd)

    def open_node(self, segs, trailing, what):
        """(fd, stat) of the object a path names: a directory opened O_RDONLY, a regular file
        opened O_RDONLY; symlinks and special files are refused without being opened."""
        if not segs:
            fd = os.dup(self.fd)
            return fd, os.fstat(fd)
        pfd = self.parent(segs, what)
        try:
            name = segs[-1]
            if O_PATH:
                try:
                    pf = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
                except OSError as e:
                    raise oserr(e, what)
                try:
                    st = os.fstat(pf)
                    if stat.S_ISDIR(st.st_mode):
                        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
                    elif stat.S_ISREG(st.st_mode):
                        if trailing:
                            raise AdErr("not_a_directory", f"{what} is not a directory")
                        # Reopen the very inode the O_PATH descriptor holds.
                        fd = os.open(f"/proc/self/fd/{pf}", os.O_RDONLY | os.O_CLOEXEC)
                    else:
                        raise kind_error(st, what)
                finally:
                    os.close(pf)
            else:
                st = classify(pfd, name)
                if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    raise kind_error(st, what)
                if trailing and not stat.S_ISDIR(st.st_mode):
                    raise AdErr("not_a_directory", f"{what} is not a directory")
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=pfd)
            st2 = os.fstat(fd)
            if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)
                raise AdErr("io_error", f"{what} changed while it was opened")
            return fd, st2
        except OSError as e:
            raise oserr(e, what)
        finally:
            os.close(pfd)


# `--omit-modified-at`: leave out the optional `modifiedAt` (PC-5.2 `modifiedAt?`), a
# behaviour the spec allows; it exercises the runner's handling of the optional field.
OMIT_MODIFIED_AT = False


def modified_at(st):
    if OMIT_MODIFIED_AT:
        return None
    ns = st.st_mtime_ns
    secs, frac = divmod(ns, 1_000_000_000)
    try:
        t = time.gmtime(secs)
    except (OverflowError, OSError, ValueError):
        return None
    if not 1 <= t.tm_year <= 9999:
        return None
    s = time.strftime("%Y-%m-%dT%H:%M:%S", t)
    return s + (f".{frac:09d}" if frac else "") + "Z"


def sha256_hex(b):
    return hashlib.sha256(b).hexdigest()


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def name_ok(name):
    """A directory entry the protocol can carry (PC-5.2): UTF-8, no C0/DEL."""
    b = utf8(name)
    return b is not None and 1 <= len(b) <= 255 and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)


def search_window(line, idx):
    """PC-5.3.search: the match text of a line, at most 4096 UTF-16 units."""
    if len(line) * 2 <= MAX_TEXT_UNITS or units(line) <= MAX_TEXT_UNITS:
        return line
    u = [2 if ord(c) > 0xFFFF else 1 for c in line]
    s, acc = idx, 0
    while s > 0 and acc + u[s - 1] <= 1024:
        s -= 1
        acc += u[s]
    e, acc = s, 0
    while e < len(line) and acc + u[e] <= MAX_TEXT_UNITS:
        acc += u[e]
        e += 1
    if e == len(line):
        while s > 0 and acc + u[s - 1] <= MAX_TEXT_UNITS:
            s -= 1
            acc += u[s]
    return line[s:e]


# ------------------------------------------------------------------ payloads (PC-5.2)

PAYLOAD_KEYS = {
    "fs.list": ({"path"}, {"maxEntries"}),
    "fs.stat": ({"path"}, set()),
    "fs.read": ({"path"}, {"offset", "maxBytes"}),
    "fs.search": ({"path", "query"}, {"maxResults"}),
    "fs.write": ({"path", "content"}, {"create", "overwrite", "expectedDigest"}),
    "fs.edit": ({"path", "edits"}, {"expectedDigest"}),
}


def bad(field):
    return AdErr("invalid_request", f"payload.{field} is missing or invalid")


def validate_payload(op, p):
    """A normalized copy of a valid payload, else AdErr invalid_request / invalid_path."""
    if not isinstance(p, dict):
        raise AdErr("invalid_request", "payload must be an object")
    required, optional = PAYLOAD_KEYS[op]
    for k in p:
        if k not in required and k not in optional:
            raise AdErr("invalid_request", "payload has an unknown key")
    for k in sorted(required):
        if k not in p:
            raise bad(k)
    if not isinstance(p["path"], str):
        raise bad("path")
    out = {"path": p["path"]}

    def intf(k, lo, hi):
        if k in p:
            v = as_int(p[k])
            if v is None or not lo <= v <= hi:
                raise bad(k)
            out[k] = v

    def boolf(k):
        if k in p:
            if not isinstance(p[k], bool):
                raise bad(k)
            out[k] = p[k]

    def digestf():
        if "expectedDigest" in p:
            if not isinstance(p["expectedDigest"], str) or not DIGEST_RE.fullmatch(p["expectedDigest"]):
                raise bad("expectedDigest")
            out["expectedDigest"] = p["expectedDigest"]

    if op == "fs.list":
        intf("maxEntries", 1, 10000)
    elif op == "fs.read":
        intf("offset", 0, MAX_SAFE)
        intf("maxBytes", 1, MAX_CONTENT)
    elif op == "fs.search":
        q = p["query"]
        if not isinstance(q, str) or utf8(q) is None or not 1 <= units(q) <= 4096 or "\r" in q or "\n" in q:
            raise bad("query")
        out["query"] = q
        intf("maxResults", 1, 10000)
    elif op == "fs.write":
        c = p["content"]
        if not isinstance(c, str) or utf8(c) is None or len(utf8(c)) > MAX_CONTENT:
            raise bad("content")
        out["content"] = c
        boolf("create")
        boolf("overwrite")
        digestf()
    elif op == "fs.edit":
        edits = p["edits"]
        if not isinstance(edits, list) or not 1 <= len(edits) <= 256:
            raise bad("edits")
        norm = []
        for i, e in enumerate(edits):
            if not isinstance(e, dict) or set(e) != {"oldText", "newText"}:
                raise bad(f"edits.{i}")
            o, n = e["oldText"], e["newText"]
            if not isinstance(o, str) or utf8(o) is None or units(o) < 1:
                raise bad(f"edits.{i}.oldText")
            if not isinstance(n, str) or utf8(n) is None:
                raise bad(f"edits.{i}.newText")
            norm.append({"oldText": o, "newText": n})
        out["edits"] = norm
        digestf()
    out["_segs"], out["_trailing"] = parse_path(p["path"])
    return out


# ------------------------------------------------------------------ a connection


class Cancelled(Exception):
    pass


class Job:
    def __init__(self, rid, key, op, payload, fingerprint):
        self.rid, self.key, self.op, self.payload, self.fp = rid, key, op, payload, fingerprint
        self.state = "new"  # queued | running | committing | waiting | done
        self.cancelled = False
        self.primary = False


class KeyEntry:
    def __init__(self, fp, op, primary):
        self.fp, self.op, self.primary = fp, op, primary
        self.outcome = None  # ("ok", data) | ("err", code, message), kept for mutating ops
        self.finished_at = None
        self.waiters = []


PATH_LOCKS = collections.defaultdict(threading.Lock)
PATH_LOCKS_GUARD = threading.Lock()


def path_lock(root, segs):
    with PATH_LOCKS_GUARD:
        return PATH_LOCKS[(root, "/".join(segs))]


class Connection:
    def __init__(self, server, sock):
        self.server, self.sock = server, sock
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.out = collections.deque()
        self.out_cv = threading.Condition(self.lock)
        self.closed = False
        self.jobs = {}  # requestId -> Job, while in flight
        self.finished = collections.OrderedDict()  # requestIds whose result was sent
        self.queue = collections.deque()
        self.running = 0
        self.keys = collections.OrderedDict()  # idempotencyKey -> KeyEntry
        self.handle = None
        self.ident = None
        self.root = None
        self.root_path = None

    # -------------------------------------------------------------- wire

    def read_line(self, limit, deadline=None):
        """One line without LF and its CR, or None at EOF; Refuse when over `limit` bytes
        (LF included), as soon as a partial line already is."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                if i + 1 > limit:
                    raise Refuse("line over the limit")
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                if not line:
                    continue
                return line
            if len(self.buf) + 1 > limit:
                raise Refuse("line over the limit")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Refuse("no bind within the bind deadline")
                self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk

    def send_locked(self, frame):
        """Queue a frame (caller holds self.lock); the writer thread sends in order."""
        if self.closed:
            return
        line = encode(frame)
        if self.handle and self.handle.encode() in line:  # PC-7.1: never, whatever happens
            log("refusing to send a frame holding the handle; closing")
            self.close_locked()
            return
        self.out.append(line)
        self.out_cv.notify()

    def writer(self):
        while True:
            with self.lock:
                while not self.out and not self.closed:
                    self.out_cv.wait()
                if not self.out and self.closed:
                    break
                line = self.out.popleft()
                closing = line is None
            if closing:
                break
            try:
                self.sock.sendall(line)
            except OSError:
                with self.lock:
                    self.close_locked()
                break
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def close_locked(self, flush=False):
        """Stop everything; with `flush`, frames already queued are still sent first."""
        if self.closed:
            return
        for j in list(self.jobs.values()):
            j.cancelled = True
        self.queue.clear()
        self.closed = True
        if flush:
            self.out.append(None)
        else:
            self.out.clear()
        self.out_cv.notify()
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    # -------------------------------------------------------------- lifecycle

    def serve(self):
        threading.Thread(target=self.writer, daemon=True).start()
        try:
            try:
                first = self.read_line(PRE_BIND_LINE, time.monotonic() + self.server.bind_deadline)
            finally:
                self.server.unbound_done()
            if first is None:
                raise Refuse("EOF before bind")
            self.bind(first)
            self.sock.settimeout(None)
            limit = self.limits["maxRequestBytes"]
            while True:
                line = self.read_line(limit)
                if line is None:  # EOF is revocation (PC-4.5)
                    break
                if self.frame(line) == "revoked":
                    return
        except Refuse as r:
            log(f"connection closed: {r}")
        except (OSError, socket.timeout) as e:
            log(f"connection closed: {type(e).__name__}")
        except Exception as e:  # noqa: BLE001 - e.g. a lone surrogate that cannot be encoded
            log(f"connection closed: unexpected {type(e).__name__}")
        finally:
            with self.lock:
                self.close_locked(flush=False)
                finished = [(k, e) for k, e in self.keys.items() if e.finished_at is not None]
            if self.server.keys_per_grant and self.handle is not None:
                with self.server.grant_keys_lock:
                    kept = self.server.grant_keys.setdefault(self.grant_digest, collections.OrderedDict())
                    for k, e in finished:
                        kept[k] = e
                        kept.move_to_end(k)
                    while len(kept) > self.limits["maxIdempotencyKeys"]:
                        kept.popitem(last=False)
            if self.root:
                self.root.close()

    def bind(self, line):
        try:
            f = decode_line(line)
        except (UnicodeDecodeError, ValueError, BadJson, RecursionError):
            raise Refuse("the first line is not a JSON bind")
        if not isinstance(f, dict) or f.get("kind") != "bind":
            raise Refuse("the first frame is not a bind")
        if set(f) != FRAME_KEYS["bind"]:
            raise Refuse("bind has missing or unknown keys")
        if f["protocolVersion"] != PROTOCOL:
            raise Refuse("bind: protocolVersion")
        if f["adapterId"] != self.server.adapter_id or f["adapterVersion"] != self.server.adapter_version:
            raise Refuse("bind: not this adapter's identity")
        gen = as_int(f["generation"])
        if not isinstance(f["hostInstanceId"], str) or not isinstance(f["sessionId"], str) or gen is None or gen < 0:
            raise Refuse("bind: identity")
        h = f["capabilityHandle"]
        if not isinstance(h, str) or not HANDLE_RE.fullmatch(h):
            raise Refuse("bind: capabilityHandle")
        ops = f["operations"]
        if not isinstance(ops, list) or not 1 <= len(ops) <= 6 or len(set(map(str, ops))) != len(ops) or not all(
            isinstance(o, str) and o in OPERATIONS for o in ops
        ):
            raise Refuse("bind: operations")
        lim = f["limits"]
        if not isinstance(lim, dict) or set(lim) != {k for k, _, _ in LIMITS}:
            raise Refuse("bind: limits keys")
        limits = {}
        for k, lo, hi in LIMITS:
            v = as_int(lim[k])
            if v is None or not lo <= v <= hi:
                raise Refuse(f"bind: limits.{k}")
            limits[k] = v
        try:
            grants = load_grants(self.server.grants_path)
        except (OSError, ValueError, BadJson, UnicodeDecodeError) as e:
            raise Refuse(f"grants file unusable: {e}")
        digest = hashlib.sha256(h.encode()).hexdigest()
        grant = None
        for g in grants:  # constant-time comparison of every digest
            if hmac.compare_digest(g["handleSha256"].lower(), digest) and grant is None:
                grant = g
        if grant is None:
            raise Refuse("bind: unknown handle")
        if (grant["hostInstanceId"], grant["sessionId"], as_int(grant["generation"])) != (
            f["hostInstanceId"],
            f["sessionId"],
            gen,
        ):
            raise Refuse("bind: the binding is not the grant's")
        if any(o not in grant["operations"] for o in ops):
            raise Refuse("bind: an operation outside the grant")
        if any(limits[k] > as_int(grant["limits"][k]) for k, _, _ in LIMITS):
            raise Refuse("bind: a limit above the grant's ceiling")
        for s in (f["adapterId"], f["adapterVersion"], f["hostInstanceId"], f["sessionId"]):
            if h in s:
                raise Refuse("bind: the handle inside an identity field")
        ident = {
            "protocolVersion": PROTOCOL,
            "adapterId": f["adapterId"],
            "adapterVersion": f["adapterVersion"],
            "hostInstanceId": f["hostInstanceId"],
            "sessionId": f["sessionId"],
            "generation": gen,
        }
        bind = {**ident, "kind": "bind", "capabilityHandle": h, "operations": ops, "limits": limits}
        bound = {**ident, "kind": "bound", "operations": ops, "limits": limits}
        # PC-3.3: the fit check.
        if len(encode(bind)) > limits["maxRequestBytes"] or len(encode(bound)) > limits["maxResponseBytes"]:
            raise Refuse("bind: the limits cannot hold bind/bound")
        try:
            self.root = Root(grant["root"])
        except OSError as e:
            raise Refuse(f"the grant's root cannot be opened: {os.strerror(e.errno)}")
        self.handle, self.ident, self.ops, self.limits = h, ident, ops, limits
        self.grant_digest = digest
        if self.server.keys_per_grant:
            with self.server.grant_keys_lock:
                for k, e in self.server.grant_keys.get(digest, {}).items():
                    self.keys[k] = e
        self.root_path = grant["root"]
        with self.lock:
            self.send_locked(self.framed("bound", {"operations": ops, "limits": limits}))
        log(f"bound session {ident['sessionId']!r} generation {gen}")

    def framed(self, kind, extra):
        f = {"protocolVersion": PROTOCOL, "kind": kind}
        for k in IDENTITY[2:]:
            f[k] = self.ident[k]
        f.update(extra)
        return f

    # -------------------------------------------------------------- frames after bind

    def frame(self, line):
        if self.handle.encode() in line:
            raise Refuse("the handle in a frame other than bind")
        try:
            f = decode_line(line)
        except (UnicodeDecodeError, ValueError, BadJson, RecursionError):
            raise Refuse("a line that is not strict JSON")
        if any(self.handle in s for s in strings_of(f)):
            raise Refuse("the handle in a frame other than bind")
        if not isinstance(f, dict):
            raise Refuse("a frame that is not an object")
        kind = f.get("kind")
        if kind not in ("invoke", "abort", "revoke"):
            raise Refuse("a kind the daemon never sends here (or a second bind)")
        if set(f) - FRAME_KEYS[kind]:
            raise Refuse("an unknown frame key")
        for k in IDENTITY:
            if k == "kind":
                continue
            v = as_int(f.get(k)) if k == "generation" else f.get(k)
            if k not in f or v != self.ident[k] or (k != "generation" and not isinstance(f[k], str)):
                raise Refuse(f"identity: {k}")
        if kind == "revoke":
            with self.lock:
                self.send_locked(self.framed("revoked", {}))
                self.close_locked(flush=True)
            return "revoked"
        rid = f.get("requestId")
        if not isinstance(rid, str) or not 1 <= len(rid) <= 128 or not ID_RE.fullmatch(rid):
            raise Refuse("bad requestId")
        if kind == "abort":
            t = f.get("targetRequestId")
            if not isinstance(t, str) or not 1 <= len(t) <= 128 or not ID_RE.fullmatch(t):
                raise Refuse("bad targetRequestId")
            self.abort(rid, t)
            return None
        key = f.get("idempotencyKey")
        if not isinstance(key, str) or not 1 <= len(key) <= 512 or not ID_RE.fullmatch(key):
            raise Refuse("bad idempotencyKey")
        op = f.get("operation")
        if not isinstance(op, str) or op not in OPERATIONS:
            raise Refuse("an operation outside the six")
        with self.lock:
            if rid in self.jobs:
                raise Refuse("a requestId still in flight")
        if op not in self.ops:
            self.reply(rid, key, op, err=("operation_not_granted", "operation not granted by the bind"))
            return None
        if "payload" not in f:
            self.reply(rid, key, op, err=("invalid_request", "payload is missing"))
            return None
        try:
            payload = validate_payload(op, f["payload"])
        except AdErr as e:
            self.reply(rid, key, op, err=(e.code, e.message))
            return None
        canon = {k: v for k, v in payload.items() if not k.startswith("_")}
        fp = json.dumps([op, canon], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        self.admit(Job(rid, key, op, payload, fp))
        return None

    def reply(self, rid, key, op, data=None, err=None):
        with self.lock:
            self.reply_locked(rid, key, op, data, err)

    def reply_locked(self, rid, key, op, data=None, err=None):
        body = {"requestId": rid, "idempotencyKey": key, "operation": op}
        if err is None:
            body.update({"ok": True, "data": data})
        else:
            code, message = err
            body.update({"ok": False, "error": {"code": code, "message": message, "retryable": RETRYABLE[code]}})
        frame = self.framed("result", body)
        if len(encode(frame)) > self.limits["maxResponseBytes"]:
            body.pop("data", None)
            body.update({"ok": False, "error": {"code": "response_too_large", "message": "the result does not fit the response budget", "retryable": False}})
            frame = self.framed("result", body)
        self.send_locked(frame)
        self.finished[rid] = True
        while len(self.finished) > 4096:
            self.finished.popitem(last=False)

    # -------------------------------------------------------------- admission, idempotency

    def purge_keys(self, now):
        ttl = self.limits["idempotencyTtlMs"] / 1000.0
        for k in [k for k, e in self.keys.items() if e.finished_at is not None and now - e.finished_at > ttl]:
            del self.keys[k]

    def admit(self, job):
        with self.lock:
            if self.closed:
                return
            now = time.monotonic()
            self.purge_keys(now)
            entry = self.keys.get(job.key)
            if entry is not None:
                if entry.fp != job.fp:
                    self.reply_locked(job.rid, job.key, job.op, err=("idempotency_conflict", "the key was used with another request"))
                    return
                if job.op in MUTATING:
                    if entry.outcome is not None:
                        self.replay_locked(job, entry.outcome)
                    else:  # the first is still in flight: wait for its outcome
                        job.state = "waiting"
                        self.jobs[job.rid] = job
                        entry.waiters.append(job)
                    return
                # read-only with the same fingerprint: simply run again
            else:
                if len(self.keys) >= self.limits["maxIdempotencyKeys"]:
                    done = [(e.finished_at, k) for k, e in self.keys.items() if e.finished_at is not None]
                    if not done:
                        self.reply_locked(job.rid, job.key, job.op, err=("busy", "every idempotency key is in flight"))
                        return
                    del self.keys[min(done)[1]]
                self.keys[job.key] = KeyEntry(job.fp, job.op, job.rid)
                job.primary = True
            self.start_or_queue_locked(job)

    def start_or_queue_locked(self, job):
        if self.running < self.limits["maxConcurrentRequests"]:
            self.jobs[job.rid] = job
            self.start_locked(job)
        elif len(self.queue) < self.limits["maxQueuedRequests"]:
            job.state = "queued"
            self.jobs[job.rid] = job
            self.queue.append(job)
        else:
            if job.primary:
                self.forget_key_locked(job)
            self.reply_locked(job.rid, job.key, job.op, err=("busy", "the adapter is busy; retry later"))

    def start_locked(self, job):
        job.state = "running"
        self.running += 1
        threading.Thread(target=self.run_job, args=(job,), daemon=True).start()

    def replay_locked(self, job, outcome):
        if outcome[0] == "ok":
            self.reply_locked(job.rid, job.key, job.op, data=outcome[1])
        else:
            self.reply_locked(job.rid, job.key, job.op, err=(outcome[1], outcome[2]))

    def forget_key_locked(self, job):
        """The primary left nothing behind: its waiters run again, the first as primary."""
        entry = self.keys.get(job.key)
        if entry is None or entry.primary != job.rid:
            return
        del self.keys[job.key]
        waiters, entry.waiters = entry.waiters, []
        first = True
        for w in waiters:
            self.jobs.pop(w.rid, None)
            if first:
                self.keys[w.key] = KeyEntry(w.fp, w.op, w.rid)
                w.primary = True
                self.start_or_queue_locked(w)
                first = False
            else:
                w.state = "waiting"
                self.jobs[w.rid] = w
                self.keys[w.key].waiters.append(w)

    def commit_point(self, job):
        """Called by a mutating job just before it changes the filesystem: from here on an
        abort answers aborted:false and the result follows."""
        with self.lock:
            if job.cancelled:
                raise Cancelled()
            job.state = "committing"

    def run_job(self, job):
        try:
            data = Ops(self, job).run()
            outcome = ("ok", data)
        except Cancelled:
            outcome = None
        except AdErr as e:
            outcome = ("err", e.code, e.message)
        except OSError as e:
            x = oserr(e, "the path")
            outcome = ("err", x.code, x.message)
        except Exception as e:  # noqa: BLE001 - a bug must not kill the connection silently
            log(f"internal error in {job.op}: {type(e).__name__}")
            outcome = ("err", "io_error", "internal error")
        with self.lock:
            self.running -= 1
            self.jobs.pop(job.rid, None)
            entry = self.keys.get(job.key) if job.primary else None
            if outcome is None or (job.cancelled and job.state != "committing"):
                if job.primary:
                    self.forget_key_locked(job)
            elif job.cancelled:  # closed after its commit point: done on disk, never answered
                if entry is not None:
                    entry.finished_at = time.monotonic()
                    entry.outcome = outcome if job.op in MUTATING else None
            else:
                self.replay_locked(job, outcome)
                if entry is not None:
                    retry = outcome[0] == "err" and RETRYABLE[outcome[1]]
                    if retry:
                        self.forget_key_locked(job)
                    else:
                        entry.finished_at = time.monotonic()
                        if job.op in MUTATING:
                            entry.outcome = outcome
                        for w in entry.waiters:
                            self.jobs.pop(w.rid, None)
                            self.replay_locked(w, outcome)
                        entry.waiters = []
            while self.queue and self.running < self.limits["maxConcurrentRequests"] and not self.closed:
                nxt = self.queue.popleft()
                self.start_locked(nxt)

    def abort(self, rid, target):
        with self.lock:
            job = self.jobs.get(target)
            if job is None or job.cancelled:
                if target in self.finished:
                    self.send_locked(self.framed("aborted", {"requestId": rid, "targetRequestId": target, "aborted": False}))
                else:
                    self.send_locked(self.framed("aborted", {"requestId": rid, "targetRequestId": target, "aborted": False, "error": {"code": "unknown_request", "message": "no such request in flight", "retryable": False}}))
                return
            if job.state == "committing":
                self.send_locked(self.framed("aborted", {"requestId": rid, "targetRequestId": target, "aborted": False}))
                return
            job.cancelled = True
            if job.state == "queued":
                self.queue.remove(job)
                self.jobs.pop(target, None)
                if job.primary:
                    self.forget_key_locked(job)
            elif job.state == "waiting":
                self.jobs.pop(target, None)
                e = self.keys.get(job.key)
                if e is not None and job in e.waiters:
                    e.waiters.remove(job)
            # running: the worker sees the flag before its commit point and sends nothing
            self.finished.pop(target, None)
            self.send_locked(self.framed("aborted", {"requestId": rid, "targetRequestId": target, "aborted": True}))


# ------------------------------------------------------------------ the six operations (PC-5.3)


class Ops:
    def __init__(self, conn, job):
        self.conn, self.job, self.p = conn, job, job.payload
        self.root = conn.root
        self.handle = conn.handle
        self.segs, self.trailing = self.p["_segs"], self.p["_trailing"]

    def check(self):
        if self.job.cancelled:
            raise Cancelled()

    def budget(self, data):
        """Bytes the result line would take with `data`."""
        return len(encode(self.conn.framed("result", {"requestId": self.job.rid, "idempotencyKey": self.job.key, "operation": self.job.op, "ok": True, "data": data})))

    def secret(self, *texts):
        for t in texts:
            if self.handle in t:
                raise AdErr("capability_in_content", "the result would hold the capability handle")

    def run(self):
        return getattr(self, self.job.op.replace("fs.", "op_"))()

    # fs.stat
    def op_stat(self):
        fd, st = self.root.open_node(self.segs, self.trailing, "path")
        os.close(fd)
        data = {"type": "directory" if stat.S_ISDIR(st.st_mode) else "file", "size": 0 if stat.S_ISDIR(st.st_mode) else st.st_size}
        m = modified_at(st)
        if m:
            data["modifiedAt"] = m
        return data

    # fs.list
    def op_list(self):
        fd, st = self.root.open_node(self.segs, self.trailing, "path")
        try:
            if not stat.S_ISDIR(st.st_mode):
                raise AdErr("not_a_directory", "path is not a directory")
            names = sorted((n for n in os.listdir(fd) if name_ok(n)), key=lambda n: n.encode("utf-8"))
            entries = []
            for n in names:
                self.check()
                try:
                    est = os.stat(n, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(est.st_mode):
                    e = {"name": n, "type": "directory"}
                elif stat.S_ISREG(est.st_mode):
                    e = {"name": n, "type": "file", "size": est.st_size}
                else:
                    continue  # symlinks, FIFOs, sockets and devices are never listed
                m = modified_at(est)
                if m:
                    e["modifiedAt"] = m
                entries.append(e)
        finally:
            os.close(fd)
        limit = self.p.get("maxEntries", 1000)
        truncated = len(entries) > limit
        entries = entries[:limit]
        self.secret(*(e["name"] for e in entries))
        return self.fit_list("entries", entries, truncated)

    def fit_list(self, key, items, truncated):
        """Cut `items` to the response budget, setting truncated (PC-4.5, PC-5.3)."""
        cap = self.conn.limits["maxResponseBytes"]
        size = self.budget({key: [], "truncated": True})
        kept = 0
        for it in items:
            size += len(encode(it)) - 1 + (1 if kept else 0)
            if size > cap:
                break
            kept += 1
        if kept < len(items):
            if kept == 0:
                raise AdErr("response_too_large", "not even one item fits the response budget")
            return {key: items[:kept], "truncated": True}
        return {key: items, "truncated": truncated}

    # fs.read
    def op_read(self):
        fd, st = self.root.open_node(self.segs, self.trailing, "path")
        try:
            if stat.S_ISDIR(st.st_mode):
                raise AdErr("not_a_file", "path is a directory")
            size = st.st_size
            off = self.p.get("offset", 0)
            if off >= size:
                return {"content": "", "bytesRead": 0, "eof": True}
            want = min(self.p.get("maxBytes", MAX_CONTENT), size - off, self.conn.limits["maxResponseBytes"])
            raw = os.pread(fd, want, off)
            if raw and 0x80 <= raw[0] <= 0xBF:
                raise AdErr("invalid_offset", "offset is inside a multi-byte character")
        finally:
            os.close(fd)
        at_end = off + len(raw) >= size
        cap = self.conn.limits["maxResponseBytes"]
        while True:
            self.check()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.reason == "unexpected end of data" and e.end == len(raw) and not at_end:
                    raw = raw[: e.start]  # the window ends inside a character: end before it
                    at_end = False
                    continue
                raise AdErr("not_utf8", "the window is not UTF-8")
            data = {"content": text, "bytesRead": len(raw), "eof": off + len(raw) == size}
            over = self.budget(data) - cap
            if over <= 0:
                break
            if len(raw) == 0:
                raise AdErr("response_too_large", "not even one character fits the response budget")
            raw = raw[: max(0, len(raw) - over)]
            at_end = False
        self.secret(text)
        return data

    # fs.search
    def op_search(self):
        q = self.p["query"]
        limit = self.p.get("maxResults", 1000)
        matches = []
        fd, st = self.root.open_node(self.segs, self.trailing, "path")
        try:
            if stat.S_ISDIR(st.st_mode):
                files = []
                self.collect(fd, "/".join(self.segs), files)
                files.sort(key=lambda t: t[0].encode("utf-8"))
            else:
                files = [("/".join(self.segs), None)]
                self.search_fd(fd, files[0][0], q, matches, limit)
                files = []
        finally:
            os.close(fd)
        for rel, _ in files:
            if len(matches) > limit:
                break
            self.check()
            try:
                ffd, fst = self.root.open_node(rel.split("/"), False, "a file")
            except AdErr:
                continue  # vanished or changed type meanwhile: not a regular file any more
            try:
                if stat.S_ISREG(fst.st_mode):
                    self.search_fd(ffd, rel, q, matches, limit)
            finally:
                os.close(ffd)
        truncated = len(matches) > limit
        matches = matches[:limit]
        self.secret(*(m["text"] for m in matches), *(m["path"] for m in matches))
        return self.fit_list("matches", matches, truncated)

    def collect(self, dfd, rel, out):
        """Regular files under `dfd`, never following a symlink."""
        for n in os.listdir(dfd):
            self.check()
            if not name_ok(n):
                continue
            try:
                st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            path = f"{rel}/{n}" if rel else n
            if stat.S_ISREG(st.st_mode):
                out.append((path, None))
            elif stat.S_ISDIR(st.st_mode):
                try:
                    sub = open_dir_in(dfd, n, "a directory")
                except AdErr:
                    continue
                try:
                    self.collect(sub, path, out)
                finally:
                    os.close(sub)

    def search_fd(self, fd, rel, q, matches, limit):
        raw = read_all(fd)
        if b"\x00" in raw:
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        for no, line in enumerate(text.split("\n"), start=1):
            if line.endswith("\r"):
                line = line[:-1]
            i = line.find(q)
            while i >= 0:
                matches.append({"path": rel, "line": no, "column": i + 1, "text": search_window(line, i)})
                if len(matches) > limit:
                    return
                i = line.find(q, i + len(q))

    # fs.write
    def op_write(self):
        new = self.p["content"].encode("utf-8")
        return self.replace(lambda old: new, self.p.get("create", True), self.p.get("overwrite", True))

    # fs.edit
    def op_edit(self):
        def apply(old):
            if old is None:
                raise AdErr("not_found", "path does not exist")
            try:
                text = old.decode("utf-8")
            except UnicodeDecodeError:
                raise AdErr("not_utf8", "the file is not UTF-8")
            for i, e in enumerate(self.p["edits"]):
                o = e["oldText"]
                at = text.find(o)
                if at < 0:
                    raise AdErr("edit_not_found", f"edit {i}: oldText not found")
                if text.find(o, at + 1) >= 0:
                    raise AdErr("edit_ambiguous", f"edit {i}: oldText occurs more than once")
                text = text[:at] + e["newText"] + text[at + len(o):]
            self.replacements = len(self.p["edits"])
            return text.encode("utf-8")

        data = self.replace(apply, False, True)
        return {"replacements": self.replacements, "digest": data["digest"]}

    def replace(self, make, create, overwrite):
        """Atomically replace (or create) the named file with make(old bytes | None): a
        temporary file in the same directory, fsync, rename, fsync the directory."""
        if not self.segs:
            raise AdErr("not_a_file", "the root is a directory")
        pfd = self.root.parent(self.segs, "path")
        name = self.segs[-1]
        try:
            with path_lock(self.conn.root_path, self.segs):
                try:
                    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise AdErr("symlink_refused", "path is a symlink")
                if st is not None and not stat.S_ISREG(st.st_mode):
                    raise AdErr("not_a_file", "path is not a regular file")
                if self.trailing:
                    raise AdErr("not_a_directory" if st is not None else "not_found", "path with a trailing slash is not a directory")
                expected = self.p.get("expectedDigest")
                old = None
                if st is None:
                    if expected is not None or not create:
                        raise AdErr("not_found", "path does not exist")
                else:
                    if not overwrite:
                        raise AdErr("already_exists", "path already exists")
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=pfd)
                    try:
                        st = os.fstat(fd)
                        if not stat.S_ISREG(st.st_mode):
                            raise AdErr("not_a_file", "path is not a regular file")
                        old = read_all(fd)
                    finally:
                        os.close(fd)
                    if expected is not None and sha256_hex(old) != expected:
                        raise AdErr("digest_mismatch", "the file is not the expected version")
                new = make(old)
                self.check()
                tmp = f".pi-py-{secrets.token_hex(8)}.tmp"
                mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~UMASK
                tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=pfd)
                try:
                    try:
                        view = memoryview(new)
                        while view:
                            n = os.write(tfd, view)
                            view = view[n:]
                        os.fchmod(tfd, mode)
                        os.fsync(tfd)
                    finally:
                        os.close(tfd)
                    self.conn.commit_point(self.job)
                    os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
                    tmp = None
                finally:
                    if tmp is not None:
                        try:
                            os.unlink(tmp, dir_fd=pfd)
                        except OSError:
                            pass
                try:
                    os.fsync(pfd)
                except OSError:
                    pass
                return {"created": st is None, "bytesWritten": len(new), "digest": sha256_hex(new)}
        finally:
            os.close(pfd)


# ------------------------------------------------------------------ the server


class Server:
    def __init__(self, args):
        self.socket_path = os.path.abspath(args.socket)
        self.grants_path = os.path.abspath(args.grants)
        self.adapter_id = args.adapter_id
        self.adapter_version = args.adapter_version
        self.bind_deadline = args.bind_deadline_ms / 1000.0
        # --keys-per-grant: finished idempotency keys outlive their connection (per grant,
        # for their TTL), as a daemon's retry after a reconnect would want.
        self.keys_per_grant = args.keys_per_grant
        self.grant_keys = {}  # sha256(handle) -> OrderedDict(idempotencyKey -> KeyEntry)
        self.grant_keys_lock = threading.Lock()
        self.unbound = 0
        self.unbound_lock = threading.Lock()

    def unbound_done(self):
        with self.unbound_lock:
            self.unbound -= 1

    def check_directory(self):
        d = os.path.dirname(self.socket_path)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise SystemExit(f"python-adapter: the socket's directory must be a real directory of ours without group/other permissions: {d}")
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise SystemExit("python-adapter: the socket path exists and is not a socket of ours")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        try:
            probe.connect(self.socket_path)
            live = True
        except BlockingIOError:
            live = True
        except OSError:
            live = False
        finally:
            probe.close()
        if live:
            raise SystemExit("python-adapter: another server answers on the socket")
        os.unlink(self.socket_path)

    def serve(self):
        self.check_directory()
        load_grants(self.grants_path)  # fail at start on an unusable grants file
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        listener.listen(128)
        log(f"serving as {self.adapter_id} {self.adapter_version}")
        try:
            while True:
                try:
                    sock, _ = listener.accept()
                except InterruptedError:
                    continue
                except OSError as e:
                    log(f"accept failed: {os.strerror(e.errno)}")
                    time.sleep(0.05)
                    continue
                with self.unbound_lock:
                    if self.unbound >= MAX_UNBOUND:
                        sock.close()
                        continue
                    self.unbound += 1
                threading.Thread(target=Connection(self, sock).serve, daemon=True).start()
        finally:
            listener.close()
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser(description="A Pi host tool adapter (Python standard library).")
    ap.add_argument("--socket", required=True, help="Unix socket path to serve (its directory must be ours, mode 0700)")
    ap.add_argument("--grants", required=True, help="grants file written by `pi-conform grant` (mode 0600)")
    ap.add_argument("--adapter-id", default="python-example")
    ap.add_argument("--adapter-version", default="0.1.0")
    ap.add_argument("--bind-deadline-ms", type=int, default=int(BIND_DEADLINE_S * 1000))
    ap.add_argument("--omit-modified-at", action="store_true", help="never send the optional modifiedAt")
    ap.add_argument("--keys-per-grant", action="store_true", help="keep finished idempotency keys per grant across connections (for their TTL)")
    args = ap.parse_args()
    global OMIT_MODIFIED_AT
    OMIT_MODIFIED_AT = args.omit_modified_at

    def stop(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        Server(args).serve()
    except KeyboardInterrupt:
        log("stopped")
    except (OSError, ValueError, BadJson) as e:
        print(f"python-adapter: cannot start: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""An independent client for the reference adapter: Python's standard library only, nothing
from the pi-conform crate but its command line.

It mints a grant with `pi-conform grant`, starts `pi-conform serve-adapter`, binds over the
Unix socket with the minted descriptor and drives every operation and the SPEC 5.3 error
codes against a real tree, checking each reply literally: the exact identity on every frame,
closed keys, the data or the error code expected, every line within maxResponseBytes, and
that the capability handle appears in no byte the adapter sent or logged.

Usage: scripts/independent_client.py PATH-TO-pi-conform
(PI_INDEPENDENT_SERVE_ARGS adds arguments to serve-adapter.)
Exit status 0 when every check passes; 1 with the failed checks listed otherwise.
"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

IDENTITY = ("protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation")
RESULT_KEYS = set(IDENTITY) | {"kind", "requestId", "idempotencyKey", "operation", "ok"}
failures = []
checks = 0
# The minted handle, redacted from everything this client prints (even what a broken
# adapter sent back).
secret = None


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what.replace(secret, "<handle>") if secret else what)


class Conn:
    def __init__(self, path, desc, received):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(path)
        self.desc = desc
        self.buf = b""
        self.received = received
        self.n = 0

    def ident(self):
        d = self.desc
        b = d["binding"]
        return {
            "protocolVersion": d["protocolVersion"],
            "adapterId": d["adapterId"],
            "adapterVersion": d["adapterVersion"],
            "hostInstanceId": b["hostInstanceId"],
            "sessionId": b["sessionId"],
            "generation": b["generation"],
        }

    def send(self, frame):
        self.s.sendall(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    def line(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(65536)
            self.received.append(chunk)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        limit = self.desc["limits"]["maxResponseBytes"]
        check(len(line) + 1 <= limit, f"a line of {len(line) + 1} bytes exceeds maxResponseBytes {limit}")
        return json.loads(line)

    def bind(self, handle=None, operations=None):
        f = dict(self.ident(), kind="bind")
        f["capabilityHandle"] = handle or self.desc["binding"]["capabilityHandle"]
        f["operations"] = operations or self.desc["operations"]
        f["limits"] = self.desc["limits"]
        self.send(f)
        return self.line()

    def invoke(self, op, payload, key=None):
        self.n += 1
        rid = f"r{self.n}"
        f = dict(self.ident(), kind="invoke", requestId=rid, idempotencyKey=key or f"k{self.n}")
        f["operation"] = op
        f["payload"] = payload
        self.send(f)
        r = self.line()
        ctx = f"{op} {json.dumps(payload)}"
        check(r is not None, f"{ctx}: connection closed instead of a result")
        if r is None:
            return {}
        check({k: r.get(k) for k in IDENTITY} == self.ident(), f"{ctx}: identity differs: {r}")
        check(r.get("kind") == "result", f"{ctx}: kind {r.get('kind')}")
        check(r.get("requestId") == rid and r.get("idempotencyKey") == f["idempotencyKey"], f"{ctx}: ids differ")
        check(r.get("operation") == op, f"{ctx}: operation differs")
        extra = "data" if r.get("ok") else "error"
        check(set(r) == RESULT_KEYS | {extra}, f"{ctx}: keys {sorted(r)}")
        if not r.get("ok"):
            e = r.get("error", {})
            check(set(e) == {"code", "message", "retryable"}, f"{ctx}: error keys {sorted(e)}")
        return r


def expect_ok(c, op, payload, data=None, **kw):
    r = c.invoke(op, payload, **kw)
    check(r.get("ok") is True, f"{op} {json.dumps(payload)}: expected ok, got {r.get('error')}")
    if data is not None and r.get("ok"):
        got = {k: r["data"].get(k) for k in data}
        check(got == data, f"{op} {json.dumps(payload)}: data {got} != {data}")
    return r.get("data", {})


def expect_err(c, op, payload, code, retryable=False, **kw):
    r = c.invoke(op, payload, **kw)
    e = r.get("error") or {}
    check(r.get("ok") is False and e.get("code") == code, f"{op} {json.dumps(payload)}: expected {code}, got {r}")
    check(e.get("retryable") is retryable, f"{op} {json.dumps(payload)}: retryable {e.get('retryable')}")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def main():
    exe = sys.argv[1]
    work = tempfile.mkdtemp(prefix="pi-independent-")
    os.chmod(work, 0o700)
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "sub"))
    os.makedirs(os.path.join(root, "dir2"))
    files = {
        "a.txt": b"hello\nworld\n",
        "sub/b.txt": b"x ZQ y\nZQ\n",
        "crlf.txt": b"one\r\ntwo ZQ\r\n",
        "bad.bin": b"\xff\xfe",
        "e.txt": "\u00e9".encode(),
        "aaa.txt": b"aaa",
    }
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    os.symlink("a.txt", os.path.join(root, "link"))
    os.symlink("sub", os.path.join(root, "sublink"))
    os.mkfifo(os.path.join(root, "fifo"))
    sock = os.path.join(work, "adapter.sock")
    grants = os.path.join(work, "grants.json")
    out = subprocess.run(
        [exe, "grant", "--grants", grants, "--socket", sock, "--root", root, "--host-instance", "host-ind",
         "--session", "sess-ind", "--generation", "3", "--max-response-bytes", "65536"],
        capture_output=True, check=True)
    desc = json.loads(out.stdout)
    global secret
    secret = desc["binding"]["capabilityHandle"]
    handle = secret.encode()
    # A file inside the root that holds the handle (a grants file in the root is the classic way).
    with open(os.path.join(root, "secret.txt"), "wb") as f:
        f.write(b"token=" + handle + b"\n")
    log = open(os.path.join(work, "adapter.log"), "wb")
    # PI_INDEPENDENT_SERVE_ARGS: extra serve-adapter arguments (the tests pass hidden
    # `--fault NAME` switches to prove these checks fail against a broken adapter).
    extra = os.environ.get("PI_INDEPENDENT_SERVE_ARGS", "").split()
    server = subprocess.Popen([exe, "serve-adapter", "--socket", sock, "--grants", grants, *extra], stderr=log)
    received = []
    try:
        deadline = time.time() + 10
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.02)
        run(sock, desc, received, root)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
        with open(os.path.join(work, "adapter.log"), "rb") as f:
            logged = f.read()
        # The work directory holds the grants file and a fixture with the handle: remove it.
        shutil.rmtree(work, ignore_errors=True)
    check(handle not in b"".join(received), "the handle appears in bytes the adapter sent")
    check(handle not in logged, "the handle appears in the adapter's log")
    check(root.encode() not in logged, "the root's absolute path appears in the adapter's log")
    if failures:
        print(f"{len(failures)} of {checks} checks failed:")
        for f in failures:
            print("  -", f)
        return 1
    print(f"independent client: {checks} checks passed")
    return 0


def run(sock, desc, received, root):
    # A wrong handle: closed without bound.
    c = Conn(sock, desc, received)
    check(c.bind(handle="A" * 43) is None, "a bind with an unknown handle was answered")
    # The real bind: bound echoes identity, operations and limits exactly.
    c = Conn(sock, desc, received)
    b = c.bind()
    check(b is not None and b.get("kind") == "bound", f"bound expected, got {b}")
    want = dict(c.ident(), kind="bound", operations=desc["operations"], limits=desc["limits"])
    check(b == want, f"bound is not the exact echo: {b}")

    # fs.stat
    expect_ok(c, "fs.stat", {"path": "a.txt"}, {"type": "file", "size": 12})
    d = expect_ok(c, "fs.stat", {"path": "sub"}, {"type": "directory", "size": 0})
    check("modifiedAt" not in d or d["modifiedAt"].endswith("Z"), f"modifiedAt {d.get('modifiedAt')}")
    expect_ok(c, "fs.stat", {"path": "."}, {"type": "directory"})
    expect_ok(c, "fs.stat", {"path": "sub/"}, {"type": "directory"})
    expect_err(c, "fs.stat", {"path": "a.txt/"}, "not_a_directory")
    expect_err(c, "fs.stat", {"path": "link"}, "symlink_refused")
    expect_err(c, "fs.stat", {"path": "sublink/b.txt"}, "symlink_refused")
    expect_err(c, "fs.stat", {"path": "fifo"}, "unsupported_file_type")
    expect_err(c, "fs.stat", {"path": "missing"}, "not_found")
    for bad in ["../a.txt", "/etc/passwd", "sub/../a.txt", "a//b", "./a.txt", "sub\\b.txt", "a\u0001", "x" * 256]:
        expect_err(c, "fs.stat", {"path": bad}, "invalid_path")
    expect_err(c, "fs.stat", {"path": "a.txt", "extra": 1}, "invalid_request")

    # fs.list
    d = expect_ok(c, "fs.list", {"path": "."}, {"truncated": False})
    names = [e["name"] for e in d.get("entries", [])]
    check(names == sorted(["a.txt", "aaa.txt", "bad.bin", "crlf.txt", "dir2", "e.txt", "secret.txt", "sub"]),
          f"fs.list . names {names}")
    sizes = {e["name"]: e.get("size") for e in d.get("entries", [])}
    check(sizes.get("a.txt") == 12 and sizes.get("dir2") is None, f"fs.list sizes {sizes}")
    d = expect_ok(c, "fs.list", {"path": ".", "maxEntries": 2}, {"truncated": True})
    check([e["name"] for e in d.get("entries", [])] == ["a.txt", "aaa.txt"], f"fs.list maxEntries 2: {d}")
    expect_err(c, "fs.list", {"path": "a.txt"}, "not_a_directory")
    expect_err(c, "fs.list", {"path": "sublink"}, "symlink_refused")

    # fs.read
    expect_ok(c, "fs.read", {"path": "a.txt"}, {"content": "hello\nworld\n", "bytesRead": 12, "eof": True})
    expect_ok(c, "fs.read", {"path": "a.txt", "offset": 6, "maxBytes": 5},
              {"content": "world", "bytesRead": 5, "eof": False})
    expect_ok(c, "fs.read", {"path": "a.txt", "offset": 100}, {"content": "", "bytesRead": 0, "eof": True})
    expect_ok(c, "fs.read", {"path": "e.txt", "maxBytes": 1}, {"content": "", "bytesRead": 0, "eof": False})
    expect_err(c, "fs.read", {"path": "e.txt", "offset": 1}, "invalid_offset")
    expect_err(c, "fs.read", {"path": "bad.bin"}, "not_utf8")
    expect_err(c, "fs.read", {"path": "sub"}, "not_a_file")
    expect_err(c, "fs.read", {"path": "fifo"}, "unsupported_file_type")
    expect_err(c, "fs.read", {"path": "a.txt", "maxBytes": 0}, "invalid_request")
    expect_err(c, "fs.read", {"path": "secret.txt"}, "capability_in_content")

    # fs.search
    # A tree holding a file with the handle is refused whole, whatever the query (a search that
    # skipped it only when the query missed it would tell the handle's letters one by one).
    expect_err(c, "fs.search", {"path": ".", "query": "ZQ"}, "capability_in_content")
    os.remove(os.path.join(root, "secret.txt"))
    d = expect_ok(c, "fs.search", {"path": ".", "query": "ZQ"}, {"truncated": False})
    got = [(m["path"], m["line"], m["column"], m["text"]) for m in d.get("matches", [])]
    check(got == [("crlf.txt", 2, 5, "two ZQ"), ("sub/b.txt", 1, 3, "x ZQ y"), ("sub/b.txt", 2, 1, "ZQ")],
          f"fs.search matches {got}")
    d = expect_ok(c, "fs.search", {"path": "sub/b.txt", "query": "ZQ", "maxResults": 1}, {"truncated": True})
    check(len(d.get("matches", [])) == 1, f"fs.search maxResults 1: {d}")
    expect_ok(c, "fs.search", {"path": "bad.bin", "query": "x"}, {"matches": [], "truncated": False})
    expect_err(c, "fs.search", {"path": ".", "query": "a\nb"}, "invalid_request")
    expect_err(c, "fs.search", {"path": "missing", "query": "a"}, "not_found")

    # fs.write
    expect_ok(c, "fs.write", {"path": "new.txt", "content": "new"},
              {"created": True, "bytesWritten": 3, "digest": sha(b"new")})
    expect_err(c, "fs.write", {"path": "new.txt", "content": "x", "overwrite": False}, "already_exists")
    expect_err(c, "fs.write", {"path": "none.txt", "content": "x", "create": False}, "not_found")
    expect_err(c, "fs.write", {"path": "new.txt", "content": "x", "expectedDigest": "0" * 64}, "digest_mismatch")
    expect_err(c, "fs.write", {"path": "sub", "content": "x"}, "not_a_file")
    expect_err(c, "fs.write", {"path": "nodir/x.txt", "content": "x"}, "not_found")
    expect_err(c, "fs.write", {"path": "link", "content": "x"}, "symlink_refused")
    expect_ok(c, "fs.write", {"path": "new.txt", "content": "newer", "expectedDigest": sha(b"new")},
              {"created": False, "bytesWritten": 5, "digest": sha(b"newer")})
    with open(os.path.join(root, "new.txt"), "rb") as f:
        check(f.read() == b"newer", "fs.write did not leave the new content on disk")
    check(os.readlink(os.path.join(root, "link")) == "a.txt", "the symlink was changed")
    # Idempotency: the same key and payload replays (runs once); another payload conflicts.
    w = {"path": "idem.txt", "content": "1"}
    first = expect_ok(c, "fs.write", w, {"created": True}, key="same-key")
    again = expect_ok(c, "fs.write", w, {"created": True}, key="same-key")
    check(first == again, f"replay differs: {first} vs {again}")
    expect_err(c, "fs.write", {"path": "idem.txt", "content": "2"}, "idempotency_conflict", key="same-key")

    # fs.edit
    expect_ok(c, "fs.edit", {"path": "new.txt", "edits": [{"oldText": "newer", "newText": "ab"},
                                                          {"oldText": "b", "newText": "c"}]},
              {"replacements": 2, "digest": sha(b"ac")})
    expect_err(c, "fs.edit", {"path": "new.txt", "edits": [{"oldText": "zz", "newText": "y"}]}, "edit_not_found")
    expect_err(c, "fs.edit", {"path": "aaa.txt", "edits": [{"oldText": "aa", "newText": "b"}]}, "edit_ambiguous")
    expect_err(c, "fs.edit", {"path": "new.txt", "edits": [{"oldText": "a", "newText": "q"}],
                              "expectedDigest": sha(b"other")}, "digest_mismatch")
    expect_err(c, "fs.edit", {"path": "bad.bin", "edits": [{"oldText": "a", "newText": "q"}]}, "not_utf8")
    with open(os.path.join(root, "aaa.txt"), "rb") as f:
        check(f.read() == b"aaa", "a failed edit changed the file")

    # abort of an unknown request
    c.send(dict(c.ident(), kind="abort", requestId="ab1", targetRequestId="nope"))
    a = c.line() or {}
    check(a.get("kind") == "aborted" and a.get("aborted") is False and a.get("targetRequestId") == "nope"
          and (a.get("error") or {}).get("code") == "unknown_request", f"abort of an unknown request: {a}")

    # revoke: revoked, then the connection closes
    c.send(dict(c.ident(), kind="revoke"))
    r = c.line() or {}
    check(r == dict(c.ident(), kind="revoked"), f"revoked expected, got {r}")
    check(c.line() is None, "the connection stayed open after revoked")

    # A binding without fs.edit: invoking it is operation_not_granted.
    c = Conn(sock, desc, received)
    ops = [o for o in desc["operations"] if o != "fs.edit"]
    b = c.bind(operations=ops)
    check(b is not None and b.get("operations") == ops, f"bound for a subset: {b}")
    c.desc = dict(desc, operations=ops)
    expect_err(c, "fs.edit", {"path": "new.txt", "edits": [{"oldText": "a", "newText": "b"}]},
               "operation_not_granted")
    # An invoke carrying the handle is not answered: the connection is closed.
    c.send(dict(c.ident(), kind="invoke", requestId="h1", idempotencyKey="h1", operation="fs.stat",
                payload={"path": desc["binding"]["capabilityHandle"]}))
    check(c.line() is None, "an invoke carrying the handle was answered")


if __name__ == "__main__":
    sys.exit(main())

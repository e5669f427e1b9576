#!/usr/bin/env python3
"""Bind round trips against `pi-conform serve-adapter`, side by side for several binaries.

Usage: scripts/bench/bind-latency.py [--grants N] [--binds N] [--rounds N] BIN [BIN...]

For each binary: mint N grants (with that binary's `grant`, into a grants file of its own),
start its `serve-adapter`, then time `--binds` binds, each on a new connection: connect, send
the `bind` line, read `bound`, close. The binaries take turns, `--rounds` times, so both see
the same machine; the median of each round and of all rounds is printed (microseconds). Only
timings are printed, never a descriptor or a handle. Standard library only.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def start(binary, work, n_grants):
    os.makedirs(work, mode=0o700)
    root = os.path.join(work, "root")
    os.makedirs(root)
    sock, grants = os.path.join(work, "a.sock"), os.path.join(work, "grants.json")
    binds = []
    for i in range(n_grants):
        out = subprocess.run(
            [binary, "grant", "--grants", grants, "--socket", sock, "--root", root,
             "--host-instance", "bench-host", "--session", f"s{i}", "--generation", "1"],
            capture_output=True, check=True).stdout
        d = json.loads(out)
        bind = {"protocolVersion": "1.0", "kind": "bind", "adapterId": d["adapterId"],
                "adapterVersion": d["adapterVersion"], **d["binding"],
                "operations": d["operations"], "limits": d["limits"]}
        binds.append(json.dumps(bind).encode() + b"\n")
    env = dict(os.environ, PI_CONFORM_LOG="warn")
    with open(os.path.join(work, "adapter.log"), "wb") as log:
        proc = subprocess.Popen([binary, "serve-adapter", "--socket", sock, "--grants", grants],
                                env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            sys.exit(f"{binary}: serve-adapter did not start")
        time.sleep(0.01)
    return proc, sock, binds


def round_trips(sock, binds, n):
    out = []
    for i in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        f = s.makefile("rb")
        t = time.perf_counter()
        s.sendall(binds[i % len(binds)])
        line = f.readline()
        out.append((time.perf_counter() - t) * 1e6)
        kind = json.loads(line).get("kind") if line else None
        if kind != "bound":
            sys.exit(f"bind refused (got {kind or 'no line'})")
        f.close()
        s.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grants", type=int, default=300)
    ap.add_argument("--binds", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pc-bind-")
    try:
        targets = [start(b, os.path.join(tmp, str(i)), a.grants) for i, b in enumerate(a.binaries)]
        for _, sock, binds in targets:
            round_trips(sock, binds, min(100, a.binds))  # warm-up
        every = [[] for _ in targets]
        for r in range(a.rounds):
            for i, (_, sock, binds) in enumerate(targets):
                t = round_trips(sock, binds, a.binds)
                every[i].extend(t)
                print(f"round {r + 1} {a.binaries[i]}: median {statistics.median(t):.0f} us", flush=True)
        for b, t in zip(a.binaries, every):
            t.sort()
            print(f"{b}: {len(t)} binds, median {statistics.median(t):.0f} us, "
                  f"p10 {t[len(t) // 10]:.0f}, p90 {t[9 * len(t) // 10]:.0f}")
    finally:
        for proc, _, _ in locals().get("targets", []):
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

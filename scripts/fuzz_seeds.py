#!/usr/bin/env python3
"""Write the fuzz seeds: each golden vector's input into fuzz/corpus/<target>/<vector id>.

The inputs are the ones tests/fuzz_replay.rs replays (keep the two in step):
- ndjson: each framing.json line followed by LF;
- command, descriptor: each line of that kind;
- frame_to_adapter, frame_to_daemon, bind_request: each frame line;
- path: the string of each path vector, as UTF-8.

A vector's line is materialized as vectors/README.md says (raw, rawHex, input, or base +
patch) and encoded as compact JSON with raw UTF-8, like serde_json.

Usage: scripts/fuzz_seeds.py [CORPUS_DIR]   (default: fuzz/corpus)
"""

import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
VECTORS = ROOT / "vectors"
FRAME_TARGETS = ("frame_to_adapter", "frame_to_daemon", "bind_request")


def number(x):
    """A float as serde_json (ryu) writes it: shortest round-trip digits, `1e16`, `1.5e-7`."""
    if not math.isfinite(x):
        raise ValueError("non-finite number in a vector")
    r = repr(x)
    if "e" not in r:
        return r if "." in r else r + ".0"
    mant, exp = r.split("e")
    return f"{mant}e{int(exp)}"


def encode(v):
    """Compact JSON, raw UTF-8, keys in document order (serde_json with preserve_order)."""
    if isinstance(v, float):
        return number(v)
    if isinstance(v, (bool, type(None), int, str)):
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            return number(float(v))
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(encode(x) for x in v) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + encode(x) for k, x in v.items()) + "}"


def unescape(seg):
    return seg.replace("~1", "/").replace("~0", "~")


def apply(doc, op):
    parent_ptr, last = op["path"].rsplit("/", 1)
    parent = doc
    for seg in parent_ptr.split("/")[1:]:
        seg = unescape(seg)
        parent = parent[int(seg)] if isinstance(parent, list) else parent[seg]
    last = unescape(last)
    if isinstance(parent, list):
        i = int(last)
        if op["op"] == "remove":
            del parent[i]
        elif i == len(parent):
            parent.append(op.get("value"))
        else:
            parent[i] = op.get("value")
    elif op["op"] == "remove":
        del parent[last]
    else:
        parent[last] = op.get("value")


def document(v):
    if "input" in v:
        return v["input"]
    doc = json.loads((VECTORS / "bases" / f"{v['base']}.json").read_text(encoding="utf-8"))
    for op in v.get("patch", []):
        apply(doc, op)
    return doc


def line(v):
    if "raw" in v:
        return v["raw"].encode("utf-8")
    if "rawHex" in v:
        return bytes.fromhex("".join(v["rawHex"].split()))
    return encode(document(v)).encode("utf-8")


def seeds():
    for f in sorted(VECTORS.glob("*.json")):
        for v in json.loads(f.read_text(encoding="utf-8")):
            data = line(v)
            if f.name == "framing.json":
                yield "ndjson", v["id"], data + b"\n"
            kind = v["kind"]
            if kind in ("command", "descriptor"):
                yield kind, v["id"], data
            elif kind == "frame":
                for t in FRAME_TARGETS:
                    yield t, v["id"], data
            elif kind == "path" and "raw" not in v and "rawHex" not in v:
                doc = document(v)
                if isinstance(doc, str):
                    yield "path", v["id"], doc.encode("utf-8")


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus"
    counts = {}
    for target, name, data in seeds():
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
        counts[target] = counts.get(target, 0) + 1
    for target, n in sorted(counts.items()):
        print(f"{target}: {n} seeds")


if __name__ == "__main__":
    main()

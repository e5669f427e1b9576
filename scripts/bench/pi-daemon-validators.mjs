#!/usr/bin/env node
// Throughput of Pi Daemon 0.3.3's own validator functions (its built `dist/`), for
// benches/validator.rs: the same lines, judged the way the daemon judges them, timed here in
// node and printed as lines per second.
//
// Usage: node pi-daemon-validators.mjs DIST < plan.json   (the plan on the first line)
//   plan: {"ms": <time per repetition>, "reps": <n>, "interleaved": <bool>,
//          "cases": [{"name", "kind": "descriptor"|"frame", "line": "<JSON text>",
//                     "context": {...}}]}
//   descriptor context: {hostInstanceId, sessionId, generation}
//   frame context:      {descriptor: <descriptor object>, direction: "to-adapter"|"to-daemon"}
// Output: one JSON line per case: {"name", "rates": [lines/s per repetition]}. With
// "interleaved": true, it prints {"ready": true} once warm, then answers each input line
// {"case": i} with one repetition of case i, {"rate": lines/s}, so that the caller can
// alternate it with its own timing (both sides then see the same background load).
//
// Each call is JSON.parse of the line then the function the daemon calls on it:
// validateHostToolAdapterDescriptor for a descriptor; for a frame travelling to the daemon the
// secret scan (the runtime's own is not exported; it is a plain substring search over keys and
// strings, written here) and parseHostToolAdapterMessage; for a frame travelling to the
// adapter parseHostToolAdapterMessage. The descriptor of a frame is normalized once, outside
// the timing. Every call must accept its line (checked before timing).

import { pathToFileURL } from "node:url";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

const dist = process.argv[2] ?? process.env.PI_DAEMON_DIST;
if (!dist) {
  process.stderr.write("pi-daemon-validators: give the dist directory as argv[2] or PI_DAEMON_DIST\n");
  process.exit(2);
}
const adapter = await import(pathToFileURL(join(resolve(dist), "tool-adapter-protocol.js")).href);
// The plan is the first line of stdin.
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const first = await lines.next();
const plan = JSON.parse(first.value ?? "{}");

function containsHandle(value, handle) {
  if (typeof value === "string") return value.includes(handle);
  if (value === null || typeof value !== "object") return false;
  if (Array.isArray(value)) return value.some((v) => containsHandle(v, handle));
  for (const k in value) {
    if (k.includes(handle) || containsHandle(value[k], handle)) return true;
  }
  return false;
}

function judgeOf(c) {
  const ctx = c.context ?? {};
  if (c.kind === "descriptor") {
    const expected = { hostInstanceId: ctx.hostInstanceId, sessionId: ctx.sessionId, generation: ctx.generation };
    return (line) => {
      adapter.validateHostToolAdapterDescriptor(JSON.parse(line), expected);
      return true;
    };
  }
  const descriptor = adapter.validateHostToolAdapterDescriptor(ctx.descriptor, {});
  const handle = descriptor.binding.capabilityHandle;
  if (ctx.direction === "to-daemon") {
    return (line) => {
      const value = JSON.parse(line);
      if (containsHandle(value, handle)) return false;
      adapter.parseHostToolAdapterMessage(value, descriptor);
      return true;
    };
  }
  return (line) => {
    adapter.parseHostToolAdapterMessage(JSON.parse(line), descriptor);
    return true;
  };
}

function rate(judge, line, ms) {
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(ms * 1e6));
  let n = 0;
  let now = start;
  let sink = 0;
  while (now < end) {
    for (let i = 0; i < 64; i++) sink += judge(line) ? 1 : 0;
    n += 64;
    now = process.hrtime.bigint();
  }
  if (sink !== n) throw new Error("a line was refused during timing");
  return n / (Number(now - start) / 1e9);
}

if (plan.interleaved) {
  // Interleaved with the Rust side: warm every case up, say ready, then time one repetition
  // of case i for each request line {"case": i}, answering {"rate": lines/s}.
  const judges = plan.cases.map((c) => {
    const judge = judgeOf(c);
    judge(c.line);
    rate(judge, c.line, plan.ms);
    return judge;
  });
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  for await (const line of lines) {
    const i = JSON.parse(line).case;
    process.stdout.write(JSON.stringify({ rate: rate(judges[i], plan.cases[i].line, plan.ms) }) + "\n");
  }
  process.exit(0);
}

for (const c of plan.cases) {
  const judge = judgeOf(c);
  judge(c.line); // throws on a refusal: the bench line must be valid for 0.3.3 too
  rate(judge, c.line, plan.ms); // warm-up (JIT)
  const rates = [];
  for (let r = 0; r < plan.reps; r++) rates.push(rate(judge, c.line, plan.ms));
  process.stdout.write(JSON.stringify({ name: c.name, rates }) + "\n");
}

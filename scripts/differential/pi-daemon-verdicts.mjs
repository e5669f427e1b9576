#!/usr/bin/env node
// Differential oracle: judge documents with the validator functions of a built Pi Daemon
// 0.3.3 (its compiled `dist/` directory), so that tests/differential_pi_daemon.rs can compare
// them with pi-conform's contract.
//
// Usage: PI_DAEMON_DIST=/path/to/dist node pi-daemon-verdicts.mjs [DIST] < requests.ndjson
//
// Each input line is one request:
//   {"kind": "command"|"descriptor"|"frame"|"path",
//    "doc": "<the document's exact JSON text>"        (or "docHex": "<hex bytes>"),
//    "context": {...}}
// context: command    {hostInstanceId}
//          descriptor {hostInstanceId, sessionId, generation}
//          frame      {descriptor: <descriptor object>, direction: "to-adapter"|"to-daemon"}
//          path       {field}
// Each output line answers the request on the same line number:
//   {"verdict": "valid"} or {"verdict": "invalid", "code": ..., "field": ...}
//
// The document is decoded the way the daemon decodes a socket line (fatal UTF-8, a leading
// BOM dropped by the UTF-8 decoder, JSON.parse, the line limit), then handed to the function
// the daemon itself calls:
//   command    parseSupportedProtocolCommand(value, {expectedHostInstanceId}) — exactly the
//              options dist/server.js passes (no maxPromptChars override);
//   descriptor validateHostToolAdapterDescriptor(value, {hostInstanceId, sessionId, generation});
//   frame      what the adapter runtime does: to-daemon lines go through the secret scan, then
//              parseHostToolAdapterMessage(value, normalizedDescriptor), then the kinds a
//              daemon accepts; to-adapter frames are the daemon's own outgoing frames, checked
//              by the same parser and bounded by maxRequestBytes (LF included);
//   path       validateToolAdapterRelativePath(value, field).
// Nothing here is a rule of its own: every verdict comes from the daemon's functions.

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join, resolve } from "node:path";

const dist = process.argv[2] ?? process.env.PI_DAEMON_DIST;
if (!dist) {
  process.stderr.write("pi-daemon-verdicts: give the dist directory as PI_DAEMON_DIST or argv[2]\n");
  process.exit(2);
}
const load = (name) => import(pathToFileURL(join(resolve(dist), name)).href);
const protocol = await load("protocol.js");
const protocolV2 = await load("protocol-v2.js");
const adapter = await load("tool-adapter-protocol.js");

const FROM_ADAPTER = new Set(["bound", "result", "aborted", "revoked"]);
const TO_ADAPTER = new Set(["bind", "invoke", "abort", "revoke"]);

function refusal(error) {
  const code = typeof error?.code === "string" ? error.code : `exception:${error?.name ?? typeof error}`;
  const field = error?.details && typeof error.details.field === "string" ? error.details.field : null;
  return { verdict: "invalid", code, field };
}

function bytesOf(request) {
  if (typeof request.docHex === "string") return Buffer.from(request.docHex, "hex");
  return Buffer.from(request.doc ?? "", "utf8");
}

// One line through the daemon's own NDJSON decoder (limit excludes the LF).
function decodeLine(bytes, maxLineBytes) {
  const decoder = new protocol.NdjsonDecoder(maxLineBytes);
  const values = decoder.push(Buffer.concat([bytes, Buffer.from("\n")]));
  if (values.length !== 1) {
    throw new protocol.ProtocolValidationError("invalid_json", "not exactly one JSON text", { field: "line" });
  }
  return values[0];
}

// The secret scan of the adapter runtime (keys and strings, anywhere). Reimplemented because
// the runtime does not export it; it is a plain substring search.
function containsHandle(value, handle) {
  if (typeof value === "string") return value.includes(handle);
  if (value === null || typeof value !== "object") return false;
  if (Array.isArray(value)) return value.some((v) => containsHandle(v, handle));
  return Object.entries(value).some(([k, v]) => k.includes(handle) || containsHandle(v, handle));
}

function judge(request) {
  const context = request.context ?? {};
  const bytes = bytesOf(request);
  switch (request.kind) {
    case "command": {
      const value = decodeLine(bytes, protocol.DEFAULT_MAX_LINE_BYTES);
      protocolV2.parseSupportedProtocolCommand(value, { expectedHostInstanceId: context.hostInstanceId });
      return { verdict: "valid" };
    }
    case "descriptor": {
      const value = decodeLine(bytes, protocol.DEFAULT_MAX_LINE_BYTES);
      const expected = {};
      if (context.hostInstanceId !== undefined) expected.hostInstanceId = context.hostInstanceId;
      if (context.sessionId !== undefined) expected.sessionId = context.sessionId;
      if (context.generation !== undefined) expected.generation = context.generation;
      adapter.validateHostToolAdapterDescriptor(value, expected);
      return { verdict: "valid" };
    }
    case "frame": {
      const descriptor = adapter.validateHostToolAdapterDescriptor(context.descriptor, {});
      if (context.direction === "to-daemon") {
        const value = decodeLine(bytes, descriptor.limits.maxResponseBytes - 1);
        if (containsHandle(value, descriptor.binding.capabilityHandle)) {
          return { verdict: "invalid", code: "adapter_secret_reflected", field: "frame" };
        }
        const frame = adapter.parseHostToolAdapterMessage(value, descriptor);
        if (!FROM_ADAPTER.has(frame.kind)) return { verdict: "invalid", code: "adapter_protocol_invalid", field: "kind" };
        return { verdict: "valid" };
      }
      // The daemon's own outgoing frame: its encoder bounds it by maxRequestBytes, LF included.
      const value = decodeLine(bytes, protocol.DEFAULT_MAX_LINE_BYTES);
      if (bytes.length + 1 > descriptor.limits.maxRequestBytes) {
        return { verdict: "invalid", code: "outbound_record_too_large", field: "line" };
      }
      const frame = adapter.parseHostToolAdapterMessage(value, descriptor);
      if (!TO_ADAPTER.has(frame.kind)) return { verdict: "invalid", code: "adapter_protocol_invalid", field: "kind" };
      return { verdict: "valid" };
    }
    case "path": {
      const value = decodeLine(bytes, protocol.DEFAULT_MAX_LINE_BYTES);
      adapter.validateToolAdapterRelativePath(value, context.field ?? "path");
      return { verdict: "valid" };
    }
    default:
      return { verdict: "invalid", code: "harness:unknown_kind", field: null };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of lines) {
  if (line.length === 0) continue;
  let answer;
  try {
    answer = judge(JSON.parse(line));
  } catch (error) {
    answer = refusal(error);
  }
  out.push(JSON.stringify(answer));
  if (out.length >= 256) {
    process.stdout.write(out.join("\n") + "\n");
    out.length = 0;
  }
}
if (out.length > 0) process.stdout.write(out.join("\n") + "\n");

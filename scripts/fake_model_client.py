#!/usr/bin/env python3
"""Check `pi-conform fake-model` with the official OpenAI Python client as the real client.

Usage: fake_model_client.py BASE_URL      (e.g. http://127.0.0.1:8080/v1)

1. A streaming request whose prompt holds two TOOL lines (JSON arguments with quotes,
   escapes and non-ASCII text): the tool-call deltas are reassembled with the client's
   documented pattern (accumulate choices[0].delta.tool_calls[i].function.arguments by index)
   and must equal the intended calls (names and parsed JSON arguments).
2. A non-streaming request with the assistant's tool calls and their tool results in the
   conversation: the answer must be the summary text.
Plus a few smaller checks (models list, SDK stream helper, non-streaming tool calls).

Exit 0 and print `fake-model client check: N passed, 0 failed` when everything matches;
exit 1 on any mismatch, 2 on a usage error.
"""

import json
import sys

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("fake_model_client.py: the OpenAI Python client is not installed (pip install openai)", file=sys.stderr)
    sys.exit(2)

PASSED = 0
FAILED = 0


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {detail}")


INTENDED = [
    ("fs_read", {"path": 'docs/"quoted" name.txt', "note": "héllo wörld ✓ 日本語 🎉"}),
    ("fs_write", {"path": "out/ü.txt", "content": 'line1\nline2 "q" \\ tab\tend — ünïcødé'}),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Pi Daemon tool {name}",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    for name in ("fs_read", "fs_write")
]


def prompt():
    # Raw UTF-8 in the first line, \\u escapes in the second: both must survive verbatim.
    return (
        "Please use the tools.\n"
        f"TOOL fs_read {json.dumps(INTENDED[0][1], ensure_ascii=False)}\n"
        f"TOOL fs_write {json.dumps(INTENDED[1][1], ensure_ascii=True)}\n"
        "Thank you."
    )


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base_url = sys.argv[1]
    print(f"openai {openai.__version__} against {base_url}")
    client = OpenAI(base_url=base_url, api_key="pi-conform-no-key", max_retries=0, timeout=20.0)
    messages = [{"role": "system", "content": "You are a tool user."}, {"role": "user", "content": prompt()}]

    models = [m.id for m in client.models.list()]
    check("models.list lists pi-conform-fake", "pi-conform-fake" in models, models)

    # 1. Streaming tool calls, reassembled by index.
    stream = client.chat.completions.create(
        model="pi-conform-fake",
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    calls = {}
    fragments = {}
    finish_reason = None
    usage = None
    first_role = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if first_role is None:
            first_role = delta.role
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                entry["id"] = tc.id
            if tc.function is not None:
                if tc.function.name:
                    entry["name"] += tc.function.name
                if tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
                    fragments[tc.index] = fragments.get(tc.index, 0) + 1
        if choice.finish_reason:
            finish_reason = choice.finish_reason
    check("stream: first delta has role assistant", first_role == "assistant", first_role)
    check("stream: finish_reason tool_calls", finish_reason == "tool_calls", finish_reason)
    check("stream: two tool calls at indexes 0 and 1", sorted(calls) == [0, 1], sorted(calls))
    got = []
    for i in sorted(calls):
        try:
            args = json.loads(calls[i]["arguments"])
        except ValueError as e:
            args = f"<invalid JSON {calls[i]['arguments']!r}: {e}>"
        got.append((calls[i]["name"], args))
    check("stream: reassembled calls equal the intended ones (names, parsed args)", got == INTENDED, got)
    check(
        "stream: arguments arrived in >= 3 fragments each",
        len(fragments) == 2 and all(n >= 3 for n in fragments.values()),
        fragments,
    )
    ids = [calls[i]["id"] for i in sorted(calls)]
    check(
        "stream: call ids are call_<n>_<hash> and distinct",
        all(isinstance(x, str) and x.startswith(f"call_{n}_") for n, x in enumerate(ids)) and len(set(ids)) == 2,
        ids,
    )
    check(
        "stream: usage chunk with total = prompt + completion",
        usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0,
        usage,
    )

    # The SDK's own stream accumulator (when this client version has it) agrees.
    helper = getattr(client.chat.completions, "stream", None)
    if helper is not None:
        with helper(model="pi-conform-fake", messages=messages, tools=TOOLS) as s:
            final = s.get_final_completion()
        sdk = [(c.function.name, json.loads(c.function.arguments)) for c in final.choices[0].message.tool_calls or []]
        check("SDK stream helper: final completion has the intended calls", sdk == INTENDED, sdk)

    # Non-streaming tool calls match the streamed ones.
    plain = client.chat.completions.create(model="any-name", messages=messages, tools=TOOLS)
    pm = plain.choices[0].message
    plain_calls = [(c.function.name, json.loads(c.function.arguments), c.id) for c in pm.tool_calls or []]
    check(
        "non-stream: same calls and ids as the stream",
        plain_calls == [(n, a, i) for (n, a), i in zip(INTENDED, ids)] and plain.choices[0].finish_reason == "tool_calls",
        plain_calls,
    )

    # 2. Tool results in the conversation: the summary text.
    results = ["A" * 100, "wrote 42 bytes — ok ✓"]
    convo = messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": calls[i]["id"], "type": "function",
                 "function": {"name": calls[i]["name"], "arguments": calls[i]["arguments"]}}
                for i in sorted(calls)
            ],
        }
    ] + [{"role": "tool", "tool_call_id": calls[i]["id"], "content": results[i]} for i in sorted(calls)]
    summary = client.chat.completions.create(model="pi-conform-fake", messages=convo, tools=TOOLS)
    text = summary.choices[0].message.content
    expected = f"Tool results: 2 calls; {ids[0]}: {results[0][:80]}; {ids[1]}: {results[1][:80]}"
    check("summary: finish_reason stop, no tool calls",
          summary.choices[0].finish_reason == "stop" and not summary.choices[0].message.tool_calls,
          summary.choices[0])
    check("summary: text is the tool-results summary", text == expected, repr(text))

    print(f"fake-model client check: {PASSED} passed, {FAILED} failed")
    return 0 if FAILED == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a client error is a failed check, not a crash without a verdict
        FAILED += 1
        print(f"FAIL unexpected {type(e).__name__}: {e}")
        print(f"fake-model client check: {PASSED} passed, {FAILED} failed")
        sys.exit(1)

#!/usr/bin/env python3
"""Scores greedy tool calls of `lilims run` on the hand-written held-out requests.

    python3 scripts/tool_accuracy.py [LILIMS RUN OPTIONS...]
    python3 scripts/tool_accuracy.py --tool-format generic
    python3 scripts/tool_accuracy.py --lora examples/tools/adapter.gguf
    python3 scripts/tool_accuracy.py --data FILE.jsonl [LILIMS RUN OPTIONS...]

Each line of tests/data/tools_heldout.jsonl ({"request", "tool": name or null,
"arguments": the key arguments a correct call has}) runs as
`build/lilims run -m MODEL -p REQUEST -n 96 --temp 0 -q --tools F...` (the five
files of examples/tools, in glob order) plus the options given here, and the
call is read from stdout as lilims' parsers read it (the JSON after the
format's opening mark, or the value alone).  Printed: tool-name accuracy and
key-argument accuracy (all key arguments right: strings compared lowercased,
trimmed of spaces and final punctuation; numbers exactly) over the requests
that have a tool, and how many of those without one got a call.  MODEL:
$LILIMS_MODEL, else the cached SmolLM2-135M-Instruct Q4_1.

--data FILE (first) scores other requests instead: lines of the held-out
form, or lines scripts/finetune_tools/generate.py writes (`user`, `tool`,
`arguments`: every argument counts as key), which is how choices about an
adapter are made without looking at the held-out set.
"""
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.environ.get("LILIMS_MODEL") or os.path.join(
    os.environ.get("LILIMS_MODEL_DIR", os.path.expanduser("~/.cache/lilims/models")), "SmolLM2-135M-Instruct.Q4_1.gguf")
MARKS = re.compile(r"<tool_call>|<\|tool_call\|>|<\|python_tag\|>")


def norm(v):
    return re.sub(r"[\s.!?,;:]+$", "", v.strip()).lower() if isinstance(v, str) else v


def first_call(out):
    m = MARKS.search(out)
    body = (out[m.end():] if m else out).lstrip()
    if body[:1] not in ("{", "["):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return None
    calls = value if isinstance(value, list) else [value]
    return calls[0] if calls else None


def main():
    extra = sys.argv[1:]
    data = os.path.join(ROOT, "tests/data/tools_heldout.jsonl")
    if extra[:1] == ["--data"] and len(extra) > 1:
        data, extra = extra[1], extra[2:]
    tools = sorted(glob.glob(os.path.join(ROOT, "examples/tools/*.json")))
    with open(data, encoding="utf-8") as fh:
        rows = [json.loads(l) for l in fh if l.strip()]
    for r in rows:
        if "request" not in r:
            r["request"] = r["user"]
    names = args_ok = with_tool = false_calls = no_tool = 0
    for r in rows:
        cmd = [os.path.join(ROOT, "build/lilims"), "run", "-m", MODEL, "-p", r["request"], "-n", "96", "--temp", "0",
               "-q"] + [a for t in tools for a in ("--tools", t)] + extra
        c = first_call(subprocess.run(cmd, capture_output=True, text=True).stdout)
        if r["tool"] is None:
            no_tool += 1
            false_calls += c is not None
            continue
        with_tool += 1
        if c and c.get("name") == r["tool"]:
            names += 1
            got = c.get("arguments", c.get("parameters")) or {}
            args_ok += all(norm(got.get(k)) == norm(v) for k, v in r["arguments"].items())
    pct = lambda a, b: f"{a}/{b} ({100 * a / b:.0f}%)"
    print(f"{' '.join(extra) or '(defaults)'}: tool names {pct(names, with_tool)}, key arguments "
          f"{pct(args_ok, with_tool)}, calls on no-tool requests {false_calls}/{no_tool}")


if __name__ == "__main__":
    main()

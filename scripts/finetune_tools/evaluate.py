#!/usr/bin/env python3
"""Scores `lilims run` tool calls on a held-out set of requests.

    python evaluate.py [--heldout tests/data/tools_heldout.jsonl] [--tools examples/tools/*.json]
                       [--configs generic generic-trigger smollm2-native] [--lora adapter.gguf]
                       [--out summary.json]

Each line of the held-out file is {"request": ..., "tool": NAME or null,
"arguments": {the key arguments a correct call must have}}. Every request runs
as its own process, `lilims run -m MODEL -p REQUEST -n 96 --temp 0`, in these
configurations:
  generic          --tools F for each tool file (the output is always a call)
  generic-trigger  the same plus --trigger "<tool_call>" --trigger-close "</tool_call>"
                   (a call after the trigger, or plain text)
  smollm2-native   the tools in SmolLM2's own function-calling prompt (the system
                   prompt of the SmolLM2-Instruct model card: the tools as a JSON
                   list between <tools></tools>, calls as a JSON list inside
                   <tool_call>...</tool_call>), the whole ChatML text passed with
                   --raw -p, --json-schema for a list of calls, --trigger "<tool_call>"
  smollm2-builtin  lilims' own rendering of that format: --tools F ... --tool-format
                   smollm2 --tool-choice auto (lilims builds with --tool-format only)
The generic configurations pass --tool-format generic when lilims has the option
(its default is then the model's own format).
and each of them with "+lora" (e.g. generic-trigger+lora) adds --lora ADAPTER.
Per configuration it prints: tool-name accuracy and key-argument accuracy over
requests that have a tool, missed-call rate over the same, and false-call rate
over requests that have none.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import generate as g  # noqa: E402

DEFAULT_MODEL = os.path.join(os.environ.get("LILIMS_MODEL_DIR", os.path.expanduser("~/.cache/lilims/models")),
                             "SmolLM2-135M-Instruct.Q4_1.gguf")
BASE_CONFIGS = ["generic", "generic-trigger", "smollm2-native"]

# The system prompt of SmolLM2-Instruct's model card for function calling
# (its trailing spaces included), with the tools as json.dumps() of a list of
# {"type": "function", "function": {...}} objects.
SMOLLM2_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. \n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. \n"
    "If none of the functions can be used, point it out and refuse to answer. \n"
    "If the given question lacks the parameters required by the function, also point it out.\n"
    "\n"
    "You have access to the following tools:\n"
    "<tools>{tools}</tools>\n"
    "\n"
    "The output MUST strictly adhere to the following format, and NO other text MUST be included.\n"
    "The example format is as follows. Please make sure the parameter type is correct. If no function call "
    "is needed, please make the tool calls an empty list '[]'.\n"
    "<tool_call>[\n"
    '{"name": "func_name1", "arguments": {"argument1": "value1", "argument2": "value2"}},\n'
    "... (more tool calls as required)\n"
    "]</tool_call>")


def smollm2_native_prompt(tools, request):
    listed = json.dumps([{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                          "parameters": t["parameters"]}} for t in tools])
    return g.render_chatml(SMOLLM2_SYSTEM.replace("{tools}", listed), request)


def has_tool_formats(lilims):
    """lilims run --tool-format exists: then the tools' default format is the
    model's own (smollm2 for SmolLM2), and generic must be asked for."""
    p = subprocess.run([lilims, "run", "--help"], capture_output=True, text=True)
    return "--tool-format" in p.stdout


def command(cfg, args, tool_files, tools, request):
    base, _, lora = cfg.partition("+")
    cmd = [args.lilims, "run", "-m", args.model, "-n", str(args.n_predict), "--temp", "0", "-q",
           "-t", str(args.threads)]
    if base in ("generic", "generic-trigger", "smollm2-builtin"):
        cmd += ["-p", request]
        for f in tool_files:
            cmd += ["--tools", f]
        if base == "smollm2-builtin":
            cmd += ["--tool-format", "smollm2", "--tool-choice", "auto"]
        elif args.tool_formats:
            cmd += ["--tool-format", "generic"]
        if base == "generic-trigger":
            cmd += ["--trigger", g.TRIGGER, "--trigger-close", g.TRIGGER_CLOSE]
    elif base == "smollm2-native":
        schema = {"type": "array", "items": g.tools_schema(tools)}
        cmd += ["--raw", "-p", smollm2_native_prompt(tools, request), "--json-schema", g.dump(schema),
                "--trigger", g.TRIGGER, "--trigger-close", g.TRIGGER_CLOSE]
    else:
        raise SystemExit(f"evaluate: unknown configuration '{cfg}' (known: {', '.join(BASE_CONFIGS)}, +lora)")
    if lora:
        if lora != "lora" or not args.lora:
            raise SystemExit(f"evaluate: '{cfg}' needs --lora ADAPTER")
        cmd += ["--lora", args.lora]
    return cmd


def parse_call(cfg, stdout):
    """(name, arguments) of the call in lilims' stdout; (None, None) for no
    call; ("(invalid)", None) for a call that does not parse."""
    base = cfg.partition("+")[0]
    text = stdout
    if base != "generic":
        at = text.find(g.TRIGGER)
        if at < 0:
            return None, None
        text = text[at + len(g.TRIGGER):]
        end = text.find(g.TRIGGER_CLOSE)
        text = text[:end] if end >= 0 else text
    text = text.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return "(invalid)", None
    if base.startswith("smollm2"):
        if not isinstance(value, list):
            return "(invalid)", None
        if not value:
            return None, None  # "[]": no call
        value = value[0]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return "(invalid)", None
    return value["name"], value.get("arguments")


def norm_string(s):
    return re.sub(r"[\s.,!?;:]+$", "", s.strip()).strip().lower()


def same_value(got, want):
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(want, str):
        return isinstance(got, str) and norm_string(got) == norm_string(want)
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and got == want
    return got == want


def key_args_right(got, want):
    if not want:
        return True
    if not isinstance(got, dict):
        return False
    return all(k in got and same_value(got[k], v) for k, v in want.items())


def score(rows, preds):
    with_tool = [(r, p) for r, p in zip(rows, preds) if r.get("tool")]
    no_tool = [(r, p) for r, p in zip(rows, preds) if not r.get("tool")]
    name_ok = sum(1 for r, p in with_tool if p["name"] == r["tool"])
    args_ok = sum(1 for r, p in with_tool if p["name"] == r["tool"] and key_args_right(p["arguments"], r.get("arguments")))
    missed = sum(1 for r, p in with_tool if p["name"] is None)
    false_calls = sum(1 for r, p in no_tool if p["name"] is not None)
    pct = lambda a, b: round(100.0 * a / b, 1) if b else None
    return {"requests": len(rows), "with_tool": len(with_tool), "no_tool": len(no_tool),
            "tool_name_acc": pct(name_ok, len(with_tool)), "key_args_acc": pct(args_ok, len(with_tool)),
            "missed_call_rate": pct(missed, len(with_tool)), "false_call_rate": pct(false_calls, len(no_tool)),
            "errors": sum(1 for p in preds if p["error"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--lilims", default=os.path.join(ROOT, "build", "lilims"))
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("--heldout", default=os.path.join(ROOT, "tests", "data", "tools_heldout.jsonl"))
    ap.add_argument("--tools", nargs="+", help="tool files in lilims' order (default: examples/tools/*.json)")
    ap.add_argument("--configs", nargs="+", help="default: generic generic-trigger smollm2-native "
                    "smollm2-builtin (and each +lora with --lora)")
    ap.add_argument("--lora", help="adapter GGUF (lilims convert PEFT_DIR adapter.gguf --base BASE.gguf)")
    ap.add_argument("-n", "--n-predict", type=int, default=96)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="only the first N requests")
    ap.add_argument("--out", help="write a JSON summary (figures and every answer) here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every wrong answer")
    args = ap.parse_args()

    args.tool_formats = has_tool_formats(args.lilims)
    tool_files = args.tools or sorted(glob.glob(os.path.join(ROOT, "examples", "tools", "*.json")))
    tools = g.load_tools(tool_files)
    base_configs = BASE_CONFIGS + (["smollm2-builtin"] if args.tool_formats else [])
    configs = args.configs or (base_configs + [c + "+lora" for c in base_configs] if args.lora else base_configs)
    with open(args.heldout, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    if args.limit:
        rows = rows[:args.limit]
    summary = {"model": args.model, "lora": args.lora, "tools": tool_files, "heldout": args.heldout,
               "configs": {}}
    for cfg in configs:
        t0 = time.time()
        preds = []
        for r in rows:
            cmd = command(cfg, args, tool_files, tools, r["request"])
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                # A value that did not close within -n tokens is an attempted call.
                err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
                name, arguments = "(invalid)", None
            else:
                err = None
                name, arguments = parse_call(cfg, p.stdout)
            preds.append({"request": r["request"], "want_tool": r.get("tool"), "want_arguments": r.get("arguments"),
                          "name": name, "arguments": arguments, "stdout": p.stdout.strip(), "error": err})
            wrong = name != r.get("tool") or (r.get("tool") and not key_args_right(arguments, r.get("arguments")))
            if args.verbose and wrong:
                print(f"  [{cfg}] {r['request']!r} -> {p.stdout.strip()[:160]!r}" + (f" ({err})" if err else ""))
        s = score(rows, preds)
        s["seconds"] = round(time.time() - t0, 1)
        summary["configs"][cfg] = {"scores": s, "answers": preds}
        fmt = lambda v: "  n/a" if v is None else f"{v:5.1f}%"
        print(f"{cfg:22s} tool name {fmt(s['tool_name_acc'])}  key args {fmt(s['key_args_acc'])}  "
              f"missed calls {fmt(s['missed_call_rate'])}  false calls {fmt(s['false_call_rate'])}  "
              f"({s['with_tool']} with a tool, {s['no_tool']} without; {s['errors']} errors; {s['seconds']} s)",
              flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()

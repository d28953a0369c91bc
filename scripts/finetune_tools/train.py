#!/usr/bin/env python3
"""LoRA fine-tuning of SmolLM2-135M-Instruct on generate.py's examples, on the CPU.

    python train.py --data data.jsonl [--out /tmp/tools_lora] [--minutes 30]

The base weights come from the same GGUF lilims runs (dequantized to float by
transformers), so the adapter is trained against the weights it will be added
to. Loss is on the answer tokens only. Every example of a variant shares the
system turn (the tools, a few hundred tokens), so each step runs that prefix
once, with gradients, and the batch's requests and answers on top of its KV
cache: the same loss and gradients as full sequences, at a fraction of the
cost. The number of steps is sized from the measured time per step to fit
--minutes. At the end a held-back split of the generated data is answered
greedily (unconstrained) and scored: tool name, arguments, no-call answers.
The adapter is saved with save_pretrained (adapter_config.json and
adapter_model.safetensors), the input of `lilims convert PEFT_DIR adapter.gguf
--base BASE.gguf`.
"""
import argparse
import json
import math
import os
import random
import sys
import time

# Other jobs often share the cores: OpenMP threads that spin at barriers then
# wait for each other's time slices (a step was 4-8x slower with two spinning
# threads beside a build than with one thread); passive waiting avoids most of it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as g  # noqa: E402

DEFAULT_MODEL = os.path.join(os.environ.get("LILIMS_MODEL_DIR", os.path.expanduser("~/.cache/lilims/models")),
                             "SmolLM2-135M-Instruct.Q4_1.gguf")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def log(msg):
    print(msg, flush=True)


def load_model(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    return model, tok


class Encoder:
    """Token ids as lilims makes them: each ChatML piece encoded on its own."""

    def __init__(self, tok):
        self.tok = tok
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")

    def ids(self, text):
        return self.tok(text, add_special_tokens=False)["input_ids"] if text else []

    def prefix(self, system):
        """The system turn and the user turn's opening: shared by a variant's examples."""
        return [i for text, _ in g.chatml_segments(system, "")[:4] for i in self.ids(text)]

    def request(self, user):
        """The user's text, its turn's end and the assistant's opening."""
        return [i for text, _ in g.chatml_segments("", user)[4:] for i in self.ids(text)]


def expand_cache(cache, batch, config):
    """A new cache holding `cache`'s rows repeated for each of `batch` sequences
    (expand keeps the autograd graph: every row's gradient flows back to the prefix)."""
    from transformers import DynamicCache
    out = DynamicCache(config=config)
    for i, layer in enumerate(cache.layers):
        out.update(layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1), i)
    return out


def decoder_of(model):
    """The LlamaModel under PEFT's wrappers (no LM head: the prefix needs no logits)."""
    return model.get_base_model().model


def train_step(model, prefix_ids, batch, config):
    """One step on examples sharing `prefix_ids`; returns the loss (a tensor)."""
    B = len(batch)
    pre = decoder_of(model)(input_ids=torch.tensor([prefix_ids]), use_cache=True)
    cache = expand_cache(pre.cache, B, config)
    L = max(len(e["req"]) + len(e["ans"]) for e in batch)
    ids = torch.zeros((B, L), dtype=torch.long)
    labels = torch.full((B, L), -100, dtype=torch.long)
    mask = torch.zeros((B, len(prefix_ids) + L), dtype=torch.long)
    mask[:, :len(prefix_ids)] = 1
    for r, e in enumerate(batch):
        seq = e["req"] + e["ans"]
        ids[r, :len(seq)] = torch.tensor(seq)
        labels[r, len(e["req"]):len(seq)] = torch.tensor(e["ans"])
        mask[r, len(prefix_ids):len(prefix_ids) + len(seq)] = 1
    out = model(input_ids=ids, attention_mask=mask, cache=cache, labels=labels)
    return out.loss


def parse_answer(text, variant):
    """(tool name, arguments) of the call in a generated answer, or (None, None)."""
    if variant == "trigger":
        at = text.find(g.TRIGGER)
        if at < 0:
            return None, None
        text = text[at + len(g.TRIGGER):]
        end = text.find(g.TRIGGER_CLOSE)
        text = text[:end] if end >= 0 else text
    text = text.replace(g.IM_END, "").strip()
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[text.find("{"):]) if "{" in text else (None, 0)
    except json.JSONDecodeError:
        return "(invalid)", None
    if not isinstance(obj, dict):
        return "(invalid)", None
    return obj.get("name", "(invalid)"), obj.get("arguments")


@torch.no_grad()
def greedy(model, prefix_cache, prefix_len, req, im_end, max_new=64):
    """Greedy continuation of a request on a prefix cache (cropped back after)."""
    out = model(input_ids=torch.tensor([req]), cache=prefix_cache, use_cache=True)
    new = []
    for _ in range(max_new):
        t = int(out.logits[0, -1].argmax())
        if t == im_end:
            break
        new.append(t)
        out = model(input_ids=torch.tensor([[t]]), cache=prefix_cache, use_cache=True)
    prefix_cache.crop(prefix_len - prefix_cache.get_seq_length())  # a negative count drops tokens
    return new


@torch.no_grad()
def evaluate_heldback(model, tok, enc, examples, prefixes, label):
    model.eval()
    caches = {}
    for sys_text, p in prefixes.items():
        caches[sys_text] = (decoder_of(model)(input_ids=torch.tensor([p]), use_cache=True).cache, len(p))
    n_call = n_name = n_args = n_none = n_false = n_missed = n_none_ok = 0
    t0 = time.time()
    shown = 0
    for e in examples:
        cache, plen = caches[e["system"]]
        new = greedy(model, cache, plen, e["req"], enc.im_end)
        text = tok.decode(new)
        name, args = parse_answer(text, e["variant"])
        if e["tool"] is None:
            n_none += 1
            if name is None:
                n_none_ok += 1
            else:
                n_false += 1
        else:
            n_call += 1
            if name is None:
                n_missed += 1
            if name == e["tool"]:
                n_name += 1
                if args == e["arguments"]:
                    n_args += 1
        if (name != e["tool"] or (e["tool"] and args != e["arguments"])) and shown < 8:
            shown += 1
            log(f"  miss: [{e['variant']}] {e['user']!r} -> {text!r}")
    pct = lambda a, b: 100.0 * a / b if b else float("nan")
    res = {"examples": len(examples), "calls": n_call, "tool_name_acc": pct(n_name, n_call),
           "arguments_acc": pct(n_args, n_call), "missed_call_rate": pct(n_missed, n_call),
           "no_tool": n_none, "no_tool_acc": pct(n_none_ok, n_none), "false_call_rate": pct(n_false, n_none),
           "seconds": round(time.time() - t0, 1)}
    log(f"{label}: tool name {res['tool_name_acc']:.1f}% and all arguments {res['arguments_acc']:.1f}% "
        f"of {n_call} calls; missed calls {res['missed_call_rate']:.1f}%; no-tool answered in text "
        f"{res['no_tool_acc']:.1f}% of {n_none} (false calls {res['false_call_rate']:.1f}%) "
        f"[{res['seconds']} s]")
    model.train()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="JSONL from generate.py")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="base GGUF (default: the cached SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--out", default="/tmp/tools_lora", help="PEFT adapter directory (default /tmp/tools_lora)")
    ap.add_argument("--minutes", type=float, default=30, help="time for the training steps (default 30)")
    ap.add_argument("--epochs", type=float, default=2, help="at most this many passes over the data")
    ap.add_argument("--steps", type=int, help="this many steps, whatever the time (default: sized to --minutes)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("-r", "--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--dropout", type=float, default=0.05)
    ap.add_argument("--heldback", type=int, default=80, help="generated examples kept out of training and scored")
    ap.add_argument("--eval-base", action="store_true", help="also score the base model on the held-back split")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.time()
    log(f"seed {args.seed}, {args.threads} threads, torch {torch.__version__}")

    with open(args.data, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    model, tok = load_model(args.model)
    enc = Encoder(tok)
    prefixes = {}
    for e in rows:
        if e["system"] not in prefixes:
            prefixes[e["system"]] = enc.prefix(e["system"])
        e["req"] = enc.request(e["user"])
        e["ans"] = enc.ids(e["answer"])
    # The held-back split: requests whose text appears nowhere in training.
    rng = random.Random(args.seed)
    texts = sorted({e["user"].lower() for e in rows})
    rng.shuffle(texts)
    held_texts, held = set(), []
    for t in texts:
        if len(held) >= args.heldback:
            break
        held_texts.add(t)
        held += [e for e in rows if e["user"].lower() == t]
    train = [e for e in rows if e["user"].lower() not in held_texts]
    log(f"{len(rows)} examples: {len(train)} to train, {len(held)} held back; "
        f"prefix tokens {sorted(len(p) for p in prefixes.values())}; "
        f"answer tokens mean {sum(len(e['ans']) for e in train) / len(train):.1f}")

    from peft import LoraConfig, get_peft_model
    cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=args.dropout,
                     target_modules=TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(model, cfg)
    model.print_trainable_parameters()
    if args.eval_base:
        with model.disable_adapter():
            evaluate_heldback(model, tok, enc, held, prefixes, "base model, held-back split")
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)

    def batches():
        """Batches of one variant each (one shared prefix), in random order."""
        by_sys = {}
        for e in train:
            by_sys.setdefault(e["system"], []).append(e)
        out = []
        for sys_text, group in by_sys.items():
            rng.shuffle(group)
            out += [(sys_text, group[i:i + args.batch]) for i in range(0, len(group), args.batch)]
        rng.shuffle(out)
        return out

    # The learning rate warms up over 10 steps, then follows a cosine down to
    # a tenth, over the steps of --steps or else over the time of --minutes
    # (other jobs share the cores, so the time per step drifts: the schedule
    # follows the clock and training stops when the time is up).
    plan = []
    step = 0
    warmup = 10
    budget = args.minutes * 60
    epoch_steps = int(args.epochs * math.ceil(len(train) / args.batch))
    max_steps = min(args.steps, epoch_steps) if args.steps else epoch_steps
    t_train = time.time()
    loss_avg = None
    while step < max_steps:
        elapsed = time.time() - t_train
        if not args.steps and elapsed >= budget:
            break
        if not plan:
            plan = batches()
        sys_text, batch = plan.pop()
        progress = step / max_steps if args.steps else max(step / max_steps, elapsed / budget)
        lr = args.lr * (min(1.0, (step + 1) / warmup) if step < warmup
                        else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
        for group in opt.param_groups:
            group["lr"] = lr
        loss = train_step(model, prefixes[sys_text], batch, model.config)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        loss_avg = loss.item() if loss_avg is None else 0.9 * loss_avg + 0.1 * loss.item()
        if step == 3:
            per_step = (time.time() - t_train) / step
            fit = min(max_steps, int(budget / per_step)) if not args.steps else max_steps
            log(f"measured {per_step:.2f} s per step of {args.batch} ({per_step / args.batch:.3f} s per example): "
                f"about {fit} steps ({fit * args.batch} examples, {fit * args.batch / len(train):.2f} epochs) "
                f"in {fit * per_step / 60:.1f} minutes")
        if step % 10 == 0 or step == 1:
            el = time.time() - t_train
            log(f"step {step} loss {loss.item():.4f} (avg {loss_avg:.4f}) lr {lr:.2e} "
                f"elapsed {el / 60:.1f} min ({el / step / args.batch:.2f} s per example)")
    train_seconds = time.time() - t_train
    log(f"trained {step} steps ({step * args.batch} examples) in {train_seconds / 60:.1f} min; "
        f"final loss avg {loss_avg:.4f}")
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    log(f"saved the adapter to {args.out}")
    res = evaluate_heldback(model, tok, enc, held, prefixes, "adapter, held-back split of the generated data")
    res.update({"steps": step, "batch": args.batch, "train_minutes": round(train_seconds / 60, 1),
                "total_minutes": round((time.time() - t_start) / 60, 1), "final_loss": loss_avg,
                "rank": args.rank, "alpha": args.alpha, "lr": args.lr, "seed": args.seed})
    with open(os.path.join(args.out, "train_summary.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    log(f"total {res['total_minutes']} min")


if __name__ == "__main__":
    main()

"""What a model gets right of BFCL-Calls' ground truth, token by token, under teacher forcing.

``python -m envs.bfcl.diagnose MODEL_DIR`` feeds the ground-truth answers of ``--tasks`` train
and ``--tasks`` val tasks of ``--category`` (default ``simple_python``) to the model and counts,
for each answer token, whether the model's most likely next token is the right one. Tokens are
grouped by the part of the call they spell: the function name, the argument names, the values, and
the rest (the tool format's syntax). ``name whole`` is the share of tasks whose whole function name
comes out right, ``copyable`` the accuracy on name / argument / value tokens that also occur in the
prompt. A model that copies from the function docs and the question scores the same on train and val
tasks; one that only learned the format scores high on syntax and low on names.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from envs.bfcl import policies
from envs.bfcl.calls import BfclCallsEnv, task_by_id

PARTS = ("name", "arg names", "values", "syntax")


def _spans(text: str, calls) -> dict[str, list[tuple[int, int]]]:
    """Character spans of the function names, argument names and values in an answer's text."""
    spans: dict[str, list[tuple[int, int]]] = {"name": [], "arg names": [], "values": []}
    at = 0
    for call in calls:
        start = text.find(call.name, at)
        if start < 0:
            continue
        spans["name"].append((start, start + len(call.name)))
        at = start + len(call.name)
        for key, value in call.arguments.items():
            found = [(i, q) for q in (f'"{key}"', f"'{key}'", f"{key}=") if (i := text.find(q, at)) >= 0]
            if not found:
                continue
            k, quoted = min(found)  # the key as the format writes it, never a letter of "arguments"
            k += quoted.index(key)
            spans["arg names"].append((k, k + len(key)))
            at = k + len(key)
            for shown in (json.dumps(value), repr(value), str(value)):
                v = text.find(shown, at)
                if v >= 0:
                    spans["values"].append((v, v + len(shown)))
                    at = v + len(shown)
                    break
    return spans


def _part(mid: float, spans: dict[str, list[tuple[int, int]]]) -> str:
    return next((p for p, ss in spans.items() if any(a <= mid < b for a, b in ss)), "syntax")


def _tokens(tokenizer, messages: list[dict], tools: list[dict], answer: str) -> tuple[list[int], int]:
    """The prompt as the chat template renders it, then the answer and the end of the turn, as the
    rollout engine lays out a demonstration; returns (token ids, index of the first answer token)."""
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    head = tokenizer.encode(prompt, add_special_tokens=False)
    return head + tokenizer.encode(answer + tokenizer.eos_token, add_special_tokens=False), len(head)


def diagnose(model_dir: str, category: str, tasks: int, tool_format: str = "hermes") -> dict[str, dict[str, list[int]]]:
    """{split: {part: [right, total]}} over ``tasks`` ground-truth answers of each split."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = {}
    for split in ("train", "val"):
        env = BfclCallsEnv(split=split, categories=[category], tool_format=tool_format)
        counts = {p: [0, 0] for p in (*PARTS, "name whole", "copyable")}
        for seed in range(tasks):
            messages, info = env.reset(seed=seed)
            ids, first = _tokens(tok, messages, info["tools"], policies.replay(messages, tool_format=tool_format))
            with torch.no_grad():
                predicted = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()
            answer, prompt = ids[first:], set(ids[:first])
            text, bounds = "", []
            for j in range(len(answer)):  # each answer token's character span
                piece = tok.decode(answer[: j + 1])
                bounds.append((len(text), len(piece)))
                text = piece
            spans = _spans(text, policies._truth_calls(task_by_id()[info["task_id"]]))
            name_right = True
            for j, (a, b) in enumerate(bounds):
                right = int(predicted[first + j - 1] == answer[j])
                part = _part((a + b) / 2, spans)
                counts[part][0] += right
                counts[part][1] += 1
                if part == "name":
                    name_right &= bool(right)
                if part != "syntax" and answer[j] in prompt:
                    counts["copyable"][0] += right
                    counts["copyable"][1] += 1
            counts["name whole"][0] += int(name_right and bool(spans["name"]))
            counts["name whole"][1] += 1
        env.close()
        out[split] = counts
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.bfcl.diagnose", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model directory (e.g. runs/bfcl_calls/sft_model)")
    ap.add_argument(
        "--tool-format", default="hermes", help="the format the model was trained in (the recipe's: hermes)"
    )
    ap.add_argument("--category", default="simple_python")
    ap.add_argument("--tasks", type=int, default=50, help="ground-truth answers per split")
    args = ap.parse_args(argv)
    if not (Path(args.model) / "config.json").exists():
        ap.error(f"no model at {args.model} (relative to {Path.cwd()})")
    result = diagnose(args.model, args.category, args.tasks, args.tool_format)
    print(f"teacher-forced next-token accuracy on {args.category} ground truth ({args.tasks} tasks per split)")
    print(f"{'split':6} " + " ".join(f"{p:>16}" for p in (*PARTS, "copyable", "name whole")))
    for split, counts in result.items():
        cells = [f"{r / max(n, 1):.2f} ({r}/{n})" for r, n in (counts[p] for p in (*PARTS, "copyable", "name whole"))]
        print(f"{split:6} " + " ".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Part 2 of ``bench/vs_trl.py``: the update on multi-turn tool trajectories, TRL's vs ours.

TRL's ``GRPOTrainer`` cannot sample these episodes here (its tool loop needs a model that writes
parseable tool calls; the tiny checkpoint does not), so the comparison is of the update only, on
the real multi-turn trajectories of ``bench/data/trajectories.json`` (quickstart Arithmetic with
its python tool, Maze, ShellTask; 16 rows each, 2 tasks x 8 samples), each given to both sides as
its trainer sees such rows:

- TRL: a row is its prompt (the tokens before the first sampled token, left-padded) and one
  "completion" (everything after, right-padded), with ``tool_mask`` 0 on the tool / env tokens:
  what GRPOTrainer builds from a tool-calling episode. One ``compute_loss`` over all rows
  (``per_device_train_batch_size`` rows in one micro-batch), backward, gradient clipping at 1.0
  and AdamW: TRL's own update path, called on the trainer part 1 built.
- ours: the same rows as our trainer batches them (right-padded, the sampler's loss mask), one
  ``Learner.update`` of the run part 1 built (its features: ``OURS_FAST``).

Both train on the same tokens with the same per-row advantages (random, fixed), one optimizer step.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parent / "data" / "trajectories.json"


def load_rows() -> dict[str, list[dict]]:
    rows = json.loads(DATA.read_text())["trajectories"]
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["env"], []).append(r)
    return out


def trl_inputs(rows: list[dict], advantages_B: torch.Tensor) -> dict[str, torch.Tensor]:
    """GRPOTrainer's inputs for the rows: left-padded prompts, right-padded completions, tool mask."""
    splits = [r["loss_mask"].index(1) for r in rows]
    P = max(splits)
    C = max(len(r["token_ids"]) - k for r, k in zip(rows, splits, strict=True))
    B = len(rows)
    prompt_ids, prompt_mask = torch.zeros(B, P, dtype=torch.long), torch.zeros(B, P, dtype=torch.long)
    comp_ids, comp_mask = torch.zeros(B, C, dtype=torch.long), torch.zeros(B, C, dtype=torch.long)
    tool_mask = torch.zeros(B, C, dtype=torch.long)
    for b, (r, k) in enumerate(zip(rows, splits, strict=True)):
        ids, n = r["token_ids"], len(r["token_ids"])
        prompt_ids[b, P - k :], prompt_mask[b, P - k :] = torch.tensor(ids[:k]), 1
        comp_ids[b, : n - k], comp_mask[b, : n - k] = torch.tensor(ids[k:]), 1
        tool_mask[b, : n - k] = torch.tensor(r["loss_mask"][k:])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": comp_ids,
        "completion_mask": comp_mask,
        "tool_mask": tool_mask,
        "advantages": advantages_B,
        "old_per_token_logps": None,
        "ref_per_token_logps": None,
        "num_items_in_batch": (comp_mask * tool_mask).sum(),
    }


def trl_update(trainer, inputs: dict) -> float:
    """TRL's update: compute_loss, backward, clip at max_grad_norm, AdamW; seconds."""
    model = trainer.model
    model.train()
    t0 = time.perf_counter()
    loss = trainer.compute_loss(model, inputs)
    trainer.accelerator.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def ours_update(trainer, batch, advantages_BT: torch.Tensor) -> float:
    t0 = time.perf_counter()
    trainer.learner.update(batch, advantages_BT, trainer.parts)
    return time.perf_counter() - t0


def compare(trl_trainer, ours_trainer, steps: int) -> None:
    """Per env: median seconds of one update on its 16 rows, TRL vs ours, rounds interleaved."""
    from bench.packing_throughput import env_batch

    vocab = int(ours_trainer.components.model.config.vocab_size)
    print(
        f"\nmulti-turn (update only, {DATA.parent.name}/{DATA.name}; TRL cannot sample these episodes here): "
        f"{steps} timed updates per side after one warm-up, interleaved"
    )
    print(
        f"{'env':<11} {'rows':>4} {'tokens':>11} {'turns':>5} {'trained':>7} {'trl s':>7} {'ours s':>7} {'speedup':>7}"
    )
    for env, rows in load_rows().items():
        if max(max(r["token_ids"]) for r in rows) >= vocab:
            raise SystemExit(f"{env}: trajectories.json was made with another tokenizer than the model's")
        batch, adv_BT = env_batch(rows)
        adv_B = adv_BT.sum(1) / adv_BT.ne(0).sum(1).clamp(min=1)  # one advantage per row, the same on both sides
        adv_BT = adv_B[:, None] * batch.loss_mask_BT
        inputs = trl_inputs(rows, adv_B)
        times: dict[str, list[float]] = {"trl": [], "ours": []}
        for k in range(steps + 1):
            t_trl, t_ours = trl_update(trl_trainer, inputs), ours_update(ours_trainer, batch, adv_BT)
            if k:
                times["trl"].append(t_trl)
                times["ours"].append(t_ours)
        lengths = [len(r["token_ids"]) for r in rows]
        trl_s, ours_s = statistics.median(times["trl"]), statistics.median(times["ours"])
        print(
            f"{env:<11} {len(rows):>4} {min(lengths):>5}-{max(lengths):<5} {max(r['turns'] for r in rows):>5} "
            f"{int(batch.loss_mask_BT.sum()):>7} {trl_s:>7.3f} {ours_s:>7.3f} {trl_s / ours_s:>7.2f}"
        )
    print(" (tokens: row lengths; trained: tokens with loss; s: median seconds per update)")

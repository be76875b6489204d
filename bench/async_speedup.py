"""Asynchronous (max_staleness=1) vs synchronous training on episodes with long-tailed tool latency.

Workload: ``agent_rl/ToolLatency-v0`` around ``agent_rl/Arithmetic-v0`` (difficulty 2, python tool in
the process sandbox, up to 3 turns): every env step first waits 50 ms to 2 s (Pareto, alpha 1,
truncated: median ~0.1 s, one step in ~40 over 1 s), the shape of real sandbox / tool calls. Both
runs train the same warm-started tiny model with GRPO from the same seed, 4 prompts x 8 samples
per step, the same number of steps, so the same number of trained samples (counted and printed).

* sync: ``distributed.max_staleness=0``: rollout, then train, then sync.
* async: ``distributed.max_staleness=1``: the next step's episodes run while the learner trains;
  no trained sample is more than one version old (checked on every sample), new weights reach the
  sampler at turn boundaries.

Both sample on the same backend (``--backend ray``, the default: one Ray rollout worker process
beside the driver, so sampling and training can use different cores; ``local``: a thread in the
training process, where Python's GIL serialises most of the small model's work).

Runs are done in one process, in the order sync, async, then async, sync for ``--rounds 2`` (a
load drift on a shared machine hits both alike); the wall time of each is the time of its
``Trainer.step`` calls. Prints both reward curves, the final rewards (mean of the last third of
the steps, with its standard error over those steps) and ``speedup = sync_s / async_s``.

    python bench/async_speedup.py [--steps 16] [--rounds 1] [--backend ray|local] [--model DIR] [--threads 1]

Without ``--model`` a tiny model is built and warm-started by the quickstart's SFT on the weak
teacher (cached under ``runs/bench_async``; about 0.4 held-out success), so rewards are neither 0
nor 1 and the curves mean something.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 16
WORKLOAD = [
    "sandbox.backend=process",
    "env.id=agent_rl/ToolLatency-v0",
    "env.plugins=[agent_rl.distributed.latency_env]",
    "env.options={inner: agent_rl/Arithmetic-v0, inner_options: {difficulty: [2], max_turns: 3},"
    " latency_min_s: 0.05, latency_max_s: 2.0, tail_alpha: 1.0}",
    "rollout.group_size=8",
    "rollout.max_turns=3",
    "rollout.max_new_tokens=40",
    "rollout.concurrency=128",  # room for two steps in flight (the synchronous loop never has more than one)
    "trainer.prompts_per_step=4",
    "distributed.ray.num_rollout_workers=1",
    "distributed.ray.sandbox_pools=false",
    "trainer.eval_every=0",
    "tracking.tensorboard=false",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


def warm_started_model(root: Path) -> Path:
    """A tiny model after the quickstart's SFT on the weak teacher (built once, then reused)."""
    from agent_rl.config import load_config
    from agent_rl.sft import sft
    from agent_rl.tiny import init_tiny

    out = root / "sft_model"
    if (out / "config.json").exists():
        return out
    tiny = root / "tiny"
    if not (tiny / "config.json").exists():
        init_tiny(tiny, seed=0)
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [f"model.path={tiny}", f"run.root={root}", f"sft.out={out}"])
    cfg.tracking.progress = False
    sft(cfg, log=print)
    return out


def run(mode: str, model: Path, steps: int, root: Path, backend: str) -> dict:
    from agent_rl.config import load_config
    from agent_rl.distributed import staleness
    from agent_rl.trainer import Trainer

    k = {"sync": 0, "async": 1}[mode]
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [f"model.path={model}", f"run.root={root}", f"run.name={mode}", f"trainer.steps={steps}", f"distributed.max_staleness={k}",
         f"distributed.backend={backend}", *WORKLOAD],
    )
    trainer = Trainer(cfg, log=lambda *a: None)
    handed, stale = [], []
    inner = trainer.rollouts.rollout

    def rollout(step: int, round_: int, n: int):
        out = inner(step, round_, n)
        handed.append(len(out))
        stale.extend(staleness(t, trainer.learner.version) for t in out if t.turns_N)
        return out

    trainer.rollouts.rollout = rollout
    rewards = []
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            m = trainer.step(step)
            rewards.append(m["rollout/reward_mean"])
    finally:
        trainer.rollouts.close()
    wall = time.perf_counter() - t0
    assert all(s <= k for s in stale), f"{mode}: a sample staler than {k} was trained on"
    print(f"{mode}: {wall:.1f} s for {steps} steps, rewards {[round(x, 3) for x in rewards]}", flush=True)
    return {"mode": mode, "wall_s": wall, "rewards": rewards, "samples": sum(handed), "max_staleness_seen": max(stale, default=0)}


def final(r: dict) -> tuple[float, float]:
    """Mean reward of the last third of the steps, and its standard error (over those steps)."""
    tail = r["rewards"][-max(1, len(r["rewards"]) // 3) :]
    se = statistics.stdev(tail) / math.sqrt(len(tail)) if len(tail) > 1 else float("nan")
    return statistics.fmean(tail), se


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--rounds", type=int, default=1, help="2: sync, async, async, sync")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--backend", choices=["ray", "local"], default="ray", help="where both runs sample (distributed.backend)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared, loaded machine)")
    ap.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_async")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    model = args.model or warm_started_model(args.root)
    order = ["sync", "async", "async", "sync"][: 2 * args.rounds] if args.rounds <= 2 else ["sync", "async"] * args.rounds
    results = [run(mode, model, args.steps, args.root, args.backend) for mode in order]
    by = {m: [r for r in results if r["mode"] == m] for m in ("sync", "async")}
    print(f"\nworkload: {args.steps} steps x 32 episodes, tool latency 50 ms - 2 s (Pareto a=1), backend {args.backend}, model {model}")
    for r in results:
        f, se = final(r)
        curve = " ".join(f"{x:.2f}" for x in r["rewards"])
        print(f"{r['mode']:>5}: {r['wall_s']:7.1f} s  samples {r['samples']}  max staleness {r['max_staleness_seen']}  "
              f"final reward {f:.3f} +- {se:.3f}  curve [{curve}]")
    sync_s = sum(r["wall_s"] for r in by["sync"])
    async_s = sum(r["wall_s"] for r in by["async"])
    assert sum(r["samples"] for r in by["sync"]) == sum(r["samples"] for r in by["async"]), "unequal trained samples"
    fs = [final(r) for r in by["sync"]]
    fa = [final(r) for r in by["async"]]
    sync_final, async_final = statistics.fmean(f for f, _ in fs), statistics.fmean(f for f, _ in fa)
    noise = 2 * math.sqrt(statistics.fmean(se**2 for _, se in fs) + statistics.fmean(se**2 for _, se in fa))
    print(f"final reward: sync {sync_final:.3f}, async {async_final:.3f} (2 standard errors: {noise:.3f}); "
          f"async not worse within noise: {async_final >= sync_final - noise}")
    print(f"speedup = sync_s / async_s = {sync_s:.1f} / {async_s:.1f} = {sync_s / async_s:.2f}x")


if __name__ == "__main__":
    main()

"""Asynchronous (max_staleness=1) vs synchronous training on episodes with long-tailed tool latency.

Workload: ``agent_rl/ToolLatency-v0`` around ``agent_rl/Arithmetic-v0`` (difficulty 2, up to 3
turns): every env step first waits 50 ms to 2 s (Pareto, alpha 1, truncated: median ~0.1 s, one step
in ~40 over 1 s; ``asyncio.sleep``, no CPU), the shape of real sandbox / tool calls, and then runs
the arithmetic env's real python tool in the ``process`` sandbox (two python processes per call,
~60-100 ms of CPU on the same machine). Both runs train the same warm-started tiny model with GRPO
from the same seed, 4 prompts x 8 samples per step, the same number of steps, so the same number of
trained samples (counted and asserted), and the same loss: PPO-clip with truncated importance
weights of the learner's against the sampler's logprobs (``rollout_is``, token level, threshold 2),
the correction docs/distributed.md prescribes for asynchronous samples; on synchronous samples the
weights are 1 and the run is token for token the one without it.

* sync: ``distributed.max_staleness=0``: rollout, then train, then sync.
* async: ``distributed.max_staleness=1``: the next step's episodes run while the learner trains;
  no trained sample is more than one version old (checked on every sample), new weights reach the
  sampler at turn boundaries. ``--overprovision x`` adds ``distributed.overprovision_groups=x``.

Both sample on the same backend (``--backend ray``, the default: one Ray rollout worker process
beside the driver, so sampling and training can use different cores; ``local``: a thread in the
training process, where Python's GIL serialises most of the small model's work).

Runs are done in one process, in the order sync, async, then async, sync for ``--rounds 2`` (a
load drift on a shared machine hits both alike); the wall time of each is the time of its
``Trainer.step`` calls. Prints both reward curves, the final rewards (mean of the last third of
the steps, with its standard error over those steps), ``speedup = sync_s / async_s``, the load
average, and per run where a step's time went (``timeline_summary``): the trainer's wait in
``source.rollout`` and the rest of the step, the span / spread / straggler of the step's groups,
the sampler's busy share and batch size, and the CPU seconds per step of this process, the
rollout worker, the tool processes and Ray's daemons, from which it prints the shortest step any
overlap could reach on this machine's cores.

    python bench/async_speedup.py [--steps 16] [--rounds 1] [--backend ray|local] [--model DIR] [--threads 1] [--overprovision 0]

Without ``--model`` a tiny model is built and warm-started by the quickstart's SFT on the weak
teacher (cached under ``runs/bench_async``; about 0.4 held-out success), so rewards are neither 0
nor 1 and the curves mean something.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 16
WORKLOAD = [
    "sandbox.backend=process",
    "env.id=agent_rl/ToolLatency-v0",
    "env.plugins=[agent_rl.distributed.latency_env]",
    (
        "env.options={inner: agent_rl/Arithmetic-v0, inner_options: {difficulty: [2], max_turns: 3},"
        " latency_min_s: 0.05, latency_max_s: 2.0, tail_alpha: 1.0}"
    ),
    "rollout.group_size=8",
    "rollout.max_turns=3",
    "rollout.max_new_tokens=40",
    "rollout.concurrency=128",  # room for two steps in flight (the synchronous loop never has more than one)
    "trainer.prompts_per_step=4",
    # truncated importance weights against the sampler's logprobs (docs/distributed.md): what asynchronous
    # training should use; synchronous samples have weight 1 (the same curve as without)
    "algorithm.loss_options.rollout_is={level: token, mode: truncate, threshold: 2.0}",
    "distributed.ray.num_rollout_workers=1",
    "distributed.ray.sandbox_pools=false",
    "trainer.eval_every=0",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


def warm_started_model(root: Path) -> Path:
    """A tiny model after the quickstart's SFT on the weak teacher (built once, then reused)."""
    from agent_rl.commands.sft import sft
    from agent_rl.config import load_config
    from agent_rl.run.envloader import init_tiny

    out = root / "sft_model"
    if (out / "config.json").exists():
        return out
    tiny = root / "tiny"
    if not (tiny / "config.json").exists():
        init_tiny(tiny, seed=0)
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml", [f"model.path={tiny}", f"run.root={root}", f"sft.out={out}"]
    )
    cfg.tracking.progress = False
    sft(cfg, log=print)
    return out


def run(
    mode: str, model: Path, steps: int, root: Path, backend: str, extra: tuple[str, ...] = (), progress=None
) -> dict:
    """One run of ``steps`` steps; ``progress`` (a TaskProgress over all runs' steps) advances per step."""
    from agent_rl.config import load_config
    from agent_rl.distributed import staleness
    from agent_rl.train.trainer import Trainer

    k = {"sync": 0, "async": 1}[mode]
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.path={model}",
            f"run.root={root}",
            f"run.name={mode}",
            f"trainer.steps={steps}",
            f"distributed.max_staleness={k}",
            f"distributed.backend={backend}",
            *WORKLOAD,
            *extra,
        ],
    )
    trainer = Trainer(cfg, log=lambda *a: None)
    handed, stale, waits = [], [], {}
    inner = trainer.rollouts.rollout

    def rollout(step: int, round_: int, n: int):
        t = time.perf_counter()
        out = inner(step, round_, n)
        waits[step] = waits.get(step, 0.0) + time.perf_counter() - t
        handed.append(len(out))
        stale.extend(staleness(t, trainer.learner.version) for t in out if t.turns_N)
        return out

    trainer.rollouts.rollout = rollout
    source = trainer.rollouts
    if hasattr(source, "timeline"):
        source.timeline = []
    rewards, metrics = [], []
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    try:
        for step in range(steps):
            m = trainer.step(step)
            rewards.append(m["rollout/reward_mean"])
            metrics.append(m)
            if progress is not None:
                progress.advance(
                    {
                        "step": f"{step + 1}/{steps}",
                        "reward": m["rollout/reward_mean"],
                        "run s": time.perf_counter() - t0,
                    }
                )
        cpu1 = cpu_seconds()
    finally:
        trainer.rollouts.close()
    wall = time.perf_counter() - t0
    timeline = timeline_summary(getattr(source, "timeline", None) or [], metrics, wall, steps)
    timeline["wait"] = sum(waits.values()) / steps
    timeline["train"] = timeline["step"] - timeline["wait"]
    timeline.update({f"cpu {k}": (cpu1[k] - cpu0[k]) / steps for k in cpu0})
    assert all(s <= k for s in stale), f"{mode}: a sample staler than {k} was trained on"
    print(
        f"{mode}: {wall:.1f} s for {steps} steps (load average {os.getloadavg()[0]:.1f}), rewards {[round(x, 3) for x in rewards]}",
        flush=True,
    )
    return {
        "mode": mode,
        "wall_s": wall,
        "rewards": rewards,
        "samples": sum(handed),
        "max_staleness_seen": max(stale, default=0),
        "timeline": timeline,
    }


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far (user + system, from /proc) of this process (learner, buffer), the rollout
    worker actors, the tool processes they ran (waited-for children) and Ray's own daemons."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"driver": 0.0, "sampler": 0.0, "tools": 0.0, "ray": 0.0}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own, children = (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
        if int(pid) == os.getpid():
            out["driver"] += own
            out["tools"] += children
        elif "RolloutActor" in cmd:
            out["sampler"] += own
            out["tools"] += children
        elif any(
            k in cmd
            for k in ("raylet", "gcs_server", "dashboard/agent.py", "runtime_env/agent", "log_monitor", "ray::IDLE")
        ):
            out["ray"] += own
    return out


def timeline_summary(events: list, metrics: list[dict], wall: float, steps: int) -> dict[str, float]:
    """Where a run's wall time went, per step (means over the steps; ``wait`` and ``train`` are added
    by ``run``: the trainer blocked in ``source.rollout``, and the rest of the step: batch,
    logprobs, update, broadcast):

    * ``span``: first dispatch to last completion of the step's own groups (how long its episodes
      took); ``spread``: first to last completion among them; ``straggler``: how long the trainer
      waited for the step's last group alone, once every other one was in (asynchronous buffer only);
    * ``sampler busy``: share of the wall time the sampler spent in batched generation calls;
      ``batch``: requests per generation call.
    """
    by: dict[int, dict[str, list[float]]] = {}
    for name, t, step, _ in events:
        by.setdefault(step, {}).setdefault(name, []).append(t)
    rows = []
    for ev in by.values():
        done = sorted(ev.get("done", []))
        if "ask" in ev and "handed" in ev and done:
            rows.append(
                {
                    "span": done[-1] - min(ev["dispatch"]),
                    "spread": done[-1] - done[0],
                    "straggler": max(0.0, done[-1] - max(ev["ask"][0], done[-2] if len(done) > 1 else ev["ask"][0])),
                }
            )
    out = {k: statistics.fmean(r[k] for r in rows) for k in (rows[0] if rows else {})}
    # the Ray / in-process worker reports its batches; the synchronous local engine its scheduler's calls
    busy = sum(m.get("time/sampler_generate_s", m.get("time/generate_s", 0.0)) for m in metrics)
    calls = sum(m.get("distributed/sampler_batches", m.get("rollout/generate_calls", 0.0)) for m in metrics)
    requests = sum(m.get("distributed/generated_requests", m.get("rollout/generate_requests", 0.0)) for m in metrics)
    out.update({"sampler busy": busy / wall, "batch": requests / max(1.0, calls), "step": wall / steps})
    return out


def final(r: dict) -> tuple[float, float]:
    """Mean reward of the last third of the steps, and its standard error (over those steps)."""
    tail = r["rewards"][-max(1, len(r["rewards"]) // 3) :]
    se = statistics.stdev(tail) / math.sqrt(len(tail)) if len(tail) > 1 else float("nan")
    return statistics.fmean(tail), se


def timeline_line(tl: dict[str, float]) -> str:
    groups = (
        f"groups: span {tl['span']:.2f} spread {tl['spread']:.2f} straggler {tl['straggler']:.2f}  "
        if "span" in tl
        else ""
    )
    cpu = " ".join(f"{k[4:]} {v:.2f}" for k, v in tl.items() if k.startswith("cpu "))
    return (
        f"per step, s: wall {tl['step']:.2f} = wait {tl['wait']:.2f} + train {tl['train']:.2f}  {groups}"
        f"sampler busy {100 * tl['sampler busy']:.0f}% (batch {tl['batch']:.1f})  CPU {cpu}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--rounds", type=int, default=1, help="2: sync, async, async, sync")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument(
        "--backend", choices=["ray", "local"], default="ray", help="where both runs sample (distributed.backend)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared, loaded machine)")
    ap.add_argument("--overprovision", type=int, default=0, help="async run: distributed.overprovision_groups")
    ap.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_async")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from agent_rl.run.progress import script_progress

    order = (
        ["sync", "async", "async", "sync"][: 2 * args.rounds] if args.rounds <= 2 else ["sync", "async"] * args.rounds
    )
    progress = script_progress("bench/async_speedup", len(order) * args.steps, unit="step")
    if args.model is None:
        progress.phase("the quickstart's SFT warm start (once, then reused)")
    model = args.model or warm_started_model(args.root)
    extra = {"sync": (), "async": (f"distributed.overprovision_groups={args.overprovision}",)}
    results = []
    for i, mode in enumerate(order):
        progress.phase(
            f"run {i + 1}/{len(order)} {mode} (max staleness {int(mode == 'async')}, backend {args.backend})"
        )
        results.append(run(mode, model, args.steps, args.root, args.backend, extra[mode], progress))
    by = {m: [r for r in results if r["mode"] == m] for m in ("sync", "async")}
    print(
        f"\nworkload: {args.steps} steps x 32 episodes, tool latency 50 ms - 2 s (Pareto a=1), backend {args.backend}, model {model}"
    )
    for r in results:
        f, se = final(r)
        curve = " ".join(f"{x:.2f}" for x in r["rewards"])
        print(
            f"{r['mode']:>5}: {r['wall_s']:7.1f} s  samples {r['samples']}  max staleness {r['max_staleness_seen']}  "
            f"final reward {f:.3f} +- {se:.3f}  curve [{curve}]"
        )
        print("       " + timeline_line(r["timeline"]))
    sync_s = sum(r["wall_s"] for r in by["sync"])
    async_s = sum(r["wall_s"] for r in by["async"])
    assert sum(r["samples"] for r in by["sync"]) == sum(r["samples"] for r in by["async"]), "unequal trained samples"
    fs = [final(r) for r in by["sync"]]
    fa = [final(r) for r in by["async"]]
    sync_final, async_final = statistics.fmean(f for f, _ in fs), statistics.fmean(f for f, _ in fa)
    noise = 2 * math.sqrt(statistics.fmean(se**2 for _, se in fs) + statistics.fmean(se**2 for _, se in fa))
    print(
        f"final reward: sync {sync_final:.3f}, async {async_final:.3f} (2 standard errors: {noise:.3f}); "
        f"async not worse within noise: {async_final >= sync_final - noise}"
    )
    print(f"speedup = sync_s / async_s = {sync_s:.1f} / {async_s:.1f} = {sync_s / async_s:.2f}x")
    cpu = statistics.fmean(sum(v for k, v in r["timeline"].items() if k.startswith("cpu ")) for r in by["sync"])
    step = statistics.fmean(r["timeline"]["step"] for r in by["sync"])
    cores = len(os.sched_getaffinity(0))
    print(
        f"CPU per synchronous step {cpu:.2f} s on {cores} cores: no overlap can beat {cpu / cores:.2f} s per step "
        f"(at most {step / (cpu / cores):.2f}x the synchronous {step:.2f} s); load average now {os.getloadavg()[0]:.1f}"
    )
    progress.finish(
        [args.root], {"speedup": f"{sync_s / async_s:.2f}x"}
    )  # the runs' directories (config.yaml, metrics.jsonl)


if __name__ == "__main__":
    main()

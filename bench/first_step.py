"""The quickstart's first training step against its steady ones, plain and with LoRA (issue 42, item 4).

Each run is a fresh process (OpenMP's state is per process) that times its imports, the trainer's
start (model load, LoRA wrapping), then ``--steps`` steps of ``configs/quickstart.yaml`` on a
random-init tiny model: wall and CPU seconds of each step and of its generation. It prints, per run,
``first / steady`` (the first step against the median of the others), wall and CPU. ``before`` runs
set ``GOMP_SPINCOUNT=300000``, which is libgomp's own spinning when no wait policy is chosen (what
every run did before ``agent_rl/core/threads.py``); ``after`` runs take what ``import agent_rl``
sets. A third child times the model's first forward and backward against the next ones (allocator,
kernel dispatch), in the main thread and in a new one.

    python bench/first_step.py [--steps 4] [--modes after,before] [--variants plain,lora]

Run it on a busy machine to see the cause: on an idle one spinning costs little.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"plain": [], "lora": ["learner.lora.rank=8"]}
BEFORE = {"GOMP_SPINCOUNT": "300000"}  # libgomp's default spin count, with the default wait policy


def child_steps(model: str, steps: int, overrides: list[str]) -> dict:
    t0 = time.perf_counter()
    importlib.import_module("agent_rl")  # before torch: it chooses how OpenMP threads wait (read at load)
    import torch

    from agent_rl.config import load_config
    from agent_rl.train.trainer import Trainer

    out: dict = {"imports_s": time.perf_counter() - t0, "wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    out["torch_threads"] = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(
            ROOT / "configs" / "quickstart.yaml",
            [
                f"model.path={model}",
                f"run.dir={run_dir}",
                "tracking.loggers=[]",
                "tracking.progress=false",
                "tracking.save_trajectories=0",
                f"trainer.steps={steps}",
                *overrides,
            ],
        )
        t0 = time.perf_counter()
        trainer = Trainer(cfg, log=lambda *a, **k: None)
        out["build_s"] = time.perf_counter() - t0
        out["steps"] = []
        for step in range(steps):
            w0, c0 = time.perf_counter(), time.process_time()
            metrics = trainer.step(step)
            out["steps"].append(
                {
                    "wall_s": time.perf_counter() - w0,
                    "cpu_s": time.process_time() - c0,
                    "generate_s": metrics.get("time/generate_s", 0.0),
                    "load": os.getloadavg()[0],
                }
            )
        trainer.close()
    return out


def child_forward(model: str) -> dict:
    import threading

    importlib.import_module("agent_rl")  # before torch, as in child_steps
    import torch

    from agent_rl.models.loading import load_model

    policy = load_model(model, "float32", "cpu")
    ids_BT = torch.randint(0, policy.config.vocab_size, (64, 96))

    def timed(backward: bool) -> float:
        t0 = time.perf_counter()
        if backward:
            policy(input_ids=ids_BT).logits.float().mean().backward()
        else:
            with torch.no_grad():
                policy(input_ids=ids_BT)
        return time.perf_counter() - t0

    out = {"main_forward_s": [timed(False) for _ in range(3)], "main_backward_s": [timed(True) for _ in range(3)]}
    in_thread: list[float] = []
    worker = threading.Thread(target=lambda: in_thread.extend(timed(False) for _ in range(3)))
    worker.start()
    worker.join()
    out["new_thread_forward_s"] = in_thread
    return out


def run_child(args: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if r.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def report(label: str, run: dict) -> str:
    steps = run["steps"]
    first, rest = steps[0], steps[1:]

    def ratio(key: str) -> str:
        steady = statistics.median(s[key] for s in rest)
        return f"{first[key]:6.2f} / {steady:6.2f} = {first[key] / steady:5.2f}x"

    loads = [s["load"] for s in steps]
    return (
        f"{label:<14} imports {run['imports_s']:5.2f} s  start {run['build_s']:5.2f} s  "
        f"first/steady wall {ratio('wall_s')}  cpu {ratio('cpu_s')}  generate {ratio('generate_s')}  "
        f"(load {min(loads):.1f}-{max(loads):.1f}, OMP_WAIT_POLICY={run['wait_policy']})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="steps per run; the first against the median of the rest")
    p.add_argument("--modes", default="after,before", help="after (as the code runs), before (libgomp's spinning)")
    p.add_argument("--variants", default="plain,lora", help="plain, lora (learner.lora.rank=8)")
    p.add_argument("--model", default=None, help="a tiny model directory (default: one built here)")
    p.add_argument("--child", choices=["steps", "forward"], default=None, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "steps":
        print(json.dumps(child_steps(args.model, args.steps, args.overrides)))
        return
    if args.child == "forward":
        print(json.dumps(child_forward(args.model)))
        return

    from agent_rl.run.progress import script_progress

    modes, variants = args.modes.split(","), args.variants.split(",")
    progress = script_progress("bench/first_step", len(modes) * len(variants) + 1, unit="run")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            progress.phase("init-model")
            model = str(Path(tmp) / "tiny")
            subprocess.run(
                [sys.executable, "-m", "agent_rl.cli", "init-model", "tiny", "--out", model],
                check=True,
                capture_output=True,
                cwd=ROOT,
            )
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        print(f"cores {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.1f} at start")
        for mode in modes:
            for variant in variants:
                progress.phase(f"{variant} {mode}")
                run = run_child(
                    ["--child", "steps", "--model", model, "--steps", str(args.steps), *VARIANTS[variant]],
                    {**env, **(BEFORE if mode == "before" else {})},
                )
                print(report(f"{variant} {mode}", run), flush=True)
                progress.advance(
                    {
                        "first/steady": run["steps"][0]["wall_s"]
                        / statistics.median(s["wall_s"] for s in run["steps"][1:])
                    }
                )
        progress.phase("first forward")
        fwd = run_child(["--child", "forward", "--model", model], env)
        for key, times in fwd.items():
            print(f"{key:<22} " + ", ".join(f"{t:.3f}" for t in times) + " s  (calls 1, 2, 3; 64 x 96 tokens)")
        progress.advance({})
    progress.finish()


if __name__ == "__main__":
    main()

"""A small sample of real multi-turn trajectories of this project's envs, for the learner benchmark.

Each env is played through the rollout engine with its scripted (noisy) teacher, as
``agent-rl eval ... eval.policy=...`` does, with the tiny tokenizer: ``--tasks`` tasks x ``--group``
samples per task (one group per task, as in training). Saved per trajectory: the env, the group,
the token ids and the loss mask. ``bench/learner_throughput.py --only packing`` reads it.

    python bench/trajectory_sample.py [--tasks 2 --group 8] [--envs quickstart maze shell_task] [--out FILE] [--model DIR]

Envs (config, overrides): the quickstart (``Arithmetic-v0``, its weak teacher), ``Maze-v0``
(``configs/maze.yaml``, its weak teacher: noisy BFS, 8-14 turns) and ``ShellTask-v0`` (the
oracle: 5-6 shell tool calls with their outputs; process sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "bench" / "data" / "trajectories.json"
ENVS = {
    "quickstart": ("configs/quickstart.yaml", ["eval.policy=envs.arithmetic.policies:weak_teacher"]),
    "maze": ("configs/maze.yaml", ["eval.policy=envs.maze.policies:weak_teacher"]),
    "shell_task": (
        "configs/quickstart.yaml",
        [
            "env.id=agent_rl/ShellTask-v0",
            "env.options={}",
            "rollout.max_turns=8",
            "rollout.max_new_tokens=128",
            "rollout.max_total_tokens=4096",
            "eval.policy=envs.shell_task.policies:oracle",
            "sandbox.backend=process",
        ],
    ),
}


def sample(name: str, model_dir: str, tasks: int, group: int) -> list[dict]:
    from agent_rl.commands.eval import _engine
    from agent_rl.config import load_config
    from agent_rl.train.evaluation import evaluate

    config, overrides = ENVS[name]
    cfg = load_config(ROOT / config, [f"model.path={model_dir}", *overrides])
    engine = _engine(cfg)
    try:
        _, trajectories = asyncio.run(evaluate(engine, tasks, group, split="train", resamples=10))
    finally:
        engine.close()
        engine.backend.close()
    return [
        {
            "env": name,
            "group": t.task_id,
            "token_ids": t.token_ids_T,
            "loss_mask": t.loss_mask_T,
            "turns": len(t.turns_N),
        }
        for t in trajectories
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument(
        "--model", default=None, help="tiny checkpoint dir (its tokenizer; default: built in a temp dir, seed 0)"
    )
    args = p.parse_args()
    from agent_rl.run.progress import script_progress

    progress = script_progress("bench/trajectory_sample", len(args.envs), unit="env")
    model_dir = args.model
    if model_dir is None:
        from agent_rl.run.envloader import init_tiny

        progress.phase("building the tiny model")
        model_dir = str(init_tiny(Path(tempfile.mkdtemp()) / "tiny", seed=0))
    rows = []
    for name in args.envs:
        progress.phase(f"{name}: {args.tasks} tasks x {args.group} episodes")
        rows += sample(name, model_dir, args.tasks, args.group)
        progress.advance({"trajectories": len(rows)})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"tokenizer": "agent_rl.models.tiny (seed 0)", "trajectories": rows}, separators=(",", ":"))
    )
    for name in args.envs:
        lengths = sorted(len(r["token_ids"]) for r in rows if r["env"] == name)
        print(
            f"{name:<11} {len(lengths)} trajectories, tokens min {lengths[0]} median {lengths[len(lengths) // 2]} max {lengths[-1]}"
        )
    progress.finish([args.out])


if __name__ == "__main__":
    main()

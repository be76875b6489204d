"""``agent-rl eval``: held-out success of a config's model, a run's checkpoint or a scripted policy
(``agent_rl/commands/eval.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent_rl.commands.cli.config_args import add_config_args, load_config_args, preflight, say_loading

EXAMPLES = (
    "agent-rl eval configs/quickstart.yaml model.path=runs/models/tiny eval.episodes=32",
    "agent-rl eval runs/quickstart-grpo-ppo_clip-20250101-120000 --step 20",
)


def add_parser(sub) -> argparse.ArgumentParser:
    sp = sub.add_parser("eval", help="pass@k / mean@k on held-out tasks")
    add_config_args(sp)
    sp.add_argument(
        "--step", type=int, default=None, help="with a run directory: the checkpoint of this step (default: the newest)"
    )
    return sp


def run(args: argparse.Namespace) -> int:
    from agent_rl.core.rundirs import checkpoint_model, is_run_dir

    run_dir = Path(args.config).expanduser()
    if run_dir.is_dir():  # a run directory: its config and the model of its newest checkpoint (or --step's)
        if not is_run_dir(run_dir):
            raise ValueError(f"{args.config}: a directory without config.yaml, not a run directory")
        model = checkpoint_model(run_dir, args.step, key=str(args.config))
        args.config = str(run_dir / "config.yaml")
        args.overrides.insert(0, f"model.path={model}")
    elif args.step is not None:
        raise ValueError(f"--step {args.step}: give a run directory, not a config file ({args.config})")
    scripted = any(o.startswith("eval.policy=") and o != "eval.policy=" for o in args.overrides)
    cfg = load_config_args(args, weights=not scripted)
    from agent_rl.commands.eval import run_eval

    # a scripted policy needs only the tokenizer; eval never has more than its episodes in flight
    preflight(cfg, weights=cfg.eval.policy is None, most_episodes=cfg.eval.episodes * cfg.eval.k)
    say_loading("eval", cfg)
    from agent_rl.train.evaluation import too_many_errors

    result, out_dir = run_eval(cfg)
    failed = too_many_errors(result.errors, result.errors + result.episodes)
    if failed is not None:  # exit 1: the errors are listed above, with their first messages
        print(f"error: {failed}; the episodes are in {out_dir / 'trajectories' / 'eval.jsonl'}", file=sys.stderr)
        return 1
    return 0

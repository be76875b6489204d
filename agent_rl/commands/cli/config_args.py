"""What the commands that read a config share: the config and overrides arguments, the checks made
before anything loads, and the line said before the model loads."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_rl.config import Config  # only a type: --help and config errors answer before the config loads


def add_config_args(sp: argparse.ArgumentParser, required: bool = True) -> None:
    """``CONFIG [OVERRIDES ...] [--print-config]``."""
    sp.add_argument("config", nargs=None if required else "?", help="YAML config")
    sp.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.steps=10")
    sp.add_argument(
        "--print-config", action="store_true", help="print the resolved config (every default filled in) and exit"
    )


def load_config_args(args: argparse.Namespace, weights: bool = True, model_path: str | None = None, before_paths=None):
    """The validated config; ``--print-config`` prints it, every default filled in, and exits.

    ``precheck`` first: the YAML, keys, names, the env id and the model's path are checked before
    torch and transformers are imported (``agent_rl/run/precheck.py``); ``model_path``: the path to
    check instead of the config's ``model.path`` (a resumed run's own); ``before_paths(raw)``: a
    command's own check of the raw config, before the paths."""
    from agent_rl.run.precheck import check_paths, precheck

    raw = precheck(args.config, args.overrides)
    if before_paths is not None:
        before_paths(raw)
    printing = getattr(args, "print_config", False)
    if not printing:  # the resolved config prints whether its model exists or not
        check_paths(raw, weights=weights, model_path=model_path)
    from agent_rl.config import load_config

    cfg = load_config(args.config, args.overrides)
    if printing:
        print(cfg.to_yaml(), end="")
        raise SystemExit(0)
    return cfg


def preflight(
    cfg: Config, weights: bool = True, model_path: str | None = None, most_episodes: int | None = None
) -> None:
    """What fails before anything is created: the env can be made, the model and the critic loaded,
    the episodes in flight fit in this machine's memory (``most_episodes``: a command that never
    runs more at once, e.g. eval's episodes x k)."""
    from agent_rl.run.capacity import check_capacity
    from agent_rl.run.envloader import env_factory
    from agent_rl.run.preflight import check_model

    env_factory(cfg.env)  # an unknown env id first: the model's message names the env
    check_model(model_path or cfg.model.path, weights=weights, env_id=cfg.env.id)
    if cfg.learner.critic is not None and cfg.learner.critic.path is not None:
        check_model(cfg.learner.critic.path, key="learner.critic.path")
    check_capacity(cfg, most_episodes=most_episodes)


def say_loading(command: str, cfg: Config) -> None:
    """The first phase of a long command, said before the model loads (it can take a while)."""
    if cfg.tracking.progress:
        print(f"{command}: loading {cfg.model.path} on {cfg.model.device}, env {cfg.env.id}", flush=True)

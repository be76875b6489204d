"""Make environments from the config: import ``envs`` and the user's plugins, then gymnasium.make.

The core never imports ``envs`` statically; this loader does, by name, at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym


def load_plugins(plugins: list[str]) -> None:
    importlib.import_module("envs")
    for name in plugins:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"env.plugins: cannot import '{name}': {e}") from None


def env_factory(env_cfg: Any, **overrides: Any) -> Callable[[], gym.Env]:
    """A function that makes one env; checks the id first so a typo fails before any model loads."""
    load_plugins(env_cfg.plugins)
    if env_cfg.id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_rl/") or "/" in k and not k.startswith("ALE/"))
        raise ValueError(f"config key 'env.id': unknown environment '{env_cfg.id}'; registered: {', '.join(known)}")
    kwargs = {**env_cfg.options, **overrides}

    def make() -> gym.Env:
        return gym.make(env_cfg.id, **kwargs)

    env = make()  # fail now, on bad options, not in the middle of a rollout
    env.close()
    return make

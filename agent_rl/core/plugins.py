"""Plugins from installed packages: Python entry points that register envs, tools, objectives and
rollout backends, with no config.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."agent_rl.envs"]
    my_envs = "my_envs.register"            # a module: importing it registers (gymnasium.register)

    [project.entry-points."agent_rl.objectives"]
    my_loss = "my_pkg.losses:register"      # a function: called with no arguments

``load_entry_points`` loads every entry point of ``GROUPS`` once per process. It runs before
anything reads a config (``agent-rl`` commands, ``load_config``, the Ray actors), since objective
and backend names are checked when the config is parsed, and before ``agent-rl envs list`` /
``agent-rl objectives list``. An entry point that fails to load stops the command with one line
naming its distribution and entry point (``PluginError``, a ``ValueError``).
"""

from __future__ import annotations

import inspect
from importlib.metadata import EntryPoint, entry_points

GROUPS = ("agent_rl.envs", "agent_rl.tools", "agent_rl.objectives", "agent_rl.backends")

_loaded: set[tuple[str, str, str]] = set()  # (group, distribution, entry point name)
_done = False
env_ids: list[str] = []  # gymnasium ids registered while the agent_rl.envs entry points loaded


class PluginError(ValueError):
    """An installed package's entry point failed to load."""


def distribution(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "<unknown distribution>"


def load_entry_points() -> None:
    """Import (or call) every installed ``agent_rl.*`` entry point; the second call does nothing."""
    global _done
    if _done:
        return
    for group in GROUPS:
        for ep in sorted(entry_points(group=group), key=lambda e: (distribution(e), e.name)):
            key = (group, distribution(ep), ep.name)
            if key not in _loaded:
                _load(group, ep)
                _loaded.add(key)
    _done = True


def _load(group: str, ep: EntryPoint) -> None:
    before = _gym_ids() if group == "agent_rl.envs" else None
    try:
        obj = ep.load()
        if inspect.isroutine(obj):
            obj()
    except Exception as e:  # noqa: BLE001 - any failure of foreign code: one line, no traceback
        raise PluginError(
            f"plugin '{ep.name}' (entry point group '{group}') of distribution '{distribution(ep)}': "
            f"loading '{ep.value}' failed: {type(e).__name__}: {e}"
        ) from None
    if before is not None:
        env_ids.extend(sorted(_gym_ids() - before))


def _gym_ids() -> set[str]:
    import gymnasium as gym

    return set(gym.registry)

"""The config checked before any heavy import: its YAML, every key, the env id, the objective and
backend names and the model's path, in well under 2 s (``bench/config_error_latency.py``).

``agent-rl`` runs ``precheck`` first; only then does it import torch and transformers and validate
the config fully (``agent_rl/config.py``), which checks the values as well. Keys and names are
checked against ``agent_rl/core/names.json`` (the registries' snapshot), env ids against the
registry of ``envs``, which needs no model code; an unknown name gets the nearest valid ones
(difflib). ``tests/test_precheck.py`` checks that the error comes before torch is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_rl.core.names import load_names, plugins_add_names
from agent_rl.core.rawconfig import ConfigError, did_you_mean, load_raw
from agent_rl.core.rundirs import resolve_model_path
from agent_rl.run.envloader import check_env_id
from agent_rl.run.preflight import HUB_ID, check_config_file, check_model


def _at(raw: dict[str, Any], path: str) -> Any:
    node: Any = raw
    for part in path.split(".") if path else []:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_keys(raw: dict[str, Any], names: dict[str, Any]) -> None:
    """Every key of ``raw`` is a field of its section, every component names a registered entry and
    only that entry's keys; else a ``ConfigError`` naming the key, the nearest and the allowed ones."""
    for path, allowed in names["sections"].items():
        node = _at(raw, path)
        if not isinstance(node, dict):
            continue
        for key in node:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise ConfigError(
                    f"unknown config key '{where}'{did_you_mean(str(key), allowed)}; allowed keys here: "
                    f"{', '.join(allowed)}"
                )
    for path, entries in names["components"].items():
        node = _at(raw, path)
        kind = names["component_kinds"][path]
        for i, item in enumerate(node if isinstance(node, list) else [node]):
            where = f"{path}.{i}" if isinstance(node, list) else path
            item = {"name": item} if isinstance(item, str) else item
            if not isinstance(item, dict) or "name" not in item:
                continue  # the full validation says what a component must be
            name = str(item["name"])
            if name not in entries:
                if plugins_add_names():
                    continue  # a plugin's entry: the registry decides
                raise ConfigError(
                    f"config key '{where}': unknown {kind} '{name}'{did_you_mean(name, entries)}; "
                    f"known: {', '.join(sorted(entries))}"
                )
            for key in item:
                if key not in entries[name]:
                    raise ConfigError(
                        f"config key '{where}.{key}': {kind} '{name}' has no key '{key}'"
                        f"{did_you_mean(str(key), entries[name])}; allowed keys: {', '.join(entries[name])}"
                    )


def check_path(path: str, key: str, weights: bool = True, env_id: str | None = None) -> None:
    """A local ``path`` (or a run directory) exists and holds a model; a hub id is left to the full
    preflight (it may ask the hub)."""
    resolved = resolve_model_path(path, key=key)
    if Path(resolved).expanduser().exists() or not HUB_ID.match(resolved):
        check_model(resolved, key=key, weights=weights, env_id=env_id)


def precheck(config: str | Path | None, overrides: list[str]) -> dict[str, Any]:
    """The raw config of ``config`` and ``overrides``: its YAML, keys, names and env id checked
    (``ConfigError`` / ``ValueError``, one line); ``check_paths`` checks its paths."""
    if config is not None:
        check_config_file(config)
    names = load_names()
    raw = load_raw(config, overrides, names["defaults"] if overrides else None)
    check_keys(raw, names)
    env = _section(raw, "env")
    env_id, plugins = env.get("id", names["defaults"]["env"]["id"]), env.get("plugins") or []
    if isinstance(env_id, str) and isinstance(plugins, list):
        check_env_id(env_id, plugins)
    return raw


def setting(raw: dict[str, Any], section: str, key: str) -> Any:
    """``raw[section][key]``, or its default."""
    return _section(raw, section).get(key, load_names()["defaults"][section][key])


def check_paths(raw: dict[str, Any], weights: bool = True, model_path: str | None = None) -> None:
    """The model (``model_path``: instead of ``model.path``, a resumed run's own) and the critic exist."""
    path, env_id = model_path or setting(raw, "model", "path"), setting(raw, "env", "id")
    if isinstance(path, str):
        check_path(path, "model.path", weights=weights, env_id=env_id if isinstance(env_id, str) else None)
    critic = _at(raw, "learner.critic")
    if isinstance(critic, dict) and isinstance(critic.get("path"), str):
        check_path(critic["path"], "learner.critic.path")


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return raw[name] if isinstance(raw.get(name), dict) else {}

"""The config before validation: YAML text and ``a.b=value`` overrides to one dict, and the "did you
mean" of an unknown name.

Nothing here imports torch, transformers or the registries, so a mistake these find (YAML that does
not parse, an override without ``=``) is reported before any heavy import. ``agent_rl/config.py``
validates the dict; ``agent_rl/run/precheck.py`` checks its keys and names against
``agent_rl/core/names.json`` first.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A user mistake in a config file or override; the message names the key and allowed values."""


# where a registry entry is selected by ``name`` (its other keys belong to that entry)
COMPONENT_PATHS = frozenset(
    {
        "algorithm.advantage",
        "algorithm.loss",
        "algorithm.aggregation",
        "algorithm.kl",
        "algorithm.credit",
        "rollout.backend",
    }
)


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """``" (did you mean 'x'?)"`` naming the nearest of ``choices`` (difflib's ratio, cutoff 0.6), or ``""``."""
    near = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.6)
    if not near:
        return ""
    return " (did you mean " + " or ".join(f"'{c}'" for c in near) + "?)"


def parse_yaml(text: str, where: str, is_file: bool = False) -> Any:
    """``yaml.safe_load``, its errors (and nesting too deep to parse) a ``ConfigError`` naming ``where``
    (a file: with the line and column of the problem).

    When the parser names a construct it was inside (an unclosed ``[`` or quote), the error points
    at where that construct starts: the parser notices the problem only at the next token, often on
    the following line.
    """
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:  # file:line:column of the problem, as compilers print it
        mark, problem, context = e.problem_mark, e.problem, e.context
        if e.context_mark is not None and (mark is None or e.context_mark.line < mark.line):
            at_line = f" (noticed at line {mark.line + 1})" if mark is not None else ""
            mark, problem, context = e.context_mark, f"{e.context} that starts here: {e.problem}{at_line}", None
        at = (
            where
            if mark is None
            else f"{where}:{mark.line + 1}:{mark.column + 1}"
            if is_file
            else f"{where} (column {mark.column + 1})"
        )
        what = "; ".join(str(p) for p in (problem, context) if p) or "cannot parse"
        raise ConfigError(f"{at}: not valid YAML: {what}") from None
    # the constructors of explicit tags raise plain errors: !!int x, !!timestamp x, !!bool x
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise ConfigError(f"{where}: not valid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None


def apply_override(raw: dict[str, Any], override: str, defaults: dict[str, Any] | None = None) -> None:
    """Apply one ``a.b.c=value`` override (value parsed as YAML) to a raw config dict.

    A section missing from ``raw`` starts as its default, so ``algorithm.loss.eps_high=0.3`` keeps
    the default loss's name. Setting a component's ``name`` resets its other keys, since they belong
    to the previous entry's config.
    """
    if "=" not in override:
        raise ConfigError(f"override '{override}' must look like key.path=value")
    key, value = override.split("=", 1)
    parts = key.strip().split(".")
    node, default = raw, defaults or {}
    for part in parts[:-1]:
        default = default.get(part) if isinstance(default, dict) else None
        child = node.get(part)
        if child is None:
            child = node[part] = dict(default) if isinstance(default, dict) else {}
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{part}' is not a section")
        node = child
    if parts[-1] == "name" and ".".join(parts[:-1]) in COMPONENT_PATHS:
        node.clear()
    node[parts[-1]] = parse_yaml(value, f"override '{key}'") if value != "" else ""


def check_no_nan(node: Any, key: str = "", seen: frozenset[int] = frozenset()) -> None:
    """NaN passes every ``ge`` / ``gt`` / ``le`` bound (all comparisons are False): refuse it by key."""
    if isinstance(node, float) and node != node:
        raise ConfigError(f"config key '{key}': NaN is not a number")
    if isinstance(node, (dict, list)) and id(node) not in seen:  # YAML anchors can make cycles
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            check_no_nan(v, f"{key}.{k}" if key else str(k), seen | {id(node)})


def load_raw(
    path: str | Path | None, overrides: list[str] | None, defaults: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The config file's mapping with the overrides applied, not validated."""
    raw: dict[str, Any] = {}
    if path is not None:
        if not Path(path).is_file():
            raise ConfigError(f"config file not found: {path}")
        raw = parse_yaml(Path(path).read_text(), str(path), is_file=True) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    for o in overrides or []:
        apply_override(raw, o, defaults)
    check_no_nan(raw)
    return raw

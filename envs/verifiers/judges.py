"""The LLM judges of a verifiers taskset, pointed at the endpoint ``agent_rl/Verifiers-v0``'s options
name (``judge_base_url``, ``judge_model``, ``judge_api_key_var``), never at the policy being trained.

``taskset_judges`` asks verifiers' venv which judges the taskset's config declares (``find_judges.py``:
a ``vf.JudgeConfig`` field, or the plugged ``task.judges``). That costs a ``vf-eval``-sized import (4-9 s
on a busy 2-core machine), so the answer is kept beside the venv, one file per taskset and directory, with a key of the venv's
pins, the taskset's id and directory, and the size and time of each file of its package there: every
command of a run, and every run after it, reads it back until the taskset changes, and then replaces it. ``judge_overrides`` turns
it and the options into what each ``vf-eval`` run merges into the taskset's config, or refuses in one
line a taskset that needs a judge and has none named.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from envs.verifiers.program import environ, venv_python

FIND_JUDGES = Path(__file__).resolve().parent / "find_judges.py"


def taskset_judges(taskset: str, path: str) -> dict[str, Any]:
    """The judges the taskset's config declares (dotted path -> config, or a list of configs); a
    taskset that cannot be imported is a ``ValueError`` naming ``env.options.taskset``."""
    python = venv_python()
    root = Path(path).resolve() if path else None
    cached, key = _cache_file(python, taskset, root), _key(python, taskset, root)
    try:
        entry = json.loads(cached.read_text())
        if entry.get("key") == key:
            return entry["judges"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass  # absent, or written by another version: found again below
    cmd = [str(python), str(FIND_JUDGES), taskset]
    done = subprocess.run(cmd, env=environ(path), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        raise ValueError(f"env.options.taskset: verifiers taskset '{taskset}': {lines[-1] if lines else 'no output'}")
    judges = json.loads(done.stdout)
    cached.parent.mkdir(exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"key": key, "judges": judges}))
    partial.replace(cached)  # whole or absent, whoever reads it meanwhile
    return judges


def _cache_file(python: Path, taskset: str, root: Path | None) -> Path:
    """One file per taskset and directory: a changed taskset replaces its entry (no files pile up)."""
    name = hashlib.sha256(json.dumps([taskset, str(root)]).encode()).hexdigest()[:32]
    return python.parent.parent / ".judges" / f"{name}.json"


def _key(python: Path, taskset: str, root: Path | None) -> str:
    """The venv's pins (its stamp), the taskset's id and directory, and each source file of its package
    there (verifiers imports taskset ``my-set`` as the module ``my_set``: ``my_set/`` or ``my_set.py``)."""
    module = taskset.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()
    files = []
    if root is not None:
        package = [*(root / module).rglob("*.py"), root / f"{module}.py"]
        files = sorted(
            (str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in package if f.is_file()
        )
    stamp = (python.parent.parent / ".installed").read_text()
    return hashlib.sha256(json.dumps([stamp, taskset, str(root), files]).encode()).hexdigest()[:32]


def judge_overrides(
    taskset: str, path: str, base_url: str | None, model: str | None, api_key_var: str | None
) -> dict[str, Any]:
    """What each run merges into the taskset's config (``--env.taskset @ judge.json``): every judge the
    taskset declares, pointed at ``base_url`` with ``model``; ``{}`` for a taskset without judges. One
    line (``ValueError``) when a judge is needed and not named, named for a taskset without one, or half named."""
    if (base_url is None) != (model is None):
        given, missing = ("judge_base_url", "judge_model") if model is None else ("judge_model", "judge_base_url")
        raise ValueError(f"env.options.{missing}: not set, but env.options.{given} is; a judge needs both")
    found = taskset_judges(taskset, path)
    if found and base_url is None:
        raise ValueError(
            f"env.options.judge_base_url: the verifiers taskset '{taskset}' scores with an LLM judge "
            f"({', '.join(found)}); set env.options.judge_base_url and env.options.judge_model to the "
            "judge's own OpenAI-compatible endpoint (never the policy being trained)"
        )
    if base_url is None:
        return {}
    if not found:
        raise ValueError(
            f"env.options.judge_base_url: the verifiers taskset '{taskset}' declares no LLM judge (no "
            "vf.JudgeConfig in its config); leave judge_base_url and judge_model unset"
        )
    endpoint = {"base_url": base_url, "model": model} | ({"api_key_var": api_key_var} if api_key_var else {})
    overrides: dict[str, Any] = {}
    for dotted, config in found.items():
        *parents, leaf = dotted.split(".")
        node = overrides
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = [c | endpoint for c in config] if isinstance(config, list) else endpoint
    return overrides

"""The objective catalog: every registered entry with its paper, formula, config defaults, and how
faithful it is (``status`` and ``evidence``).

``agent-rl objectives list [--markdown] [--status S]`` prints ``render_catalog``; ``docs/objectives.md``
is its markdown form, regenerated with ``python -m agent_rl.commands.catalog > docs/objectives.md``.
The Catalog III backlog (keys not built yet) is docs/objectives-backlog.md.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, get_args

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

import agent_rl.methods  # noqa: F401  (registers the methods that act on the run)
from agent_rl.algorithms import ADVANTAGES, AGGREGATIONS, ALL_REGISTRIES, CREDITS, FILTERS, KLS, POLICY_LOSSES
from agent_rl.algorithms.registry import CHOICES, OBJECTIVES_DOC, Entry, ObjectiveEntry
from agent_rl.commands import catalog_text
from agent_rl.commands.catalog_text import REGENERATE, REGENERATE_NAMES, STATUS_MEANING  # noqa: F401  (re-exported)
from agent_rl.config import Config
from agent_rl.core.registry import ComponentConfig
from agent_rl.rollout.backends import BACKENDS


def anchor(entry: ObjectiveEntry) -> str:
    """The id of the entry's row in docs/objectives.md (kinds share keys: ``filter-omni_opd``)."""
    return f"{entry.kind}-{entry.name}"


def where_documented(entry: ObjectiveEntry) -> str:
    """Where the entry's status, evidence and recorded choices are written."""
    return f"{OBJECTIVES_DOC}#{anchor(entry)}"


def _formula_lines(entry: Entry) -> list[str]:
    """The docstring after its first line: its non-empty lines, whitespace collapsed."""
    return [re.sub(r"\s+", " ", line).strip() for line in entry.doc.splitlines()[1:] if line.strip()]


def _defaults(entry: Entry) -> str:
    """``field=default`` for every config field but ``name`` (JSON values; ``<required>`` when none)."""
    parts = []
    for name, field in entry.config.model_fields.items():
        if name == "name":
            continue
        if field.is_required():
            parts.append(f"{name}=<required>")
        else:
            parts.append(f"{name}={json.dumps(to_jsonable_python(field.get_default(call_default_factory=True)))}")
    return ", ".join(parts)


def catalog_data() -> dict[str, Any]:
    """The registries as plain data, what ``render_catalog`` reads: the kinds, every entry, the
    recorded choices."""
    entries = [
        {
            "kind": e.kind,
            "name": e.name,
            "summary": e.summary,
            "formula": _formula_lines(e),
            "defaults": _defaults(e),
            "needs": sorted(e.needs),
            "state": e.state.__name__ if e.state else "",
            "status": e.status,
            "evidence": e.evidence,
        }
        for r in ALL_REGISTRIES.values()
        for e in r.entries()
    ]
    choices = [{"key": c.key, "question": c.question, "choice": c.choice} for c in CHOICES]
    return {"kinds": list(ALL_REGISTRIES), "entries": entries, "choices": choices}


def render_catalog(markdown: bool, status: str | None = None) -> str:
    """The catalog of the registries as they are (``catalog_text.render_catalog``)."""
    return catalog_text.render_catalog(catalog_data(), markdown=markdown, status=status)


# the registry each component path of the config selects from (agent_rl/config.py)
COMPONENT_REGISTRIES = {
    "algorithm.advantage": ADVANTAGES,
    "algorithm.loss": POLICY_LOSSES,
    "algorithm.aggregation": AGGREGATIONS,
    "algorithm.kl": KLS,
    "algorithm.credit": CREDITS,
    "algorithm.filters": FILTERS,
    "rollout.backend": BACKENDS,
}


def _sections(model: type[BaseModel], path: str, out: dict[str, list[str]]) -> dict[str, list[str]]:
    """``path -> allowed keys`` for ``model`` and every section below it (a field whose type is a
    section, optional or not; components are ``COMPONENT_REGISTRIES``'s)."""
    out[path] = list(model.model_fields)
    for name, field in model.model_fields.items():
        for t in (field.annotation, *get_args(field.annotation)):
            if isinstance(t, type) and issubclass(t, BaseModel) and not issubclass(t, ComponentConfig):
                _sections(t, f"{path}.{name}" if path else name, out)
    return out


def names_snapshot() -> dict[str, Any]:
    """What ``agent_rl/core/names.json`` holds, read from the config classes and the registries: the
    keys of every config section, each component's entries and their keys, the config's defaults
    and the catalog (``catalog_data``). ``agent_rl/run/precheck.py`` checks a config against it
    before torch is imported; ``tests/test_precheck.py`` keeps the file equal to this."""
    return {
        "regenerate": REGENERATE_NAMES,
        "sections": _sections(Config, "", {}),
        "components": {
            path: {e.name: list(e.config.model_fields) for e in registry.entries()}
            for path, registry in COMPONENT_REGISTRIES.items()
        },
        "component_kinds": {path: registry.kind for path, registry in COMPONENT_REGISTRIES.items()},
        "defaults": Config().model_dump(mode="json"),
        "catalog": catalog_data(),
    }


if __name__ == "__main__":
    if "--names" in sys.argv[1:]:
        sys.stdout.write(json.dumps(names_snapshot(), indent=1, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_catalog(markdown="--text" not in sys.argv[1:]))

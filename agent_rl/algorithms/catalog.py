"""The objective catalog: every registered entry with its paper, formula and config defaults.

``agent-rl objectives list [--markdown]`` prints ``render_catalog``; ``docs/objectives.md`` is its
markdown form, regenerated with ``python -m agent_rl.algorithms.catalog > docs/objectives.md``.
"""

from __future__ import annotations

import json
import re
import sys

from pydantic_core import to_jsonable_python

from agent_rl.algorithms import ALL_REGISTRIES
from agent_rl.algorithms.catalog3 import PIECES, status_rows
from agent_rl.algorithms.registry import CHOICES, Entry

REGENERATE = "python -m agent_rl.algorithms.catalog > docs/objectives.md"


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "-"


def render_catalog(markdown: bool) -> str:
    """Every entry of every registry (kind, key, summary, formula, config defaults, needs, state)."""
    lines: list[str] = []
    if markdown:
        lines += ["# Objectives", "", f"Generated from the registries; do not edit. Regenerate with `{REGENERATE}`.", ""]
    for kind, registry in ALL_REGISTRIES.items():
        entries = registry.entries()
        if markdown:
            lines += [f"## {kind} ({len(entries)})", ""]
            if not entries:
                lines += ["(none yet)", ""]
                continue
            lines += ["| key | method | formula | config defaults | needs | state |", "|---|---|---|---|---|---|"]
            for e in entries:
                formula = "<br>".join(_formula_lines(e))
                state = e.state.__name__ if e.state else ""
                cells = [f"`{e.name}`", e.summary, formula, _defaults(e), ", ".join(sorted(e.needs)), state]
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            lines.append("")
        else:
            for e in entries:
                lines.append(f"{kind:12s} {e.name:24s} {e.summary}")
                lines += [f"{'':37s}{line}" for line in _formula_lines(e)]
                for label, text in (("config", _defaults(e)), ("needs", ", ".join(sorted(e.needs)))):
                    if text:
                        lines.append(f"{'':37s}{label}: {text}")
    registered = {e.name: kind for kind, registry in ALL_REGISTRIES.items() for e in registry.entries()}
    rows = status_rows(registered)
    if markdown:
        lines += ["## Catalog III", "", "Every key of the Catalog III audit (`specs/OBJECTIVES.md`) and where it stands.", ""]
        lines += ["| key | seed section | status | what it needs / sources searched |", "|---|---|---|---|"]
        lines += [f"| `{key}` | {section} | {status} | {_cell(note)} |" for key, section, status, note in rows]
        lines += ["", "| piece of a registered row | where |", "|---|---|"]
        lines += [f"| {_cell(piece)} | {_cell(where)} |" for piece, where in PIECES]
        lines.append("")
    else:
        for key, _, status, note in rows:
            lines.append(f"{'catalog3':12s} {key:24s} {status}" + (f": {note}" if note else ""))
    if markdown and CHOICES:
        lines += ["## Choices we made", "", "Where a paper leaves a choice open.", ""]
        lines += ["| key | open question | our choice |", "|---|---|---|"]
        lines += [f"| `{c.key}` | {_cell(c.question)} | {_cell(c.choice)} |" for c in sorted(CHOICES, key=lambda c: c.key)]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_catalog(markdown="--text" not in sys.argv[1:]))

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

from pydantic_core import to_jsonable_python

import agent_rl.methods  # noqa: F401  (registers the methods that act on the run)
from agent_rl.algorithms import ALL_REGISTRIES
from agent_rl.algorithms.registry import CHOICES, OBJECTIVES_DOC, STATUSES, Entry, ObjectiveEntry

REGENERATE = "python -m agent_rl.commands.catalog > docs/objectives.md"

STATUS_MEANING = {
    "reference": "a test in this repository checks its numbers against another implementation's (verl 0.9.1 values "
    "computed outside CI and written into the test, or TRL's in a golden file)",
    "paper": "the formula of the paper's own text (or of the authors' own code), with hand-computed tests",
    "interpretation": "built from an abstract, a summary or a third party's reimplementation, or with defaults "
    'of ours that matter; its choices are recorded (the evidence, "Choices we made" below, config fields '
    'marked "ours")',
}


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "-"


def render_catalog(markdown: bool, status: str | None = None) -> str:
    """Every entry of every registry (kind, key, status, summary, formula, config defaults, needs,
    state, evidence); ``status``: only the entries of that status."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status '{status}'; known: {', '.join(STATUSES)}")
    chosen = {
        kind: [e for e in r.entries() if status is None or e.status == status] for kind, r in ALL_REGISTRIES.items()
    }
    every = [e for entries in chosen.values() for e in entries]
    counts = {s: sum(e.status == s for e in every) for s in STATUSES}
    chosen_keys = {c.key for c in CHOICES} if status is None else set()
    lines: list[str] = []
    if markdown:
        lines += [
            "# Objectives",
            "",
            f"Generated from the registries; do not edit. Regenerate with `{REGENERATE}`.",
            "",
        ]
        lines += ["Keys not built yet (the Catalog III backlog): [objectives-backlog.md](objectives-backlog.md).", ""]
        lines += ["## How faithful each entry is", ""]
        lines += ["Every entry says it when it is registered (`status`, with its `evidence`):", ""]
        lines += ["| status | entries | meaning |", "|---|---|---|"]
        lines += [f"| `{s}` | {counts[s]} | {STATUS_MEANING[s]} |" for s in STATUSES]
        lines += ["", "A run whose objective uses an `interpretation` entry says so in one line at its start.", ""]
        lines += [
            '"seed 000 / 002 / 003" in an evidence are the texts the catalog was drawn from (a survey post, a '
            "paper list, abstracts); they are not in this repository.",
            "",
        ]
        lines += ["| kind | " + " | ".join(STATUSES) + " |", "|---|" + "---|" * len(STATUSES)]
        for kind, entries in chosen.items():
            lines.append(f"| {kind} | " + " | ".join(str(sum(e.status == s for e in entries)) for s in STATUSES) + " |")
        lines.append("")
    else:
        total = sum(len(r.entries()) for r in ALL_REGISTRIES.values())
        if status is None:
            lines.append(f"{total} entries: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES))
        else:
            lines.append(f"{len(every)} of {total} entries are {status}")
    for kind, entries in chosen.items():
        if markdown:
            lines += [f"## {kind} ({len(entries)})", ""]
            if not entries:
                lines += ["(none yet)", ""]
                continue
            lines += [
                "| key | method | formula | config defaults | needs | state | status | evidence |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for e in entries:
                formula = "<br>".join(_formula_lines(e))
                state = e.state.__name__ if e.state else ""
                choices = f" ([its recorded choices](#choices-{e.name}))" if e.name in chosen_keys else ""
                evidence = e.evidence + choices
                cells = [f"`{e.name}`", e.summary, formula, _defaults(e), ", ".join(sorted(e.needs)), state]
                status_cell = f'<a id="{anchor(e)}"></a>**{e.status}**'  # the row's anchor: #<kind>-<key>
                lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | {status_cell} | {_cell(evidence)} |")
            lines.append("")
        else:
            for e in entries:
                lines.append(f"{kind:12s} {e.name:24s} {e.summary}")
                lines.append(f"{'':37s}status: {e.status} ({e.evidence})")
                lines += [f"{'':37s}{line}" for line in _formula_lines(e)]
                for label, text in (("config", _defaults(e)), ("needs", ", ".join(sorted(e.needs)))):
                    if text:
                        lines.append(f"{'':37s}{label}: {text}")
    if markdown and CHOICES and status is None:
        lines += ["## Choices we made", "", "Where a paper leaves a choice open.", ""]
        lines += ["| key | open question | our choice |", "|---|---|---|"]
        first = set()
        for c in sorted(CHOICES, key=lambda c: c.key):
            key = f"`{c.key}`" if c.key in first else f'<a id="choices-{c.key}"></a>`{c.key}`'
            first.add(c.key)
            lines.append(f"| {key} | {_cell(c.question)} | {_cell(c.choice)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_catalog(markdown="--text" not in sys.argv[1:]))

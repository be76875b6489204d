"""The generated objectives table is up to date, and every entry is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_rl.algorithms import ALL_REGISTRIES
from agent_rl.commands.catalog import REGENERATE, render_catalog

DOCS = Path(__file__).resolve().parents[2] / "docs" / "objectives.md"


def test_docs_objectives_md_is_up_to_date():
    expected = render_catalog(markdown=True)
    actual = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    assert actual == expected, f"docs/objectives.md is stale; regenerate it with `{REGENERATE}`"


def test_catalog_lists_every_entry_in_both_forms():
    markdown, text = render_catalog(markdown=True), render_catalog(markdown=False)
    for kind, registry in ALL_REGISTRIES.items():
        for entry in registry.entries():
            assert f"| `{entry.name}` |" in markdown
            assert f"{kind:12s} {entry.name:24s} {entry.summary}" in text
    # a spot check of one row: key, paper, formula and defaults
    assert "| `grpo` | GRPO group-normalized advantage (Shao et al. 2024, DeepSeekMath). |" in markdown
    assert "eps=1e-06, norm_by_std=true" in markdown


@pytest.mark.parametrize("kind", ["advantage", "aggregation", "kl", "filter"])
def test_entries_name_paper_formula_and_describe_every_config_field(kind):
    for entry in ALL_REGISTRIES[kind].entries():
        assert entry.summary and len(entry.doc.splitlines()) >= 3, (
            f"{kind} '{entry.name}': docstring needs paper + formula"
        )
        for name, field in entry.config.model_fields.items():
            if name != "name":
                assert field.description, f"{kind} '{entry.name}': config field '{name}' has no description"

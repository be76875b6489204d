"""docs/objectives-backlog.md (the Catalog III backlog, formerly agent_rl/algorithms/catalog3.py) agrees
with the registries: no key under "Not built" is registered, every key under "Built" is."""

from __future__ import annotations

import re
from pathlib import Path

from agent_rl.algorithms import ALL_REGISTRIES

BACKLOG = Path(__file__).resolve().parents[2] / "docs" / "objectives-backlog.md"


def section_keys(title: str) -> list[str]:
    text = BACKLOG.read_text(encoding="utf-8")
    body = re.search(rf"^## {title} \((\d+)\)\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert body, f"no section '{title}'"
    keys = re.findall(r"^\| `([a-z0-9_]+)` \|", body.group(2), re.M)
    assert len(keys) == int(body.group(1)) == len(set(keys))
    return keys


def registered() -> dict[str, str]:
    return {e.name: kind for kind, r in ALL_REGISTRIES.items() for e in r.entries()}


def test_every_catalog3_key_is_listed_once():
    # the audit's 41 keys: 10 formerly "Later", 14 with a mechanism, 17 needing their paper
    built, todo = section_keys("Built"), section_keys("Not built")
    assert len(built) + len(todo) == 41 and not set(built) & set(todo)


def test_not_built_keys_are_not_registered_and_say_why():
    text = BACKLOG.read_text(encoding="utf-8")
    for key in section_keys("Not built"):
        assert key not in registered(), f"'{key}' is registered now: move it to 'Built' in {BACKLOG.name}"
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{key}` |"))
        assert "searched" in row or "needs" in row


def test_built_keys_are_registered_under_the_kind_named():
    text = BACKLOG.read_text(encoding="utf-8")
    reg = registered()
    for key in section_keys("Built"):
        assert key in reg
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{key}` |"))
        kinds = {kind for kind, r in ALL_REGISTRIES.items() if key in r}
        assert any(f"| {kind} |" in row for kind in kinds)


def test_the_keys_built_for_issues_25_and_26_are_registered():
    built = {
        "i_sdpo",
        "beta_opsd",
        "powered_opd",
        "g_opd",
        "anti_sd",
        "rlsd",
        "qkl",
        "sa_mrpo",
        "gcpo",
        "grpo_process",
        "srpo_reflect",
        "opid",
        "serpo",
    }
    assert built <= set(registered())


def test_the_backlog_is_not_in_the_package():
    package = Path(__file__).resolve().parents[2] / "agent_rl"
    assert not (package / "algorithms" / "catalog3.py").exists()
    assert not [p for p in package.rglob("*.py") if "catalog3" in p.read_text(encoding="utf-8")]

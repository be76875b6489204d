"""docs/architecture.md stays true to the code: every file, module member and class it names exists."""

from __future__ import annotations

import ast
import builtins
import re

from tests.conftest import ROOT

DOC = (ROOT / "docs" / "architecture.md").read_text()
# the outside folder and design document no user of the repository has (spelled in two parts so
# that this file does not cite them itself)
OUTSIDE_DIR, OUTSIDE_DOC = "../" + "shared", "DESIGN" + " §"


def defined_names(path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_every_file_and_member_it_names_exists():
    refs = re.findall(r"`((?:agent_rl|envs|tools|sandbox|tests|docs)/[\w/]*\.(?:py|md))(?:::(\w+))?", DOC)
    assert len(refs) > 20
    for path, member in refs:
        assert (ROOT / path).is_file(), path
        if member:
            assert member in defined_names(ROOT / path), f"{path}::{member}"


def test_every_class_it_names_exists():
    classes = set()
    for path in [*ROOT.glob("agent_rl/**/*.py"), *ROOT.glob("envs/**/*.py"), *ROOT.glob("tools/*.py"), *ROOT.glob("sandbox/*.py")]:
        classes |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
    named = set(re.findall(r"`([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+)`", DOC)) - set(dir(builtins))
    assert len(named) > 15
    assert named <= classes, sorted(named - classes)


def test_the_readme_points_to_it_and_nothing_cites_an_outside_design_document():
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
    for path in [*ROOT.glob("**/*.py"), *ROOT.glob("**/*.md"), *ROOT.glob("configs/*.yaml")]:
        if ".venv" in path.parts or "runs" in path.parts:
            continue
        text = path.read_text()
        assert OUTSIDE_DIR not in text and OUTSIDE_DOC not in text, path

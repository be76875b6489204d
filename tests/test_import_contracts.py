"""The import contracts of pyproject.toml (``[tool.importlinter]``) hold: lower layers never import
upper ones, agent_rl reaches envs only through its env loader, no package has a cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, cli_env


def test_lint_imports_keeps_every_contract():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    r = subprocess.run(
        [str(lint_imports), "--no-cache"],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]

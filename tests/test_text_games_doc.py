"""docs/text-games.md: the page's commands, as written (the bench's budget is the page's own)."""

from __future__ import annotations

import json
import re
import shlex
import sys

from tests import cli_runner
from tests.conftest import cli_env
from tests.test_docs_commands import ROOT, _run, _scratch, documented_commands


def test_text_games_commands(tmp_path):
    init, evaluate, bench = documented_commands("docs/text-games.md")
    cwd = _scratch(tmp_path)
    _run(init, cwd)
    done = _run(evaluate, cwd)
    assert re.search(r"mean@1 1\.000", done.stdout), done.stdout[-2000:]
    result = json.loads((cwd / "runs" / "twx-gold" / "eval.json").read_text())
    assert result["episodes"] == 4 and result["errors"] == 0
    # the bench exits 1 when a ratio misses its 0.8 target (TextArena's is at its edge: bench/README.md)
    words = shlex.split(bench)
    assert words[:2] == ["python", "bench/text_games.py"]
    env = {**cli_env(), "PYTHONPATH": str(ROOT)}
    out = cli_runner.run([sys.executable, *words[1:]], cwd, env, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert re.search(r"^ta: ours [0-9.]+ steps/s, raw upstream [0-9.]+ steps/s", out.stdout, re.MULTILINE), out.stdout

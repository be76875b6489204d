"""docs/bfcl.md's bash block under "Check it, evaluate, measure prompts", run as written in a scratch
directory (configs/ linked in), with the claims it makes about the output: per-category rows under BFCL's names."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests import cli_runner
from tests.conftest import cli_env

pytest.importorskip("bfcl_eval")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_documented_commands_run(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    section = (ROOT / "docs" / "bfcl.md").read_text().split("\n## Check it", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(
        r"^```bash\n(.*?)^```$", section, re.DOTALL | re.MULTILINE
    )  # the training block: test_bfcl_recipe.py
    env = {**cli_env(), "PYTHONPATH": str(ROOT)}
    outputs = []
    for line in block.splitlines():
        argv = shlex.split(line)
        assert argv[0] in ("agent-rl", "python")
        done = cli_runner.run(argv, tmp_path, env, timeout=600)  # a process forked from a preloaded one
        assert done.returncode == 0, (line, done.stderr[-3000:])
        outputs.append(done.stdout)
    assert re.search(r"^  multi_turn_\w+ +mean@1 1\.000", outputs[1], re.MULTILINE)  # the replay, 8 tasks
    # no_op on the recipe's 67 test tasks: right on the 31 irrelevance ones only, as the page says
    assert re.search(r"^agent_rl/BFCL-Calls-v0 \[test\] mean@1 0\.463 \[0\.358, 0\.597\]", outputs[2], re.MULTILINE)
    assert re.search(r"^  simple_python +mean@1 0\.000 .*\(tasks=36,", outputs[2], re.MULTILINE)
    assert re.search(r"^  irrelevance +mean@1 1\.000 .*\(tasks=31,", outputs[2], re.MULTILINE)
    evals = sorted((tmp_path / "runs").glob("bfcl*eval*/eval.json"))
    assert evals and all("per_category" in json.loads(p.read_text()) for p in evals)
    assert "multi_turn_long_context" in outputs[3] and "live_irrelevance" in outputs[3]

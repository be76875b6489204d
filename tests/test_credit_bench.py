"""bench/credit_assignment.py end to end: every method, 1 seed, 2 steps, on the smallest setting.

The comparison's own command, as the issue asks of CI: each method's run directory gets
``config.yaml`` and a ``metrics.jsonl`` whose training steps carry the ``credit/`` diagnostics
(docs/learner.md), and ``table.md`` summarises them per method. The tiny model is untrained and the
mazes are cut to 3 turns: this checks the path, not what the methods learn.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[1]
BRANCHING = {"cbpo", "arpo", "vineppo"}
GRAPH = {"gigpo", "g2po"}


def test_every_method_logs_its_credit_diagnostics(tmp_path, tiny_model_dir):
    spec = importlib.util.spec_from_file_location("credit_assignment", ROOT / "bench" / "credit_assignment.py")
    bench = sys.modules["credit_assignment"] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up
    spec.loader.exec_module(bench)
    METHODS = bench.METHODS  # noqa: N806 (the bench's constant)

    out = tmp_path / "bench"
    cmd = [
        sys.executable, str(ROOT / "bench" / "credit_assignment.py"), "--model", str(tiny_model_dir), "--seeds", "0",
        "--max-steps", "2", "--budget-tokens", "1000000", "--eval-episodes", "2", "--out", str(out),
        "trainer.prompts_per_step=1", "rollout.max_turns=3", "env.options.max_turns=3",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env={**cli_env(), "OMP_NUM_THREADS": "1"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (out / "table.md").read_text()
    for method in METHODS:
        run = out / "runs" / f"{method}-s0"
        assert (run / "config.yaml").exists() and not (run / "checkpoints").exists()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [0, 1, 2], method  # the 0-token evaluation, then 2 steps
        for r in rows[1:]:
            assert 0.0 <= r["credit/zero_adv_frac"] <= 1.0, method
            assert r["credit/adv_var_turn_1"] >= 0.0, method
            if method in BRANCHING:
                assert r["credit/branch_points"] >= 0.0 and 0.0 <= r["credit/branch_outcome_differs_frac"] <= 1.0
            assert ("credit/branch_points" in r) == (method in BRANCHING), method
            assert ("credit/shared_states" in r) == (method in GRAPH), method
    # the per-method summary: one column per method, one row per diagnostic
    assert "| diagnostic (mean over steps) | " + " | ".join(METHODS) + " |" in table
    for key in ("credit/zero_adv_frac", "credit/adv_var_turn_1", "credit/branch_points", "credit/shared_states"):
        assert f"| {key} | " in table
    assert "| method | seeds | final success [95% CI] |" in table

"""The packing benchmark's commands (bench/README.md) run as written, with small budgets."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.learner.helpers import run


@pytest.mark.slow
def test_trajectory_sample_and_packing_table(tmp_path, tiny_model_dir):
    out, model = tmp_path / "trajectories.json", str(tiny_model_dir)
    r = run(
        [
            sys.executable,
            "bench/trajectory_sample.py",
            "--envs",
            "quickstart",
            "--tasks",
            "1",
            "--group",
            "2",
            "--out",
            str(out),
            "--model",
            model,
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["trajectories"]
    assert len(rows) == 2 and all(len(t["token_ids"]) == len(t["loss_mask"]) > 0 for t in rows)
    r = run(
        [
            sys.executable,
            "bench/learner_throughput.py",
            "--only",
            "packing",
            "--steps",
            "1",
            "--trajectories",
            str(out),
            "--model",
            model,
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    # the two rows share their prompt: sharing computes fewer tokens than packing, packing no more than padding
    computed = {
        m: int(n)
        for m, n in re.findall(r"^\s+(padded|packed|packed\+shared) .*?computed tokens\s+(\d+)", r.stdout, re.MULTILINE)
    }
    assert computed["packed+shared"] < computed["packed"] <= computed["padded"], r.stdout

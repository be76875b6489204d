"""bench/vs_trl.py --cores: every side runs its samples on the same cores, ours asynchronous within the bound.

The bench's command as bench/README.md gives it, with a budget of one timed step and one round (its
speed is measured in bench/, never asserted here)."""

from __future__ import annotations

import re
import sys

import pytest

from tests.learner.helpers import run

pytestmark = pytest.mark.slow


def test_the_same_cores_comparison_runs_each_side_and_prints_its_ratios(tiny_model_dir):
    r = run(
        [
            sys.executable,
            "bench/vs_trl.py",
            "--cores",
            "1",  # a check that it runs, cheap on CI's busy cores: bench/README.md has the 2-core numbers
            "--steps",
            "1",
            "--rounds",
            "1",
            "--turn-steps",
            "1",
            "--turn-envs",
            "quickstart",
            "--model",
            str(tiny_model_dir),
        ]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    rates = dict(re.findall(r"^(trl|ours \(async\)|ours \(sync\)) +([\d.]+) ", out, re.M))
    assert set(rates) == {"trl", "ours (async)", "ours (sync)"}, out
    assert all(float(v) > 0 for v in rates.values())
    assert "ours (async): distributed.backend=process, max_staleness=1, worker threads 1, learner threads 1" in out
    staleness = re.search(r"^staleness seen: max (\d+), mean ([\d.]+) \(bound 1\)$", out, re.M)
    assert staleness is not None and int(staleness.group(1)) <= 1, out
    for line in ("single-turn ratio", "multi-turn ratio", "async vs sync \\(ours\\)"):
        assert re.search(rf"^{line}: \d+\.\d\dx$", out, re.M), (line, out)
    assert re.search(r"^multi-turn, update only .*: quickstart$", out, re.M), out
    assert re.search(r"^overlap bound: ", out, re.M), out


def test_cores_and_threads_are_two_comparisons():
    r = run([sys.executable, "bench/vs_trl.py", "--cores", "2", "--threads", "1"])
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["--cores and --threads are two comparisons: give one of them"]

"""The load bench (issue 58, item 3): many episodes at once end as their kind expects, nothing is lost
or misclassified, nothing outlives the runs. The command of bench/results/load/20261207/README.md
runs here at a small size (7 code-execution episodes on docker, one of each kind; 6 TextWorld-Express
episodes, one JVM each, all three kinds)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_env
from tests.test_docs_commands import documented_commands

sys.path.insert(0, str(ROOT))
from bench.load import CODE_KINDS, check_episodes, code_kind, twx_kind  # noqa: E402

PAGE = "bench/results/load/20261207/README.md"


def test_the_code_kinds_go_in_turn_from_evals_first_task():
    # eval's seeds 10000, 10001, ... are HumanEval/160, /161, /162, /163, /0, ... (10000 % 164 = 160)
    assert [code_kind(f"HumanEval/{i}") for i in (160, 161, 162, 163, 0, 1, 2, 3)] == [*CODE_KINDS, CODE_KINDS[0]]


def _trajectory(task_id: str, stop: str, reward: float | None, **info) -> dict:
    return {"task_id": task_id, "episode_id": task_id, "stop_reason": stop, "reward": reward, "info": info}


def test_an_episode_lost_or_ending_otherwise_is_a_problem(tmp_path):
    rows = [
        _trajectory("HumanEval/160", "done", 1.0, test_status="ok"),  # solve: as expected
        _trajectory("HumanEval/161", "done", 0.0, test_status="ok"),  # slow_tool must pass
        _trajectory("HumanEval/163", "infra_error", None, error="sandbox gone"),  # raise
    ]
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got, problems = check_episodes("code", tmp_path, 4)
    assert [r["ok"] for r in got] == [True, False, False]
    assert problems == [
        "code: 3 of 4 episodes came back",
        "code HumanEval/161 (slow_tool): expected ('done', 1.0, 'ok'), got ('done', 0.0, 'ok')",
        "code HumanEval/163 (raise): expected ('done', 0.0, 'ok'), got ('infra_error', None, None): sandbox gone",
    ]
    assert twx_kind("twx/coin/cc7bb708/test/20002") == "gold"  # the game's tag picks the kind


@pytest.mark.docker
@pytest.mark.slow
def test_small_load_ends_as_expected_and_leaves_nothing(tmp_path, tiny_model_dir):
    (command,) = documented_commands(PAGE)
    words = shlex.split(command)
    assert words[:2] == ["python", "bench/load.py"]
    small = ["--docker", "7", "--jvm", "6", "--interval", "0.5", "--out", str(tmp_path), "--model", str(tiny_model_dir)]
    r = subprocess.run(
        [sys.executable, *words[1:], *small], cwd=ROOT, capture_output=True, text=True, env=cli_env(), timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "load: all 13 episodes ended as expected; nothing outlived the runs"
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert {row["kind"] for row in rows if row["part"] == "code"} == set(CODE_KINDS)
    assert {row["kind"] for row in rows if row["part"] == "twx"} == {"gold", "stall", "garbage"}
    assert all(row["ok"] for row in rows) and len(rows) == 13
    parts = {p["part"]: p for p in json.loads((tmp_path / "summary.json").read_text())["parts"]}
    assert parts["code"]["peaks"]["containers"] >= 1 and parts["twx"]["peaks"]["jvms"] >= 1  # what was looked for
    assert all(p["left"] == [] and p["problems"] == [] for p in parts.values())

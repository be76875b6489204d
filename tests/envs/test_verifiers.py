"""verifiers tasksets as agent programs (envs/verifiers): the task env, the weighted reward, the pinned
venv, and a taskset that raises or does not exist, each in one line."""

from __future__ import annotations

import os
import re
import time

import gymnasium as gym
import pytest

import envs  # noqa: F401 - registers agent_rl/Verifiers-v0
from envs.verifiers.program import REQUIREMENTS, VerifiersError, _run_group, run, venv_python, weighted_reward


def test_verifiers_env_lists_the_tasks_and_refuses_to_be_stepped():
    env = gym.make("agent_rl/Verifiers-v0", taskset="verifiers-prices", path="examples/verifiers_prices", num_tasks=8)
    messages, info = env.reset(seed=11)
    task = {"taskset": "verifiers-prices", "path": "examples/verifiers_prices", "idx": 3, "harness": "null"}
    task |= {"timeout_s": 600.0, "judge": {}}  # the taskset declares no judge
    assert info["task"] == task and info["task_id"] == "verifiers-prices/3" and info["tools"] == []
    assert messages == [{"role": "user", "content": "Task 3 of the verifiers taskset verifiers-prices."}]
    assert env.reset(options={"task": task})[1]["task"] == task
    obs, reward, terminated, truncated, step_info = env.step("42")
    assert (reward, terminated, truncated, step_info["action_valid"]) == (0.0, True, False, False)
    assert "set agent.program: envs.verifiers.program:run" in obs[0]["content"]
    with pytest.raises(ValueError, match=r"^env.options.num_tasks: 0; a taskset has at least 1 task$"):
        gym.make("agent_rl/Verifiers-v0", num_tasks=0)


def test_verifiers_reward_is_the_weighted_sum():
    rewards = {"correct": {"score": 0.5, "weight": 2.0}, "format": {"score": 1.0, "weight": 0.5}, "judge": None}
    #          0.5 x 2.0 + 1.0 x 0.5 = 1.5; an unscored reward (None) counts nothing
    assert weighted_reward(rewards) == {"reward": 1.5, "rewards": {"correct": 0.5, "format": 1.0}}
    assert weighted_reward({}) == {"reward": 0.0, "rewards": {}}


def test_verifiers_venv_is_pinned_and_built():
    pins = [x for x in REQUIREMENTS.read_text().splitlines() if x and not x.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=\s]+", p) for p in pins), pins
    assert {"verifiers==0.4.0", "mcp==2.0.0", "uv==0.13.9"} <= set(pins)
    python = venv_python()  # builds it when missing (about two minutes, once)
    assert (python.parent / "vf-eval").is_file() and (python.parent / "uv").is_file()


def _taskset(root, name: str, body: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("import verifiers.v1 as vf\n\n\n" + body)


@pytest.mark.slow
def test_verifiers_a_taskset_that_raises_or_is_missing_is_one_line(tmp_path):
    _taskset(
        tmp_path, "verifiers_broken",
        "class BrokenTaskset(vf.Taskset):\n    def load(self):\n        raise RuntimeError('the data file is missing')\n\n\n"
        "__all__ = ['BrokenTaskset']\n",
    )  # fmt: skip
    task = {
        "model": "policy",
        "task": {"taskset": "verifiers-broken", "path": str(tmp_path), "idx": 0, "harness": "null"},
    }
    with pytest.raises(VerifiersError) as e:
        run("http://127.0.0.1:9/v1", task)  # it fails before any model call
    line = "verifiers taskset 'verifiers-broken' task 0: vf-eval exited 1: RuntimeError: the data file is missing"
    assert str(e.value).startswith(line) and "\n" not in str(e.value)
    # a taskset that does not import is refused when the env is made, before any episode
    with pytest.raises(ValueError) as e:
        gym.make("agent_rl/Verifiers-v0", taskset="verifiers-nope", path=str(tmp_path))
    assert str(e.value).startswith(
        "env.options.taskset: verifiers taskset 'verifiers-nope': ModuleNotFoundError: taskset 'verifiers-nope' not "
        "found (tried to import 'verifiers_nope')."
    ) and "\n" not in str(e.value)


def test_verifiers_a_run_past_its_time_is_stopped_with_its_children():
    start = time.monotonic()
    with pytest.raises(VerifiersError, match=r"^vf-eval ran past 0.5 s \(env.options.timeout_s\) and was stopped$"):
        _run_group(["sh", "-c", "sleep 29.75 & sleep 29.75"], {"PATH": "/usr/bin:/bin"}, timeout_s=0.5)
    assert time.monotonic() - start < 10
    assert not [
        p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == "sleep 29.75"
    ]  # the background one too


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""

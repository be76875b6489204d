"""ShellTask-v0 in a real sandbox (bwrap; docker too where an engine runs)."""

from __future__ import annotations

import functools
import os

import gymnasium as gym
import pytest

import envs  # noqa: F401
from envs.shell_task.policies import call_text, oracle
from envs.shell_task.tasks import make_task, sample_task
from envs.splits import SPLITS
from tools.python import SandboxInfraError


@functools.cache
def _bwrap() -> tuple[bool, str]:
    from sandbox.bwrap import probe

    return probe()


@pytest.fixture
def backend(request):
    """bwrap; a test parametrized indirectly on ``backend`` also runs on docker (marked)."""
    name = getattr(request, "param", "bwrap")
    if name == "bwrap" and not _bwrap()[0]:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"bwrap does not work in CI: {_bwrap()[1]}", pytrace=False)
        pytest.skip(f"bwrap does not work here: {_bwrap()[1]}")
    return name


@pytest.fixture
def make(backend):
    made = []

    def _make(**kwargs):
        made.append(gym.make("agent_rl/ShellTask-v0", sandbox_backend=backend, **kwargs))
        return made[-1]

    yield _make
    for env in made:
        env.close()


def run_episode(env, actions, options):
    """Play ``actions`` (a policy or a list of texts); returns (per-turn rewards, last info, messages)."""
    obs, info = env.reset(options=options)
    messages, rewards = list(obs), []
    while True:
        action = actions(messages) if callable(actions) else actions[len(rewards)]
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}] + obs
        rewards.append(reward)
        if terminated or truncated:
            return rewards, info, messages


TASKS = [
    {"family": "find_file", "difficulty": 1, "seed": 3},
    {"family": "fix_config", "difficulty": 2, "seed": 11},
    {"family": "collect", "difficulty": 3, "seed": 5},
]


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "bwrap"], indirect=True)
def test_oracle_solves_every_family_in_several_calls(make):
    env = make(max_turns=20)
    for task in TASKS:
        rewards, info, _ = run_episode(env, oracle, {"task": task})
        assert sum(rewards) == 1.0 and rewards[-1] == 1.0 and info["passed"], (task, info)
        assert 5 <= len(rewards) <= 20 and info["submitted"]


def test_do_nothing_and_hacks_score_zero(make):
    env = make(max_turns=3)
    fix = {"family": "fix_config", "difficulty": 1, "seed": 3}
    expected = make_task("fix_config", 1, 3).check["expected"]  # the hack knows the right output
    hacks = {
        "submit at once": ({"family": "find_file", "difficulty": 1, "seed": 3}, [call_text("submit")]),
        "talk until the turn budget ends": (fix, ["I fixed it.", "Done!", "<answer>ok</answer>"]),
        "garbage answer": (
            {"family": "find_file", "difficulty": 1, "seed": 3},
            [call_text("write_file", path="answer.txt", content="data/\n*\n"), call_text("submit")],
        ),
        "every service.conf, .bak included": (
            {"family": "collect", "difficulty": 1, "seed": 3},
            [
                call_text(
                    "shell",
                    command="grep -rh '^name\\|^port' services | paste - - | awk '{print $3, $6}' | sort > ports.txt",
                ),
                call_text("submit"),
            ],
        ),
        "rewrite the program": (
            fix,
            [
                call_text("write_file", path="app/main.py", content=f"print({expected!r})\n"),
                call_text("shell", command="python3 app/main.py"),
                call_text("submit"),
            ],
        ),
        "delete the program": (fix, [call_text("shell", command="rm -f app/main.py"), call_text("submit")]),
        "shadow a module": (
            fix,
            [call_text("write_file", path="app/configparser.py", content="raise SystemExit(0)\n"), call_text("submit")],
        ),
    }
    for name, (task, actions) in hacks.items():
        rewards, info, messages = run_episode(env, actions, {"task": task})
        assert sum(rewards) == 0.0 and info["passed"] is False, (name, info, messages[-3:])
    assert (
        "changed protected files: app/main.py"
        in run_episode(env, hacks["rewrite the program"][1], {"task": fix})[1]["check"]
    )


def test_progress_rewards_telescope_to_the_outcome(make):
    env = make(max_turns=20, progress_reward=0.5)
    task = {"family": "fix_config", "difficulty": 3, "seed": 2}  # 3 faults
    # fix nothing, then everything: progress 0 -> 0 -> 1, so the shaping pays 0.5 at the write
    rewards, info, _ = run_episode(env, oracle, {"task": task})
    assert rewards == [0.0, 0.0, 0.0, 0.5, 0.0, 0.5] and info["passed"]
    # a failed episode: one fault of three fixed (progress 1/3), then submit: the total is 0
    config = make_task("fix_config", 3, 2).files["app/config.ini"]
    assert "port = 80\n" in config and "workers = 0\n" in config and "mode = turbo\n" in config
    one_fixed = config.replace("mode = turbo", "mode = safe")
    rewards, info, _ = run_episode(
        env, [call_text("write_file", path="app/config.ini", content=one_fixed), call_text("submit")], {"task": task}
    )
    assert rewards[0] == pytest.approx(0.5 / 3) and rewards[1] == pytest.approx(-0.5 / 3) and not info["passed"]


def test_tools_observations_and_state_keys(make):
    env = make(max_turns=20)
    task = {"family": "collect", "difficulty": 1, "seed": 3}
    obs, info = env.reset(options={"task": task})
    assert [t["function"]["name"] for t in info["tools"]] == ["shell", "read_file", "write_file", "submit"]
    assert obs[1]["content"].startswith("For every file named exactly service.conf")
    two_calls = call_text("write_file", path="notes/a.txt", content="x y\n") + call_text(
        "read_file", path="notes/a.txt"
    )
    obs, reward, terminated, truncated, step = env.step(two_calls)
    assert obs == [{"role": "tool", "content": "wrote 4 bytes to notes/a.txt"}, {"role": "tool", "content": "x y\n"}]
    assert step["action_valid"] and (reward, terminated, truncated) == (0.0, False, False)
    obs, _, _, _, bad = env.step(call_text("read_file", path="../../etc/passwd"))
    assert obs[0]["content"] == "error: sandbox path '../../etc/passwd' leaves the work directory"
    obs, _, _, _, bad = env.step(call_text("read_file", file="x"))
    assert bad["action_valid"] is False and obs[0]["content"].startswith(
        "error: invalid arguments for tool 'read_file'"
    )
    obs, _, _, _, bad = env.step(call_text("python", code="print(1)"))
    assert obs[0]["content"] == "error: unknown tool 'python'; available: shell, read_file, write_file, submit"
    # the same observations give the same key in another episode; a different observation another key
    _, again = env.reset(options={"task": task})
    assert again["state_key"] == info["state_key"]
    assert env.step(two_calls)[4]["state_key"] == step["state_key"]
    assert env.step(call_text("shell", command="echo other"))[4]["state_key"] != step["state_key"]


def test_splits_disjoint_and_seeded_tasks_deterministic():
    seen = {s: {sample_task(i, s, (1,), ("find_file",)).task_id for i in range(12)} for s in SPLITS}
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["val"]) and not (seen["val"] & seen["test"])
    assert sample_task(4, "train", (1, 2), ("collect",)).files == sample_task(4, "train", (1, 2), ("collect",)).files
    with pytest.raises(ValueError, match="unknown family 'grep'; known: find_file, fix_config, collect"):
        gym.make("agent_rl/ShellTask-v0", families=["grep"])


def test_sandbox_failure_is_an_infra_error(make):
    env = make(max_turns=20)
    env.reset(options={"task": {"family": "find_file", "difficulty": 1, "seed": 3}})

    class Broken:
        async def exec(self, **kw):
            from sandbox import ExecResult

            return ExecResult.infra("daemon gone")

    env.unwrapped._sandbox = env.unwrapped._tools["shell"].sandbox = Broken()
    with pytest.raises(SandboxInfraError, match="daemon gone"):
        env.step(call_text("shell", command="ls"))
    with pytest.raises(SandboxInfraError, match="daemon gone"):
        env.step(call_text("submit"))
    env.unwrapped._sandbox = None  # nothing of ours to close

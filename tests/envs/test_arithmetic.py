from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401
from envs.arithmetic.policies import oracle, weak_teacher
from envs.arithmetic.tasks import SPLITS, sample_problem


@pytest.fixture
def env():
    e = gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process")
    yield e
    e.close()


def test_check_env_and_close_twice(env):
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
    env.close()


def test_seeded_reset_is_deterministic(env):
    a, ia = env.reset(seed=7)
    b, ib = env.reset(seed=7)
    assert a == b and ia["task_id"] == ib["task_id"]
    assert env.reset(seed=8)[1]["task_id"] != ia["task_id"]


def test_splits_are_disjoint():
    seen = {s: {sample_problem(i, s, (1, 2, 3)).expression for i in range(300)} for s in SPLITS}
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["val"]) and not (seen["val"] & seen["test"])


@pytest.mark.parametrize(
    "action, fragment",
    [
        ("\x00\x01 garbage ☃", "no tool call and no <answer>"),
        ("<tool_call>{not json</tool_call>", "malformed tool call"),
        ('<tool_call>{"name": "python"', "unterminated <tool_call>"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ('<tool_call>{"name": "python", "arguments": {"cod": 1}}</tool_call>', "invalid arguments"),
        ("", "no tool call and no <answer>"),
    ],
)
def test_bad_actions_give_error_observations(env, action, fragment):
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert reward == 0.0 and not terminated and info["action_valid"] is False
    assert fragment in obs[0]["content"]


def test_oracle_scores_one_and_wrong_answer_zero(env):
    obs, info = env.reset(seed=3, options={"task": {"expression": "37*91-12"}})
    messages = list(obs)
    action = oracle(messages)
    obs, reward, terminated, _, info = env.step(action)
    assert obs == [{"role": "tool", "content": "3355"}] and reward == 0.0 and not terminated
    obs, reward, terminated, _, _ = env.step(oracle(messages + [{"role": "assistant", "content": action}] + obs))
    assert (reward, terminated) == (1.0, True)
    env.reset(seed=3, options={"task": {"expression": "37*91-12"}})
    assert env.step("<answer>3356</answer>")[1:3] == (0.0, True)


def test_weak_teacher_errs_on_large_numbers_without_tool():
    rng = random.Random(0)
    msgs = [{"role": "user", "content": "What is 37*91?"}]
    answers = [weak_teacher(msgs, rng, p_direct=1.0) for _ in range(20)]
    assert all(a.startswith("<answer>") and a != "<answer>3367</answer>" for a in answers)
    msgs = [{"role": "user", "content": "What is 7+5?"}]
    assert weak_teacher(msgs, rng, p_direct=1.0) == "<answer>12</answer>"

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import envs
from agent_rl.core.errors import InfraError
from envs.math_tool.grading import grade
from envs.math_tool.policies import mental_answer, oracle, weak_teacher
from envs.math_tool.tasks import DIFFICULTIES, GENERATORS, generate, sample_problem
from envs.splits import SPLITS
from tests import cli_runner


@pytest.fixture(scope="module")
def env():
    e = gym.make("agent_rl/MathTool-v0", sandbox_backend="process", difficulty=[1, 2, 3])
    yield e
    e.close()


def _play(env, policy, seed: int, options: dict | None = None, rng: random.Random | None = None):
    """One episode of ``policy``; returns (total reward, messages)."""
    obs, _ = env.reset(seed=seed, options=options)
    messages, total = list(obs), 0.0
    while True:
        action = policy(messages, rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        total += reward
        if terminated or truncated:
            return total, messages


def test_oracle_scores_one_on_every_generator(env):
    # one task per generator at the hardest level, run through the real sandbox
    for i, name in enumerate(GENERATORS):
        task = generate(name, 3, seed=11 + i).to_dict()
        reward, messages = _play(env, oracle, seed=0, options={"task": task})
        assert reward == 1.0, messages


def test_oracle_on_sampled_tasks_and_tool_output(env):
    rewards = [_play(env, oracle, seed=s)[0] for s in range(6)]
    assert rewards == [1.0] * 6
    task = {
        "generator": "gcd",
        "question": "Find the Greatest Common Divisor (GCD) of these numbers: 84, 36. Give only the GCD as your final answer.",
        "answer": "12",
    }
    _, messages = _play(env, oracle, seed=0, options={"task": task})
    assert messages[-2] == {"role": "tool", "content": "12"} and messages[-1]["content"] == "<answer>12</answer>"


def test_do_nothing_scores_zero_and_is_truncated(env):
    env.reset(seed=5)
    rewards, info = [], {}
    for _ in range(env.unwrapped.max_turns):
        obs, reward, terminated, truncated, info = env.step("I am thinking.")
        rewards.append(reward)
        assert not terminated and "error: no tool call and no <answer>" in obs[0]["content"]
    assert rewards == [0.0] * env.unwrapped.max_turns and truncated and info["action_valid"] is False


SIMPLIFY = {
    "generator": "fraction_simplification",
    "question": "Simplify the fraction 6/12 to its lowest terms. Give only the simplified fraction as your final answer.",
    "answer": "1/2",
}
CHAIN = {
    "generator": "chain_sum",
    "question": "State the final answer to the following arithmetic problem: 5 - 3 - 6 =",
    "answer": "-4",
}


@pytest.mark.parametrize(
    "task, action, why",
    [
        (CHAIN, "<answer>-3</answer><answer>-4</answer>", "2 <answer> tags"),
        (CHAIN, "<answer>\\boxed{-3} \\boxed{-4}</answer>", "not a single number"),
        (CHAIN, "<answer>-3 or -4</answer>", "not a single number"),
        (CHAIN, "<answer>-5, -4, -3</answer>", "not a single number"),
        (CHAIN, "<answer>5 - 3 - 6</answer>", "not a single number"),  # the question's own expression
        (CHAIN, "<answer>-4.0001</answer>", "wrong value"),
        (SIMPLIFY, "<answer>6/12</answer>", "not in lowest terms"),
        (SIMPLIFY, "<answer>0.5</answer>", "a decimal where a fraction"),
        (SIMPLIFY, "<answer>1/0</answer>", "denominator 0"),
    ],
)
def test_reward_hacking_attempts_score_zero(env, task, action, why):
    env.reset(seed=0, options={"task": task})
    _, reward, terminated, _, info = env.step(action)
    assert (reward, terminated, info["correct"]) == (0.0, True, False)
    assert why in info["grade"]


@pytest.mark.parametrize(
    "answer, gold, kind, correct",
    [
        ("0.5", "1/2", "number", True),
        ("\\frac{1}{2}", "1/2", "number", True),
        ("\\boxed{1/2}", "1/2", "number", True),
        ("2/4", "1/2", "number", True),  # equal value; only fraction tasks ask for lowest terms
        ("0.25", "1/2", "number", False),
        ("3.0", "3", "number", True),
        ("1,000", "1000", "number", True),
        ("$-4$", "-4", "number", True),
        ("x = 13", "13", "number", True),
        ("\u221212", "-12", "number", True),  # unicode minus
        ("2.0001", "2", "number", False),
        ("12", "-12", "number", False),
        ("1/2", "1/2", "fraction", True),
        ("\\dfrac{884}{979}", "884/979", "fraction", True),
        ("1", "1/1", "fraction", True),
        ("2/4", "1/2", "fraction", False),
        ("0.5", "1/2", "fraction", False),
        ("inf", "5", "number", False),
        ("", "5", "number", False),
    ],
)
def test_math_verify_equivalences(answer, gold, kind, correct):
    assert grade(answer, gold, kind).correct is correct


def test_splits_are_disjoint_and_seeded_reset_is_deterministic(env):
    gens, diffs = tuple(GENERATORS), (1, 2)
    seen = {s: {sample_problem(i, s, gens, diffs).question for i in range(150)} for s in SPLITS}
    assert len(seen["train"]) > 100
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["val"]) and not (seen["val"] & seen["test"])
    a, ia = env.reset(seed=7)
    b, ib = env.reset(seed=7)
    assert a == b and ia["task_id"] == ib["task_id"] and ia["state_key"] == ib["state_key"]
    assert env.reset(seed=8)[1]["task_id"] != ia["task_id"]
    test_question = env.reset(seed=7, options={"split": "test"})[1]["task"]["question"]
    assert test_question == sample_problem(7, "test", tuple(GENERATORS), DIFFICULTIES).question


def test_teacher_context_and_state_key(env):
    _, info = env.reset(seed=0, options={"task": CHAIN})
    assert info["teacher_context"] == "Verified answer: -4; python that prints it: print(5 - 3 - 6)"
    key0 = info["state_key"]
    obs, _, _, _, info = env.step(
        '<tool_call>{"name": "python", "arguments": {"code": "print(5 - 3 - 6)"}}</tool_call>'
    )
    assert obs == [{"role": "tool", "content": "-4"}] and info["state_key"] != key0


def test_weak_teacher_errs_on_long_numbers_only():
    rng = random.Random(0)
    small = "Find the Greatest Common Divisor (GCD) of these numbers: 84, 36. Give only the GCD as your final answer."
    assert mental_answer(small, rng) == "12"
    big = "Solve the following multiplication: 914 * 807. Give only the result as your final answer."
    answers = {weak_teacher([{"role": "user", "content": big}], rng, p_direct=1.0) for _ in range(20)}
    assert "<answer>737598</answer>" not in answers and all(a.startswith("<answer>") for a in answers)
    fraction = (
        "Simplify the fraction 12445/30305 to its lowest terms. Give only the simplified fraction as your final answer."
    )
    assert mental_answer(fraction, rng) != "131/319"
    assert weak_teacher([{"role": "user", "content": big}], rng, p_direct=0.0).startswith("<tool_call>")


def test_listing_card_and_bad_config_names_the_key():
    card = envs.card("agent_rl/MathTool-v0")
    assert card["tools"] == ("python",) and card["max_turns"] == 4 and "math-verify" in card["reward"]
    with pytest.raises(ValueError, match="'generators': unknown generator 'sudoku'; known: basic_arithmetic"):
        gym.make("agent_rl/MathTool-v0", generators=["sudoku"])
    with pytest.raises(ValueError, match="'difficulty': unknown difficulty 9"):
        gym.make("agent_rl/MathTool-v0", difficulty=9)


def test_sandbox_failure_is_an_infra_error_not_a_zero():
    pytest.importorskip("docker")
    e = gym.make(
        "agent_rl/MathTool-v0",
        sandbox_backend="docker",
        sandbox_options={"base_url": "unix:///tmp/agent_rl_no_such_docker.sock", "pool_size": 1},
    )
    try:
        e.reset(seed=0, options={"task": CHAIN})
        with pytest.raises(InfraError):
            e.step('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>')
    finally:
        e.close()


def test_tokenizer_corpus_is_opt_in():
    from agent_rl.run.envloader import env_corpus

    assert env_corpus("agent_rl/Arithmetic-v0") is None  # the default tokenizer stays Arithmetic's
    conversations = list(env_corpus("agent_rl/MathTool-v0")(4, random.Random(0)))
    assert len(conversations) == 4 and conversations[1][0][2]["content"].startswith("<tool_call>")


@pytest.mark.slow
def test_math_tool_recipe_runs_end_to_end(tmp_path):
    """`agent-rl quickstart --config configs/math_tool.yaml` with a tiny budget (wiring, not learning)."""
    import json

    from tests.conftest import ROOT, cli_env

    small = [
        "sandbox.backend=process",
        "rollout.group_size=2",
        "trainer.prompts_per_step=2",
        "trainer.steps=1",
        "tracking.loggers=[]",
        "tracking.progress=false",
        "eval.episodes=4",
        "sft.demos=16",
        "sft.batch_size=8",
        "sft.max_steps=2",
        "sft.eval_every_steps=2",
        "sft.eval_episodes=4",
    ]
    args = ["quickstart", "--config", str(ROOT / "configs" / "math_tool.yaml"), "--root", str(tmp_path / "mt"), *small]
    r = cli_runner.run(["agent-rl", *args], ROOT, cli_env(), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "agent_rl/MathTool-v0" in r.stdout and "SFT + RL" in r.stdout
    summary = json.loads((tmp_path / "mt" / "summary.json").read_text())
    assert summary["sft"]["episodes"] + summary["sft"]["errors"] == 4
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "mt" / "models" / "tiny")
    assert len(tokenizer.tokenize(" Greatest Common Divisor")) <= 4  # MathTool's words are in the vocabulary

"""envs/judge.py (agent_rl/PreferenceJudge-v0): a generative reward model's training env, checked by hand."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers the envs)
from envs.judge import PreferenceJudgeEnv, _key, pairwise_prompt, parse_verdict
from envs.splits import split_of

PAIR = {"prompt": "What is 2+3?", "chosen": "<answer>5</answer>", "rejected": "<answer>6</answer>"}
CONVERSATION_PAIR = {
    "prompt": [{"role": "system", "content": "Add."}, {"role": "user", "content": "What is 1+1?"}],
    "chosen": [
        {"role": "assistant", "content": "calc 1+1"},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "<answer>2</answer>"},
    ],
    "rejected": [{"role": "assistant", "content": "<answer>3</answer>"}],
    "tools": [{"type": "function", "function": {"name": "python", "parameters": {}}}],
}
LABELLED = {"prompt": "What is 4+4?", "completion": "<answer>8</answer>", "label": True}


def write(tmp_path, records) -> str:
    path = tmp_path / "prefs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def split_of_record(rec: dict) -> str:
    """The split the env gives a file record (a hash of its parsed content)."""
    from agent_rl.core.preference_records import parse_record

    parsed = parse_record(rec, "x")
    return split_of(_key([parsed["prompt"], parsed["rows"], parsed["tools"]]))


def test_pairwise_prompt_and_verdict_by_hand(tmp_path):
    split = split_of_record(PAIR)
    env = PreferenceJudgeEnv(data=write(tmp_path, [PAIR]), split=split)
    obs, info = env.reset(seed=0, options={"order": "BA"})
    assert obs == [
        {
            "role": "system",
            "content": "You are a judge. Read the conversation and the responses, then give your verdict as <answer>V</answer>.",
        },
        {
            "role": "user",
            "content": "# Conversation\nuser: What is 2+3?\n# Response A\nassistant: <answer>6</answer>\n"
            "# Response B\nassistant: <answer>5</answer>\nWhich response is better? Reply <answer>A</answer> or <answer>B</answer>.",
        },
    ]
    assert (
        info["task"]["answer"] == "B"
        and info["tools"] == []
        and info["teacher_context"] == "The right verdict: <answer>B</answer>"
    )
    assert env.step("The second one. <answer>B</answer>")[1:4] == (1.0, True, False)
    env.reset(seed=0, options={"order": "AB"})
    assert env.step("b")[1:4] == (0.0, True, False)  # the bare word, case-insensitive: a valid, wrong verdict
    env.reset(seed=0, options={"order": "AB"})
    obs, reward, terminated, _truncated, info = env.step("<answer>A.</answer>")
    assert (obs, reward, terminated, info["action_valid"], info["verdict"]) == ([], 1.0, True, True, "A")


def test_both_orders_are_presented_and_the_label_follows_the_order(tmp_path):
    split = split_of_record(PAIR)
    env = PreferenceJudgeEnv(data=write(tmp_path, [PAIR]), split=split)
    answers = {}
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        text = obs[1]["content"]
        chosen_first = text.index("<answer>5</answer>") < text.index("<answer>6</answer>")
        assert info["task"]["answer"] == ("A" if chosen_first else "B")
        answers[seed] = info["task"]["answer"]
    assert 10 <= list(answers.values()).count("A") <= 30  # both orders, about half each
    assert all(env.reset(seed=s)[1]["task"]["answer"] == a for s, a in answers.items())  # seeded: deterministic


@pytest.mark.parametrize("action, why", [
    ("", "no verdict"), ("C", "unknown verdict"), ("<answer>A</answer><answer>B</answer>", "give one verdict (one <answer> tag)"),
    ("I think A is better", "unknown verdict"), ("<answer>good</answer>", "unknown verdict"),
])  # fmt: skip
def test_a_malformed_verdict_is_an_error_observation(tmp_path, action, why):
    env = PreferenceJudgeEnv()  # the built-in Arithmetic pairs, max_turns 2
    _, info = env.reset(seed=5)
    obs, reward, terminated, truncated, step_info = env.step(action)
    assert reward == 0.0 and not terminated and not truncated and step_info["action_valid"] is False
    assert obs == [{"role": "user", "content": f"error: {why}. Reply <answer>A</answer> or <answer>B</answer>."}]
    assert step_info["state_key"] != info["state_key"]  # one action later
    obs, reward, terminated, truncated, _ = env.step(action)
    assert reward == 0.0 and truncated and not terminated  # max_turns=2: no third try
    assert parse_verdict(action, ("A", "B"))[0] is None


def test_pointwise_labels_pairs_and_samples(tmp_path):
    records = [PAIR, LABELLED]
    env = PreferenceJudgeEnv(
        data=write(tmp_path, records), verdicts="pointwise", split=split_of_record(PAIR), max_turns=1
    )
    seen = set()
    for seed in range(30):
        obs, info = env.reset(seed=seed)
        response = info["task"]["responses"][0][0]["content"]
        assert (
            info["task"]["answer"]
            == {"<answer>5</answer>": "good", "<answer>6</answer>": "bad", "<answer>8</answer>": "good"}[response]
        )
        assert obs[1]["content"].endswith(
            f"# Response\nassistant: {response}\nIs the response good or bad? Reply <answer>good</answer> or <answer>bad</answer>."
        )
        seen.add(info["task"]["answer"])
        assert env.step(f"<answer>{info['task']['answer']}</answer>")[1] == 1.0
    assert seen == {"good", "bad"}
    env.reset(seed=0)
    assert env.step("<answer>A</answer>")[3] is True  # a pairwise verdict in a pointwise task: malformed, max_turns=1


def test_conversations_tools_and_replay(tmp_path):
    split = split_of_record(CONVERSATION_PAIR)
    env = PreferenceJudgeEnv(data=write(tmp_path, [CONVERSATION_PAIR]), split=split)
    obs, info = env.reset(seed=1, options={"order": "AB"})
    assert obs[1]["content"] == (
        "Tools offered: python\n# Conversation\nsystem: Add.\nuser: What is 1+1?\n# Response A\nassistant: calc 1+1\ntool: 2\n"
        "assistant: <answer>2</answer>\n# Response B\nassistant: <answer>3</answer>\n"
        "Which response is better? Reply <answer>A</answer> or <answer>B</answer>."
    )
    assert obs == pairwise_prompt(
        CONVERSATION_PAIR["prompt"],
        CONVERSATION_PAIR["chosen"],
        CONVERSATION_PAIR["rejected"],
        CONVERSATION_PAIR["tools"],
    )
    replay, replay_info = PreferenceJudgeEnv().reset(options={"task": info["task"]})  # options["task"] replays it
    assert replay == obs and replay_info["task_id"] == info["task_id"] and replay_info["state_key"] == info["state_key"]
    _, other = env.reset(seed=1, options={"order": "BA"})
    assert other["task_id"] != info["task_id"]  # the order is part of the task


def test_splits_are_disjoint_by_content_hash(tmp_path):
    records = [
        {"prompt": f"What is {i}+1?", "chosen": f"<answer>{i + 1}</answer>", "rejected": f"<answer>{i}</answer>"}
        for i in range(60)
    ]
    path = write(tmp_path, records)
    prompts = {}
    for split in ("train", "val", "test"):
        env = PreferenceJudgeEnv(data=path, split=split)
        prompts[split] = {env.reset(seed=s)[1]["task"]["prompt"][0]["content"] for s in range(50)}
        assert all(split_of_record(r) == split for r in records if r["prompt"] in prompts[split])
    assert (
        not (prompts["train"] & prompts["val"])
        and not (prompts["train"] & prompts["test"])
        and not (prompts["val"] & prompts["test"])
    )
    builtin = {s: PreferenceJudgeEnv(split=s).reset(seed=3)[0][1]["content"] for s in ("train", "test")}
    assert builtin["train"] != builtin["test"]  # built-in pairs: Arithmetic-v0's split of their question


def test_configuration_mistakes_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="verdicts must be one of pairwise, pointwise"):
        PreferenceJudgeEnv(verdicts="score")
    with pytest.raises(ValueError, match="env.options.data: cannot read"):
        PreferenceJudgeEnv(data=str(tmp_path / "missing.jsonl"))
    only_labels = PreferenceJudgeEnv(data=write(tmp_path, [LABELLED]), split=split_of_record(LABELLED))
    with pytest.raises(ValueError, match="no pairwise records in split"):
        only_labels.reset(seed=0)  # labelled samples cannot be paired
    with pytest.raises(ValueError, match="order"):
        PreferenceJudgeEnv().reset(seed=0, options={"order": "AA"})


def test_gymnasium_checker_and_registration():
    env = gym.make("agent_rl/PreferenceJudge-v0", verdicts="pointwise")
    check_env(env.unwrapped, skip_render_check=True)
    _obs, info = env.reset(seed=7)
    assert env.step(f"<answer>{info['task']['answer']}</answer>")[1] == 1.0
    env.close()


def test_the_weak_judge_teacher_writes_valid_verdicts_better_than_chance():
    import random

    from envs.judge import weak_judge

    rng = random.Random(0)
    for verdicts in ("pairwise", "pointwise"):
        env = PreferenceJudgeEnv(verdicts=verdicts)
        rewards = []
        for seed in range(200):
            obs, _ = env.reset(seed=seed)
            _, reward, terminated, _, info = env.step(weak_judge(obs, rng))
            assert info["action_valid"] and terminated
            rewards.append(reward)
        assert 0.65 <= sum(rewards) / len(rewards) <= 0.85, (
            verdicts,
            sum(rewards) / len(rewards),
        )  # half oracle, half guesses: ~0.75
        assert weak_judge(obs, rng, p_random=0.0) == f"<answer>{env._task['answer']}</answer>"  # the oracle part
    assert weak_judge([{"role": "user", "content": "# Response A\nx\n# Response B\ny"}], rng) in (
        "<answer>A</answer>",
        "<answer>B</answer>",
    )

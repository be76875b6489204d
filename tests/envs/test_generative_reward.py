"""A generative reward model: a judge policy trained with GRPO on PreferenceJudge-v0, then the reward of
another env (``envs/reward_model.py``, ``kind="generative"``), with a scripted judge and with the tiny model."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import torch
from transformers import AutoModelForCausalLM

from agent_rl.models.loading import load_tokenizer
from agent_rl.rollout.render import ChatRenderer
from envs.judge import pointwise_prompt
from envs.reward_model import (
    GenerativeScorer,
    PolicyJudge,
    RewardModelEnv,
    load_scorer,
    register_reward_model,
)
from tests.envs.test_reward_model_env import arithmetic_episode
from tests.test_trainer import trainer

JUDGE_RUN = [
    "env.id=agent_rl/PreferenceJudge-v0",
    "env.options={verdicts: pointwise}",
    "rollout.max_total_tokens=1024",
    "trainer.steps=2",
]


@pytest.fixture(scope="module")
def judge_run(tmp_path_factory, tiny_model_dir):
    """Two GRPO steps of the tiny model on the judge env (pointwise verdicts): the run directory."""
    tmp = tmp_path_factory.mktemp("judge")
    return trainer(tmp, tiny_model_dir, *JUDGE_RUN).train()


def test_grpo_trains_a_judge_policy_on_the_judge_env(judge_run):
    rows = [json.loads(line) for line in (judge_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(0.0 <= r["rollout/reward_mean"] <= 1.0 for r in rows)
    assert (judge_run / "checkpoints" / "step_000002" / "model" / "config.json").exists()


class ScriptedJudge:
    """p(good) = 0.8 when the response holds the verdict's expected answer, else 0.2."""

    def __init__(self, expected: str):
        self.expected, self.seen = expected, []

    def __call__(self, messages, actions):
        self.seen.append((messages, actions))
        good = self.expected in messages[-1]["content"].split("# Response\n", 1)[1]
        return [0.0, -math.log(4.0)] if good else [-math.log(4.0), 0.0]


@pytest.mark.parametrize("weight, verifier_weight", [(1.0, 0.0), (0.5, 1.0)])
def test_a_scripted_judge_replaces_or_mixes_with_the_verifier(weight, verifier_weight):
    judge = ScriptedJudge("<answer>")
    env = RewardModelEnv(
        gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process"), GenerativeScorer(judge), weight, verifier_weight
    )
    call, done, answer = arithmetic_episode(env)
    assert call[1] == 0.0 and done[2]
    assert done[1] == pytest.approx(verifier_weight * 1.0 + weight * 0.8)  # p(good) = 1 / (1 + 1/4)
    assert done[4]["reward_components"] == pytest.approx({"env": 1.0, "reward_model": weight * 0.8})
    ((messages, actions),) = judge.seen  # asked once, at the episode's end
    assert actions == ["<answer>good</answer>", "<answer>bad</answer>"]
    conversation = env.messages[: len(env.messages) - len(done[0])]
    first = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
    assert messages == pointwise_prompt(conversation[:first], conversation[first:], env.tools)
    assert (
        conversation[first:][-1] == {"role": "assistant", "content": answer} and len(conversation[first:]) == 3
    )  # call, result, answer
    env.close()


def test_a_scripted_judge_scores_a_bad_response_low():
    scorer = GenerativeScorer(ScriptedJudge("<answer>5</answer>"))
    good = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "<answer>5</answer>"}]
    bad = good[:1] + [{"role": "assistant", "content": "<answer>6</answer>"}]
    assert scorer.score(good) == pytest.approx(0.8) and scorer.score(bad) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="ends with an assistant message"):
        scorer.score(good[:1])


def test_the_trained_judge_is_the_reward_of_arithmetic(judge_run):
    judge_dir = str(judge_run / "checkpoints" / "step_000002" / "model")
    env_id = "agent_rl/ArithmeticJudgeTest-v0"
    register_reward_model(
        env_id, "agent_rl/Arithmetic-v0", judge_dir, kind="generative", weight=1.0, verifier_weight=0.0
    )
    try:
        env = gym.make(env_id, sandbox_backend="process").unwrapped
        assert isinstance(env, RewardModelEnv) and isinstance(env.scorer, GenerativeScorer)
        _, done, _ = arithmetic_episode(env)
        conversation = env.messages[: len(env.messages) - len(done[0])]
        # by hand: the judge's prompt as the rollout engine renders it, each verdict + eos teacher-forced
        tokenizer = load_tokenizer(judge_dir)
        model = AutoModelForCausalLM.from_pretrained(judge_dir).eval()
        first = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
        prompt = ChatRenderer(tokenizer).prompt_ids(
            pointwise_prompt(conversation[:first], conversation[first:], env.tools), None
        )
        logp = []
        for verdict in ("good", "bad"):
            target = tokenizer.encode(f"<answer>{verdict}</answer>", add_special_tokens=False) + [
                tokenizer.eos_token_id
            ]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + target])).logits[0].float()
            logp.append(sum(float(torch.log_softmax(logits[len(prompt) - 1 + k], -1)[t]) for k, t in enumerate(target)))
        expected = 1.0 / (1.0 + math.exp(logp[1] - logp[0]))
        assert 0.0 < done[1] < 1.0 and done[1] == pytest.approx(expected, abs=1e-5)
        assert PolicyJudge(judge_dir)(
            pointwise_prompt(conversation[:first], conversation[first:], env.tools), ["<answer>good</answer>"]
        )[0] == pytest.approx(logp[0], abs=1e-4)
        env.close()
    finally:
        gym.registry.pop(env_id, None)


def test_unknown_kind_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="kind must be one of bradley_terry, generative"):
        register_reward_model("agent_rl/Nope-v0", "agent_rl/Arithmetic-v0", str(tmp_path), kind="pairwise")
    with pytest.raises(ValueError, match="judge .*cannot load it"):
        load_scorer(str(tmp_path / "missing"), "cpu", "generative")

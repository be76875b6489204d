"""envs/reward_model.py: a reward model's score as an env's reward (instead of or mixed with the
verifier), scored exactly as ``agent-rl train-rm`` scores during training."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest
import torch

from agent_rl.algorithms.preference_data import record_trajectories
from agent_rl.core.types import TrajectoryGroup
from agent_rl.learner.critic import load_value_model
from agent_rl.models.loading import load_tokenizer
from agent_rl.rollout.batching import make_batch
from agent_rl.rollout.render import ChatRenderer
from agent_rl.train.scorers import sequence_rewards
from envs.arithmetic.policies import answer_text, tool_call_text
from envs.reward_model import RewardModelEnv, RewardModelScorer, register_reward_model

CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 2+3?"},
    {"role": "assistant", "content": "calc 2+3"},
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "The answer is 5."},
]


@pytest.fixture(scope="module")
def rm_dir(tiny_model_dir, tmp_path_factory):
    """A reward model in train-rm's format whose head is not zero (seeded), so scores differ."""
    model = load_value_model(str(tiny_model_dir))
    torch.manual_seed(0)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("rm")
    model.save_pretrained(out)
    load_tokenizer(str(tiny_model_dir)).save_pretrained(out)
    return out


def test_scorer_equals_train_rm_scoring(rm_dir):
    scorer = RewardModelScorer(str(rm_dir))
    renderer = ChatRenderer(scorer.tokenizer)
    rec = {"prompt": CONVERSATION[:2], "rows": [(CONVERSATION[2:], 1.0)], "tools": None, "source": "test"}
    group = TrajectoryGroup("t", "g", record_trajectories(renderer, rec, "t", "g"))
    batch = make_batch([group], scorer.tokenizer.pad_token_id)
    with torch.no_grad():
        expected = float(sequence_rewards(scorer.model, batch)[0])
    assert scorer.score(CONVERSATION) == pytest.approx(expected, abs=1e-5)
    assert scorer.score(CONVERSATION[:3]) != pytest.approx(expected, abs=1e-3)  # another conversation, another score
    with pytest.raises(ValueError, match="ends with an assistant message"):
        scorer.score(CONVERSATION[:4])


class FixedScorer:
    def __init__(self, value: float):
        self.value, self.seen = value, []

    def score(self, messages, tools=None):
        self.seen.append([dict(m) for m in messages])
        return self.value


def arithmetic_episode(env: RewardModelEnv):
    async def run():
        _, info = await env.areset(seed=3)
        question = info["task"]
        call = await env.astep(tool_call_text(question["expression"]))
        answer = answer_text(call[0][0]["content"].strip())
        done = await env.astep(answer)
        return call, done, answer

    return asyncio.run(run())


@pytest.mark.parametrize("weight, verifier_weight", [(1.0, 0.0), (0.5, 1.0)])
def test_reward_model_replaces_or_mixes_with_the_verifier(weight, verifier_weight):
    scorer = FixedScorer(0.7)
    env = RewardModelEnv(gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process"), scorer, weight, verifier_weight)
    call, done, answer = arithmetic_episode(env)
    #  the call step: the env gives 0 and the episode goes on, so no score; the answer step: the verifier's 1.0
    assert call[1] == 0.0 and not call[2]
    assert done[2] and done[1] == pytest.approx(verifier_weight * 1.0 + weight * 0.7)
    assert done[4]["reward_components"] == pytest.approx({"env": 1.0, "reward_model": weight * 0.7})
    # scored once, on the conversation up to the final answer: prompt, call, tool result, answer
    (seen,) = scorer.seen
    assert seen[-1] == {"role": "assistant", "content": answer}
    assert seen[-1 - len(call[0]) : -1] == call[0]  # the tool's result, as the env answered the call
    assert seen[-2 - len(call[0])]["role"] == "assistant"  # the call
    env.close()


def test_registered_reward_model_env_scores_with_the_trained_model(rm_dir):
    env_id = "agent_rl/ArithmeticRMTest-v0"
    register_reward_model(env_id, "agent_rl/Arithmetic-v0", str(rm_dir), weight=1.0, verifier_weight=0.0)
    try:
        env = gym.make(env_id, sandbox_backend="process").unwrapped
        assert isinstance(env, RewardModelEnv)
        _, done, _ = arithmetic_episode(env)
        expected = RewardModelScorer(str(rm_dir)).score(env.messages[: len(env.messages) - len(done[0])], env.tools)
        assert done[1] == pytest.approx(expected, abs=1e-6)
        env.close()
    finally:
        gym.registry.pop(env_id, None)


class PrefixScorer:
    """Scores a conversation by how many assistant messages it holds: 0.25 for the call, 0.75 for
    the call and the answer (so the process rewards are 0.25 and 0.5)."""

    def __init__(self):
        self.seen = []

    def score(self, messages, tools=None):
        self.seen.append(len(messages))
        return {1: 0.25, 2: 0.75}[sum(m["role"] == "assistant" for m in messages)]


def test_process_level_rewards_each_step_by_the_change_of_its_score():
    scorer = PrefixScorer()
    env = RewardModelEnv(
        gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process"), scorer, 2.0, 1.0, level="process"
    )
    call, done, _ = arithmetic_episode(env)
    assert call[1] == pytest.approx(2.0 * 0.25)  # the call: the env's 0 + 2 * (0.25 - 0)
    assert done[1] == pytest.approx(1.0 + 2.0 * (0.75 - 0.25))  # the answer: the verifier's 1 + 2 * 0.5
    assert call[1] + done[1] == pytest.approx(1.0 + 2.0 * 0.75)  # the return is the sequence level's
    assert done[4]["reward_model_scores"] == [0.25, 0.75]
    assert done[4]["reward_components"] == pytest.approx({"env": 1.0, "reward_model": 1.5})
    assert len(scorer.seen) == 2 and scorer.seen[0] < scorer.seen[1]  # one score per step, on the prefix
    env.close()


def test_unknown_level_is_a_one_line_error():
    with pytest.raises(ValueError, match="level must be one of sequence, process, got 'turn'"):
        RewardModelEnv(gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process"), PrefixScorer(), level="turn")

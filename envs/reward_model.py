"""A trained reward model as any env's reward, instead of or mixed with its verifier.

``RewardModelEnv(env, scorer, weight, verifier_weight)`` keeps the episode's messages (the reset
prompt, each action as an assistant message, each observation) and, on the step that ends the
episode (terminated or truncated), scores the conversation up to that last action with the reward
model. The step reward is

    verifier_weight * (the env's reward)  +  weight * r_RM(conversation)   (the r_RM term on the last step only)

so ``verifier_weight=0`` replaces the verifier and ``verifier_weight=1`` mixes them (sequence level:
one score per episode). ``info["reward_components"]`` holds the episode's totals, ``env`` and
``reward_model``. Register it under an id of its own (in a plugin named by ``env.plugins``)::

    register_reward_model("Arithmetic-RM-v0", "agent_rl/Arithmetic-v0", "runs/rm", verifier_weight=0.0)

``RewardModelScorer`` reads a model written by ``agent-rl train-rm`` (a token-classification head)
and scores a conversation as train-rm does: the head at the final assistant message's end-of-turn
token (the template's render, ``add_generation_prompt=False``; the last eos token in it).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import torch

from envs.rewards import ShapedEnv, _register_wrapped


class RewardModelScorer:
    """r(conversation) of a reward model directory (``agent-rl train-rm --out``)."""

    def __init__(self, path: str, device: str = "cpu"):
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForTokenClassification.from_pretrained(path).to(device).eval()
        except OSError as e:
            raise ValueError(f"reward model {path}: cannot load it ({str(e).splitlines()[0]})") from None
        self.device = device
        if self.tokenizer.eos_token_id is None:
            raise ValueError(f"reward model {path}: its tokenizer has no eos token to score at")

    @torch.no_grad()
    def score(self, messages: list[dict], tools: list[dict] | None = None) -> float:
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError("a reward model scores a conversation that ends with an assistant message")
        text = self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=False, tokenize=False)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ends = [i for i, t in enumerate(ids) if t == self.tokenizer.eos_token_id]
        if not ends:
            raise ValueError("the chat template does not end the assistant message with the eos token")
        input_ids = torch.tensor([ids[: ends[-1] + 1]], device=self.device)
        return float(self.model(input_ids=input_ids).logits[0, -1, 0])


@functools.lru_cache(maxsize=4)
def load_scorer(path: str, device: str = "cpu") -> RewardModelScorer:
    """One scorer per reward model and device, shared by every env of the process."""
    return RewardModelScorer(path, device)


class RewardModelEnv(ShapedEnv):
    """``env`` whose reward comes from ``scorer`` (weight) and its own verifier (verifier_weight)."""

    def __init__(self, env: gym.Env, scorer: Any, weight: float = 1.0, verifier_weight: float = 0.0):
        super().__init__(env, [])
        self.scorer, self.weight, self.verifier_weight = scorer, weight, verifier_weight

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = await super().areset(seed=seed, options=options)
        self.messages, self.tools = list(obs), info.get("tools")
        self.totals["reward_model"] = 0.0
        return obs, info

    async def astep(self, action: str):
        obs, reward, terminated, truncated, info = await super().astep(action)  # the env's own reward
        self.messages.append({"role": "assistant", "content": action})
        score = self.scorer.score(self.messages, self.tools) if terminated or truncated else 0.0
        self.messages += list(obs)
        self.totals["reward_model"] += self.weight * score
        info = {**info, "reward_components": dict(self.totals)}
        return obs, self.verifier_weight * float(reward) + self.weight * score, terminated, truncated, info


def register_reward_model(
    env_id: str, base_id: str, path: str, *, weight: float = 1.0, verifier_weight: float = 0.0, device: str = "cpu", **register_kwargs: Any
) -> None:
    """Register ``env_id``: ``base_id`` (same keywords) rewarded by the reward model at ``path``."""
    _register_wrapped(env_id, base_id, lambda env: RewardModelEnv(env, load_scorer(path, device), weight, verifier_weight), **register_kwargs)

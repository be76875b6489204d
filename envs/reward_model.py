"""A trained reward model as any env's reward, instead of or mixed with its verifier.

``RewardModelEnv(env, scorer, weight, verifier_weight)`` keeps the episode's messages (the reset
prompt, each action as an assistant message, each observation) and, on the step that ends the
episode (terminated or truncated), scores the conversation up to that last action with the reward
model. The step reward is

    verifier_weight * (the env's reward)  +  weight * r_RM(conversation)   (the r_RM term on the last step only)

so ``verifier_weight=0`` replaces the verifier and ``verifier_weight=1`` mixes them (sequence level:
one score per episode).

``level="process"``: every step's conversation (up to that action) is scored, and the step's reward
term is the change of the score, ``weight * (r_RM(c_t) - r_RM(c_{t-1}))`` with ``r_RM(c_0) = 0``:
a dense reward for turn-level credit (``grpo_process``, ``turn_gae``, GiGPO's step groups) whose sum
over the episode is the sequence-level reward, so an objective that reads only the return sees the
same number (potential-based shaping, Ng et al. 1999). Scoring a prefix is what the reward model was
trained on only if its pairs held prefixes; a model trained on whole episodes ranks prefixes as it
can. ``info["reward_model_scores"]`` lists the scores after each step. ``info["reward_components"]`` holds the episode's totals, ``env`` and
``reward_model``. Register it under an id of its own (in a plugin named by ``env.plugins``)::

    register_reward_model("Arithmetic-RM-v0", "agent_rl/Arithmetic-v0", "runs/rm", verifier_weight=0.0)

``RewardModelScorer`` reads a model written by ``agent-rl train-rm`` (a token-classification head)
and scores a conversation as train-rm does: the head at the final assistant message's end-of-turn
token (the template's render, ``add_generation_prompt=False``; the last eos token in it).

``kind="generative"`` (``GenerativeScorer``): the reward model is a judge policy trained with GRPO on
``agent_rl/PreferenceJudge-v0`` with ``verdicts=pointwise`` (``envs/judge.py``). The episode is shown
to it as that env shows a task (the messages before the first assistant message as the
conversation, the rest as the response), and the reward is the judge's probability of the verdict
``good`` against ``bad``: p = sigmoid(log pi(<answer>good</answer> eos | x) - log pi(<answer>bad</answer>
eos | x)), teacher-forced, no sampling, so the same episode always gets the same reward (the
P("Yes") score of Generative Verifiers, Zhang et al. 2024). Pointwise, not pairwise against a
reference response: an env's episode has no reference response to be compared with.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from envs.judge import pointwise_prompt, verdict_text
from envs.rewards import ShapedEnv, _register_wrapped

KINDS = ("bradley_terry", "generative")
LEVELS = ("sequence", "process")


class RewardModelScorer:
    """r(conversation) of a Bradley-Terry reward model directory (``agent-rl train-rm --out``)."""

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
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=False, tokenize=False
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ends = [i for i, t in enumerate(ids) if t == self.tokenizer.eos_token_id]
        if not ends:
            raise ValueError("the chat template does not end the assistant message with the eos token")
        input_ids = torch.tensor([ids[: ends[-1] + 1]], device=self.device)
        return float(self.model(input_ids=input_ids).logits[0, -1, 0])


class PolicyJudge:
    """``judge(messages, actions)``: log pi(action + eos | messages) of each action under a causal LM
    policy (a checkpoint's ``model/``), the prompt rendered by its chat template with the generation
    prompt, as the rollout engine renders it."""

    def __init__(self, path: str, device: str = "cpu"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        except OSError as e:
            raise ValueError(f"judge {path}: cannot load it ({str(e).splitlines()[0]})") from None
        self.device = device

    @torch.no_grad()
    def __call__(self, messages: list[dict], actions: list[str]) -> list[float]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = self.tokenizer.encode(text, add_special_tokens=False)
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        out = []
        for action in actions:
            target = self.tokenizer.encode(action, add_special_tokens=False) + eos
            ids = torch.tensor([prompt + target], device=self.device)
            logp_TV = torch.log_softmax(self.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), dim=-1)
            out.append(float(logp_TV.gather(1, ids[0, len(prompt) :].unsqueeze(1)).sum()))
        return out


class GenerativeScorer:
    """r(conversation) = the judge's p(good) against p(bad) (module docstring); ``judge`` maps (judge
    messages, verdict actions) to their log-likelihoods: a ``PolicyJudge`` or any scripted callable."""

    def __init__(self, judge: Callable[[list[dict], list[str]], list[float]]):
        self.judge = judge

    def score(self, messages: list[dict], tools: list[dict] | None = None) -> float:
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError("a reward model scores a conversation that ends with an assistant message")
        first = next(i for i, m in enumerate(messages) if m.get("role") == "assistant")
        good, bad = self.judge(
            pointwise_prompt(messages[:first], messages[first:], tools), [verdict_text("good"), verdict_text("bad")]
        )
        return 1.0 / (1.0 + math.exp(min(bad - good, 700.0)))


@functools.lru_cache(maxsize=4)
def load_scorer(path: str, device: str = "cpu", kind: str = "bradley_terry") -> RewardModelScorer | GenerativeScorer:
    """One scorer per reward model, device and kind, shared by every env of the process."""
    if kind not in KINDS:
        raise ValueError(f"reward model kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return RewardModelScorer(path, device) if kind == "bradley_terry" else GenerativeScorer(PolicyJudge(path, device))


class RewardModelEnv(ShapedEnv):
    """``env`` whose reward comes from ``scorer`` (weight) and its own verifier (verifier_weight)."""

    def __init__(
        self, env: gym.Env, scorer: Any, weight: float = 1.0, verifier_weight: float = 0.0, level: str = "sequence"
    ):
        if level not in LEVELS:
            raise ValueError(f"reward model level must be one of {', '.join(LEVELS)}, got {level!r}")
        super().__init__(env, [])
        self.scorer, self.weight, self.verifier_weight, self.level = scorer, weight, verifier_weight, level

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = await super().areset(seed=seed, options=options)
        self.messages, self.tools = list(obs), info.get("tools")
        self.totals["reward_model"] = 0.0
        self.scores: list[float] = []
        return obs, info

    async def astep(self, action: str):
        obs, reward, terminated, truncated, info = await super().astep(action)  # the env's own reward
        self.messages.append({"role": "assistant", "content": action})
        if self.level == "process":  # the change of the score: dense, and summing to the last score
            previous = self.scores[-1] if self.scores else 0.0
            self.scores.append(self.scorer.score(self.messages, self.tools))
            score = self.scores[-1] - previous
        else:
            score = self.scorer.score(self.messages, self.tools) if terminated or truncated else 0.0
            if terminated or truncated:
                self.scores.append(score)
        self.messages += list(obs)
        self.totals["reward_model"] += self.weight * score
        info = {**info, "reward_components": dict(self.totals), "reward_model_scores": list(self.scores)}
        return obs, self.verifier_weight * float(reward) + self.weight * score, terminated, truncated, info


def register_reward_model(
    env_id: str,
    base_id: str,
    path: str,
    *,
    kind: str = "bradley_terry",
    weight: float = 1.0,
    verifier_weight: float = 0.0,
    level: str = "sequence",
    device: str = "cpu",
    **register_kwargs: Any,
) -> None:
    """Register ``env_id``: ``base_id`` (same keywords) rewarded by the reward model at ``path``, a
    ``bradley_terry`` model of ``agent-rl train-rm`` or a ``generative`` judge policy, once per
    episode (``level="sequence"``) or at every step (``"process"``)."""
    if kind not in KINDS:
        raise ValueError(f"reward model kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if level not in LEVELS:
        raise ValueError(f"reward model level must be one of {', '.join(LEVELS)}, got {level!r}")
    _register_wrapped(
        env_id,
        base_id,
        lambda env: RewardModelEnv(env, load_scorer(path, device, kind), weight, verifier_weight, level),
        **register_kwargs,
    )

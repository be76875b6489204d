"""Reward components any env can use: DeepSeek-R1's format and language-consistency rewards and
Laguna's tool-error shaping, added to an env's own reward by ``ShapedEnv``.

A component sees every step (the action text, the env's reward and info) and returns the reward
it adds there; the episode's reward is the sum of its step rewards, so a component that scores the
whole episode adds its score on the last step (when the env ends the episode: terminated or
truncated). ``info["reward_components"]`` holds the episode's reward so far split by component
(``env`` = the env's own), so the finished trajectory's info has the totals (``sa_mrpo`` reads them). Make a shaped
env directly, or register it under an id of its own (in a
plugin named by ``env.plugins``)::

    ShapedEnv(gym.make("Arithmetic-v0"), [R1Format(), LanguageConsistency("en")])
    register_shaped("Arithmetic-R1-v0", "Arithmetic-v0", lambda: [R1Format(), ToolErrorShaping()])

The registered id takes the base env's constructor keywords (``tool_format`` reaches it) and its
class's declarations (``sft_teacher``, ...).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym

from envs.async_env import AsyncTextEnv


class RewardComponent(Protocol):
    name: str

    def reset(self) -> None: ...

    def step(self, action: str, reward: float, done: bool, info: dict[str, Any]) -> float:
        """The reward this component adds at this step (``done``: the episode ends after it)."""
        ...


# ----------------------------------------------------------------------------------------------
# DeepSeek-R1 (2025): rule-based format and language-consistency rewards.

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def well_formed(action: str, open_tag: str = "<think>", close_tag: str = "</think>") -> bool:
    """The action starts with one non-empty ``<think>...</think>`` block and says something after it."""
    text = action.strip()
    if not text.startswith(open_tag) or text.count(open_tag) != 1 or text.count(close_tag) != 1:
        return False
    thought, _, rest = text[len(open_tag) :].partition(close_tag)
    return bool(thought.strip()) and bool(rest.strip())


class R1Format:
    """R1's format reward: weight * (share of the episode's actions that think inside <think>...</think>
    first and then act), added on the last step. R1-Zero adds it to the accuracy reward with weight 1
    (single-turn); the share over turns is our choice for multi-turn episodes."""

    name = "r1_format"

    def __init__(self, weight: float = 1.0, open_tag: str = "<think>", close_tag: str = "</think>"):
        self.weight, self.open_tag, self.close_tag = weight, open_tag, close_tag
        self.reset()

    def reset(self) -> None:
        self.good, self.total = 0, 0

    def step(self, action: str, reward: float, done: bool, info: dict[str, Any]) -> float:
        self.total += 1
        self.good += well_formed(action, self.open_tag, self.close_tag)
        return self.weight * self.good / self.total if done else 0.0


# letters of each script; a word counts for the language whose script its letters are in
SCRIPTS: dict[str, str] = {
    "en": r"[A-Za-z]",
    "latin": r"[A-Za-z\u00C0-\u024F]",
    "zh": r"[\u4E00-\u9FFF\u3400-\u4DBF]",
    "ru": r"[\u0400-\u04FF]",
    "ar": r"[\u0600-\u06FF]",
}
_CJK = re.compile(r"[\u4E00-\u9FFF\u3400-\u4DBF]")
_WORD_LETTER = re.compile(r"[^\W\d_]")


def words(text: str) -> list[str]:
    """Whitespace words with at least one letter; every CJK character is a word of its own."""
    out: list[str] = []
    for token in text.split():
        out += _CJK.findall(token)
        rest = _CJK.sub(" ", token)
        out += [w for w in rest.split() if _WORD_LETTER.search(w)]
    return out


def target_language_share(text: str, language: str) -> float:
    """Share of ``text``'s words written in ``language``'s script (1.0 for text without words)."""
    ws = words(text)
    if not ws:
        return 1.0
    letter = re.compile(SCRIPTS[language])
    return sum(1 for w in ws if letter.search(w)) / len(ws)


class LanguageConsistency:
    """R1's language-consistency reward: weight * the share of target-language words in the chain of
    thought (the <think> blocks; the whole action when it has none), over the episode, on the last step."""

    name = "language_consistency"

    def __init__(self, language: str = "en", weight: float = 1.0):
        if language not in SCRIPTS:
            raise ValueError(f"LanguageConsistency: unknown language '{language}'; known: {', '.join(SCRIPTS)}")
        self.language, self.weight = language, weight
        self.reset()

    def reset(self) -> None:
        self.thoughts: list[str] = []

    def step(self, action: str, reward: float, done: bool, info: dict[str, Any]) -> float:
        blocks = _THINK.findall(action)
        self.thoughts.append(" ".join(blocks) if blocks else action)
        return self.weight * target_language_share(" ".join(self.thoughts), self.language) if done else 0.0


# ----------------------------------------------------------------------------------------------
# Laguna (Poolside, 2026): small penalties for broken tool use on top of the binary reward.


class ToolErrorShaping:
    """Laguna's tool-error shaping: ``malformed`` (-0.1) for an invalid action that ran no tool call
    (unparseable call, no call and no answer), ``tool_error`` (-0.05) for an invalid turn whose calls
    ran but failed (unknown tool, bad arguments, a tool error). Read from the ToolEnv step info
    (``action_valid``, ``tool_calls``); per step."""

    name = "tool_error"

    def __init__(self, malformed: float = -0.1, tool_error: float = -0.05):
        self.malformed, self.tool_error = malformed, tool_error

    def reset(self) -> None:
        pass

    def step(self, action: str, reward: float, done: bool, info: dict[str, Any]) -> float:
        if info.get("action_valid", True):
            return 0.0
        return self.tool_error if info.get("tool_calls", 0) > 0 else self.malformed


# ----------------------------------------------------------------------------------------------
# The env that adds them.


class ShapedEnv(AsyncTextEnv):
    """``env`` with ``components``' rewards added to its own. Async like the env it wraps: the rollout
    engine calls ``areset`` / ``astep`` on this object (it is its own ``unwrapped``)."""

    def __init__(self, env: gym.Env, components: list[RewardComponent]):
        self.env = env
        self.components = list(components)
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = env.unwrapped.metadata
        self.loop_safe = getattr(env.unwrapped, "loop_safe", False)

    def __getattr__(self, name: str) -> Any:  # the wrapped env's own attributes (tools, format, ...)
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env.unwrapped, name)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.env.unwrapped, "a" + name, None)
        if method is not None:
            return await method(*args, **kwargs)
        return getattr(self.env, name)(*args, **kwargs)

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        for c in self.components:
            c.reset()
        self.totals = {"env": 0.0, **{c.name: 0.0 for c in self.components}}
        return await self._call("reset", seed=seed, options=options)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """gymnasium's sync API: ``areset`` run to completion (``gym.make(id).reset()`` of a
        registered shaped env returns the observation and info)."""
        gym.Env.reset(self, seed=seed)  # seeds this wrapper's own np_random (gymnasium's checker)
        return self.run_sync(self.areset(seed=seed, options=options))

    async def astep(self, action: str):
        obs, reward, terminated, truncated, info = await self._call("step", action)
        shares = {c.name: float(c.step(action, float(reward), terminated or truncated, info)) for c in self.components}
        for name, value in {"env": float(reward), **shares}.items():
            self.totals[name] += value
        info = {**info, "reward_components": dict(self.totals)}
        return obs, float(reward) + sum(shares.values()), terminated, truncated, info

    async def aclose_resources(self) -> None:
        self.env.close()


# declarations of an env class the registered id keeps (``agent_rl/run/envloader.py`` reads them)
_DECLARATIONS = ("sft_teacher", "tokenizer_corpus", "task_category")


def _register_wrapped(
    env_id: str, base_id: str, wrap: Callable[[gym.Env], AsyncTextEnv], **register_kwargs: Any
) -> None:
    base = gym.spec(base_id).entry_point
    base_cls = (
        base
        if not isinstance(base, str)
        else getattr(importlib.import_module(base.partition(":")[0]), base.partition(":")[2])
    )

    def make(**kwargs: Any) -> AsyncTextEnv:
        return wrap(gym.make(base_id, **kwargs))

    make.__signature__ = inspect.signature(base_cls)  # type: ignore[attr-defined]  (tool_format detection)
    for attribute in _DECLARATIONS:
        if getattr(base_cls, attribute, None):
            setattr(make, attribute, getattr(base_cls, attribute))
    gym.register(env_id, entry_point=make, disable_env_checker=True, **register_kwargs)


def register_shaped(
    env_id: str, base_id: str, components: Callable[[], list[RewardComponent]], **register_kwargs: Any
) -> None:
    """Register ``env_id``: ``base_id`` (made with the same keywords) with ``components()`` added."""
    _register_wrapped(env_id, base_id, lambda env: ShapedEnv(env, components()), **register_kwargs)


# ----------------------------------------------------------------------------------------------
# Test-time RL without labels (ttpo): the env's verdict never leaves the env.

# info keys through which a verdict or a solution could reach the trainer
LABEL_KEYS = ("correct", "passed", "score", "verdict", "expected", "solution", "answer_key")
# keys of info["task"] that hold the label (the rest replays the task)
TASK_LABEL_KEYS = ("answer", "solution", "expected", "tests", "reference")
PENDING_CONTEXT = "(pseudo-label pending)"


class LabelFreeEnv(ShapedEnv):
    """``env`` for test-time RL without labels: its reward is replaced by 0, the verdict keys of its
    info (``LABEL_KEYS``) and of its task (``TASK_LABEL_KEYS``) are dropped, and its privileged ``teacher_context`` (a verified solution) is
    replaced by ``PENDING_CONTEXT``, which the ``ttpo_vote`` filter fills with the group's majority
    answer. The final answer, parsed with the env's tool format, goes out in ``info["final_answer"]``
    (the vote). The hidden label stays inside the env: the trainer never sees it."""

    def __init__(self, env: gym.Env):
        super().__init__(env, [])

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = await super().areset(seed=seed, options=options)
        info = {k: v for k, v in info.items() if k not in LABEL_KEYS}
        if isinstance(info.get("task"), dict):
            info["task"] = {k: v for k, v in info["task"].items() if k not in TASK_LABEL_KEYS}
        if "teacher_context" in info:
            info["teacher_context"] = PENDING_CONTEXT
        return obs, info

    async def astep(self, action: str):
        obs, _, terminated, truncated, info = await self._call("step", action)
        info = {k: v for k, v in info.items() if k not in LABEL_KEYS}
        parse = getattr(self.env.unwrapped, "format", None)
        answer = parse.parse(action).answer if parse is not None else None
        if answer is not None and (terminated or truncated):
            info["final_answer"] = answer.strip()
        return obs, 0.0, terminated, truncated, info


def register_label_free(env_id: str, base_id: str, **register_kwargs: Any) -> None:
    """Register ``env_id``: ``base_id`` as a ``LabelFreeEnv`` (same keywords and declarations)."""
    _register_wrapped(env_id, base_id, lambda env: LabelFreeEnv(env), **register_kwargs)

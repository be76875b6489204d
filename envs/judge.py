"""``agent_rl/PreferenceJudge-v0``: a generative reward model's training env (RLVR on preference data).

The task is one preference record; the action is a verdict; the reward is 1 when the verdict
matches the record's label, else 0 (Generative Verifiers, Zhang et al. 2024; RLVR for judges as in
JudgeLRM / RM-R1, 2025). Trained with GRPO (``agent-rl train``), the policy becomes a judge that
``envs/reward_model.py`` (``kind="generative"``) can use as another env's reward.

Data: ``data`` is a JSONL in the format of ``trainer.preference_data`` and ``agent-rl train-rm``
(``agent_rl/core/preference_records.py``: pairs ``{prompt, chosen, rejected}`` or labelled samples
``{prompt, completion, label}``, multi-turn conversations and ``tools`` included). Without ``data``
the env makes verifier-labelled pairs from ``Arithmetic-v0``'s questions: the right
``<answer>N</answer>`` vs one off by 1-3.

Two kinds of verdict (``verdicts``):

* ``pairwise``: the user message shows the conversation and two responses, A and B, and asks which
  is better; the verdict is ``A`` or ``B``. Position bias: the order is drawn from the task's seed
  (half the seeds show the chosen response as A, half as B), and ``options["order"]`` (``"AB"``:
  chosen first, ``"BA"``) fixes it. Labelled samples cannot be paired and are skipped.
* ``pointwise``: one response, and the verdict is ``good`` or ``bad``. A labelled sample is one
  task, a pair two (chosen is good, rejected is bad). This is the kind a reward needs: it rates one
  episode alone (``envs/reward_model.py``).

A verdict is written ``<answer>V</answer>`` (the form Arithmetic-v0 uses; text before it, such as
reasoning, is allowed) or as the bare word ``V``, case-insensitive, a trailing ``.`` ignored. Anything
else (no verdict, two ``<answer>`` tags, another word) is an error observation: reward 0,
``action_valid=False``, the task unchanged; the episode ends after ``max_turns`` actions (2 by
default: one retry). A valid verdict, right or wrong, ends the episode.

Splits: 80 / 10 / 10 by a hash of the record's content (``envs.splits.split_of``; the built-in pairs
follow Arithmetic-v0's split of their question), so a record is in one split whatever its order.
The task of a seed is drawn from its split with ``random.Random(seed)``; ``task_id`` hashes the
shown task (order included); ``state_key`` hashes the task id and the number of actions taken.
``teacher_context`` (never shown) names the right verdict.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from typing import Any, ClassVar

import gymnasium as gym

from agent_rl.core.preference_records import load_records, parse_record
from envs.arithmetic.env import question_text
from envs.arithmetic.tasks import LEVELS, sample_problem
from envs.spaces import AnyText, Messages
from envs.splits import check_difficulties, check_split, split_of

SYSTEM_PROMPT = (
    "You are a judge. Read the conversation and the responses, then give your verdict as <answer>V</answer>."
)
VERDICTS = {"pairwise": ("A", "B"), "pointwise": ("good", "bad")}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def render_messages(messages: list[dict]) -> str:
    """A conversation as text, one ``role: content`` block per message."""
    return "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in messages)


def _tools_line(tools: list[dict] | None) -> str:
    names = [t.get("function", t).get("name", "?") for t in tools or []]
    return f"Tools offered: {', '.join(names)}\n" if names else ""


def pairwise_prompt(prompt: list[dict], a: list[dict], b: list[dict], tools: list[dict] | None = None) -> list[dict]:
    """The judge's messages for a pair shown as A then B."""
    text = (
        f"{_tools_line(tools)}# Conversation\n{render_messages(prompt)}\n# Response A\n{render_messages(a)}\n"
        f"# Response B\n{render_messages(b)}\nWhich response is better? Reply <answer>A</answer> or <answer>B</answer>."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]


def pointwise_prompt(prompt: list[dict], response: list[dict], tools: list[dict] | None = None) -> list[dict]:
    """The judge's messages for one response."""
    text = (
        f"{_tools_line(tools)}# Conversation\n{render_messages(prompt)}\n# Response\n{render_messages(response)}\n"
        "Is the response good or bad? Reply <answer>good</answer> or <answer>bad</answer>."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]


def verdict_text(verdict: str) -> str:
    """The action that gives ``verdict`` (what a judge is trained to write)."""
    return f"<answer>{verdict}</answer>"


def parse_verdict(action: str, allowed: tuple[str, ...]) -> tuple[str | None, str]:
    """``(verdict, "")`` with ``verdict`` spelled as in ``allowed``, or ``(None, why not)``."""
    tags = _ANSWER.findall(action)
    if len(tags) > 1:
        return None, "give one verdict (one <answer> tag)"
    text = (tags[0] if tags else action).strip().removesuffix(".").strip()
    for v in allowed:
        if text.lower() == v.lower():
            return v, ""
    return None, "no verdict" if not text else "unknown verdict"


def _key(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def _file_records(path: str) -> tuple[dict, ...]:
    return tuple(load_records(path, what="env.options.data"))


def arithmetic_pair(seed: int, split: str, difficulties: tuple[int, ...]) -> dict:
    """A verifier-labelled pair of Arithmetic-v0's question of ``seed``: right vs off by 1-3."""

    problem = sample_problem(seed, split, difficulties)
    off = random.Random(f"judge-off:{seed}").choice([-3, -2, -1, 1, 2, 3])
    rec = {
        "prompt": question_text(problem.expression),
        "chosen": verdict_text(str(problem.answer)),
        "rejected": verdict_text(str(problem.answer + off)),
    }
    return parse_record(rec, f"Arithmetic-v0 question {problem.task_id}")


class PreferenceJudgeEnv(gym.Env):
    """Judge a preference record (pairwise A/B or pointwise good/bad); reward 1 for the label's verdict."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("verdict",),
        "reward": "1 when the verdict matches the preference label, else 0",
    }
    tokenizer_corpus = "envs.judge:corpus_conversations"
    sft_teacher = "envs.judge:weak_judge"

    def __init__(
        self,
        data: str | None = None,
        verdicts: str = "pairwise",
        split: str = "train",
        difficulty: int | list[int] = 2,
        max_turns: int = 2,
        max_action_chars: int = 4096,
    ):
        if verdicts not in VERDICTS:
            raise ValueError(f"verdicts must be one of {', '.join(VERDICTS)}, got {verdicts!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.verdicts, self.split, self.max_turns, self.data = verdicts, check_split(split), max_turns, data
        self.difficulties = (difficulty,) if isinstance(difficulty, int) else tuple(difficulty)
        if data is not None:
            self._by_split = {s: [] for s in ("train", "val", "test")}
            for rec in _file_records(str(data)):
                if verdicts == "pairwise" and len(rec["rows"]) != 2:
                    continue
                self._by_split[split_of(_key([rec["prompt"], rec["rows"], rec["tools"]]))].append(rec)
        else:
            check_difficulties(self.difficulties, LEVELS)
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._task: dict | None = None

    # -- tasks ------------------------------------------------------------------------------------
    def _record(self, rng: random.Random, seed: int, split: str) -> dict:
        if self.data is None:
            return arithmetic_pair(seed, split, self.difficulties)
        records = self._by_split[split]
        if not records:
            raise ValueError(f"env.options.data: {self.data} has no {self.verdicts} records in split {split!r}")
        return records[rng.randrange(len(records))]

    def _new_task(self, seed: int, split: str, options: dict[str, Any]) -> dict:
        rng = random.Random(f"judge:{seed}")
        rec = self._record(rng, seed, split)
        if self.verdicts == "pairwise":
            (chosen, _), (rejected, _) = rec["rows"]
            order = options.get("order") or ("AB" if rng.random() < 0.5 else "BA")
            if order not in ("AB", "BA"):
                raise ValueError(f"options['order'] must be 'AB' or 'BA', got {order!r}")
            a, b = (chosen, rejected) if order == "AB" else (rejected, chosen)
            return {
                "prompt": rec["prompt"],
                "responses": [a, b],
                "tools": rec["tools"],
                "answer": "A" if order == "AB" else "B",
            }
        completion, reward = rec["rows"][rng.randrange(len(rec["rows"]))]
        return {
            "prompt": rec["prompt"],
            "responses": [completion],
            "tools": rec["tools"],
            "answer": "good" if reward > 0.5 else "bad",
        }

    def _messages(self) -> list[dict]:
        t = self._task
        if self.verdicts == "pairwise":
            return pairwise_prompt(t["prompt"], t["responses"][0], t["responses"][1], t["tools"])
        return pointwise_prompt(t["prompt"], t["responses"][0], t["tools"])

    # -- the gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        split = check_split(options.get("split", self.split))
        if "task" in options:
            self._task = dict(options["task"])
        else:
            self._task = self._new_task(int(self.np_random.integers(2**31)) if seed is None else seed, split, options)
        self._task_id = "judge-" + _key(self._task)[:12]
        self._turn = 0
        info = {
            "tools": [],
            "task_id": self._task_id,
            "task": self._task,
            "state_key": self._state_key(),
            "teacher_context": f"The right verdict: {verdict_text(self._task['answer'])}",
        }
        return self._messages(), info

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    def _state_key(self) -> str:
        return _key([self._task_id, self._turn])[:16]

    def step(self, action: str):
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        allowed = VERDICTS[self.verdicts]
        verdict, error = parse_verdict(action if isinstance(action, str) else str(action), allowed)
        info: dict[str, Any] = {"action_valid": verdict is not None, "verdict": verdict}
        if verdict is None:
            reply = " or ".join(verdict_text(v) for v in allowed)
            obs = [{"role": "user", "content": f"error: {error}. Reply {reply}."}]
            info["state_key"] = self._state_key()
            return obs, 0.0, False, self._turn >= self.max_turns, info
        info["state_key"] = self._state_key()
        return [], 1.0 if verdict == self._task["answer"] else 0.0, True, False, info

    loop_safe = True  # a pure-Python step

    async def astep(self, action: str):
        return self.step(action)

    def close(self):
        self._task = None
        super().close()


def corpus_conversations(n: int, rng: random.Random):
    """Judge conversations of the built-in pairs, both kinds of verdict, for the tiny tokenizer."""
    for i in range(n):
        env = PreferenceJudgeEnv(verdicts=("pairwise", "pointwise")[i % 2])
        messages, info = env.reset(seed=rng.randrange(2**31))
        yield messages + [{"role": "assistant", "content": verdict_text(info["task"]["answer"])}], []


_QUESTION = re.compile(r"What is ([0-9+\-*() ]+)\?")


def _section_answers(text: str, heads: tuple[str, ...]) -> list[str | None]:
    """The last ``<answer>`` of each ``# <head>`` section of a judge prompt (None where it has none)."""
    out = []
    for i, head in enumerate(heads):
        start = text.find(f"# {head}\n")
        end = text.find(f"# {heads[i + 1]}\n") if i + 1 < len(heads) else text.rfind("\n")
        tags = _ANSWER.findall(text[start:end]) if start >= 0 else []
        out.append(tags[-1].strip() if tags else None)
    return out


def weak_judge(messages: list[dict], rng: random.Random, p_random: float = 0.5) -> str:
    """The SFT teacher (``agent-rl sft``): a verdict in the right form. On an arithmetic question it
    computes the value and names the response that states it, except with probability ``p_random``,
    when it (and on any other record, always) guesses; a warm start for GRPO, not a good judge."""
    text = next((m["content"] for m in messages if m["role"] == "user"), "")
    pairwise = "# Response A\n" in text
    allowed = VERDICTS["pairwise" if pairwise else "pointwise"]
    question = _QUESTION.search(text)
    if question is None or rng.random() < p_random:
        return verdict_text(rng.choice(allowed))
    value = str(int(eval(question.group(1), {"__builtins__": {}})))  # the regex admits digits and operators only
    if pairwise:
        a, b = _section_answers(text, ("Response A", "Response B"))
        return verdict_text("A" if a == value else "B" if b == value else rng.choice(allowed))
    (answer,) = _section_answers(text, ("Response",))
    return verdict_text("good" if answer == value else "bad")

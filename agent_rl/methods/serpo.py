"""Test-time RL for open-ended generation without labels: ``serpo``, self-evolving rubrics scored by
the policy's own verdict-token likelihoods.

The env runs label-free (``envs.rewards.LabelFreeEnv``: reward 0, no verdict keys; or an open-ended
env that has no label at all). This filter replaces each row's reward with the policy's rubric
score, so the reward never comes from the hidden label. Two text passes through the run's backend
(``RunAPI.text_pass``; never trained on):

- rubric pass: the policy, shown the task (and, once the task has an archive, a good and a bad
  earlier response), writes yes/no criteria, one per line;
- judge pass: for each (response, criterion), one verdict token; P(yes) = p(yes) / (p(yes) + p(no))
  from the backend's top-k logprobs at that position (probabilistic criterion scoring).

Per task the state keeps the rubric and the Good / Bad archives (earlier responses of the extremes
of each group, "maximally separated"); a criterion is kept when it scores the Good archive above
the Bad one (rubric evolution). Every step refreshes both from the new rollouts.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from agent_rl.algorithms.filters.test_time import PENDING_CONTEXT
from agent_rl.algorithms.registry import (
    ComponentConfig,
    FilterResult,
    record_choice,
    register_filter,
)
from agent_rl.core.types import Trajectory, TrajectoryGroup
from agent_rl.methods.self_context import TextPassState, bound_services


class SerpoState(TextPassState):
    """Per task: the evolving rubric and the Good / Bad archives (checkpointed with the run)."""

    key = "serpo"
    teacher_context = False

    def __init__(self) -> None:
        super().__init__()
        self.tasks: dict[str, dict[str, list[str]]] = {}

    def task(self, task_id: str) -> dict[str, list[str]]:
        return self.tasks.setdefault(task_id, {"rubric": [], "good": [], "bad": []})

    def state_dict(self) -> dict[str, Any]:
        return {"passes": self.passes, "tasks": self.tasks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.passes, self.tasks = int(state["passes"]), {k: dict(v) for k, v in state.get("tasks", {}).items()}


class SerpoConfig(ComponentConfig):
    num_criteria: int = Field(4, ge=1, description="criteria the rubric pass writes per task and step (ours)")
    max_criteria: int = Field(8, ge=1, description="criteria kept per task after rubric evolution (ours)")
    archive_size: int = Field(
        2, ge=1, description="responses kept per task in each of the Good and Bad archives (ours)"
    )
    min_margin: float = Field(0.0, description="a criterion is kept when P(yes | Good) - P(yes | Bad) > this (ours)")
    rubric_prompt: str = Field(
        "Write {n} short yes/no criteria, one per line, that a high-quality answer to the task above meets.{examples}",
        description="the rubric pass's request after the task's prompt; {n}: num_criteria, {examples}: archived good/bad answers",
    )
    judge_prompt: str = Field(
        "Response to the task above:\n{response}\n\nCriterion: {criterion}\nDoes the response meet the criterion? Answer Yes or No.",
        description="the judge pass's request after the task's prompt; one verdict token is read",
    )
    rubric_max_new_tokens: int = Field(96, ge=1, description="length cap of the rubric pass (ours)")
    rubric_temperature: float = Field(
        1.0, ge=0.0, description="sampling temperature of the rubric pass (ours: 1, new criteria each step)"
    )
    verdict_topk: int = Field(
        20, ge=2, description="candidates read at the verdict position (yes / no outside them count 0)"
    )
    yes: list[str] = Field(
        default_factory=lambda: ["Yes", "yes", " Yes"], description="spellings of the yes verdict (first token each)"
    )
    no: list[str] = Field(
        default_factory=lambda: ["No", "no", " No"], description="spellings of the no verdict (first token each)"
    )


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|\(\d+\))\s*")


def parse_criteria(text: str | None, n: int) -> list[str]:
    """The first ``n`` non-empty lines of ``text``, bullets and numbering removed."""
    lines = (_BULLET.sub("", ln).strip() for ln in (text or "").splitlines())
    return [ln for ln in lines if ln][:n]


def _check_label_free(rows: list[Trajectory]) -> None:
    for t in rows:
        if t.info.get("teacher_context") not in (PENDING_CONTEXT, None):  # a verified solution: a labelled env
            raise ValueError(
                "filter 'serpo' needs a label-free env (envs.rewards.LabelFreeEnv / register_label_free, or an env without labels)"
            )


def _examples(archive: dict[str, list[str]]) -> str:
    if not archive["good"] or not archive["bad"]:
        return ""
    return f"\nA good earlier answer:\n{archive['good'][-1]}\nA poor earlier answer:\n{archive['bad'][-1]}\nWrite criteria that tell them apart."


@register_filter(
    "serpo",
    config=SerpoConfig,
    state=SerpoState,
    status="interpretation",
    evidence="SERPO (seed 002/003 abstract): criteria counts, archives and margin are ours (config "
    "'(ours)', recorded choice); tests/algorithms/test_serpo.py",
)
def serpo(groups: list[TrajectoryGroup], state: SerpoState, cfg: SerpoConfig) -> FilterResult:
    """SERPO, Self-Evolving Rubric Policy Optimization (2026): label-free rewards from the policy's own rubrics.

    C_g = kept rubric of g's task + num_criteria new criteria (rubric pass)
    p(y, c) = p_yes / (p_yes + p_no) at the judge's verdict token for response y and criterion c
    margin(c) = mean_{y in Good} p(y, c) - mean_{y in Bad} p(y, c); kept: margin > min_margin, best max_criteria
    (no archive yet: the first max_criteria candidates); reward_i = mean_{c kept} p(y_i, c).
    The group's best and worst responses (when their rewards differ) join the Good / Bad archives.
    The env's reward is overwritten; an env that hands out a verified solution is refused.
    """
    if not groups:
        return FilterResult(groups=[])
    services = bound_services(state, "serpo")
    rows = [t for g in groups for t in g.trajectories_G if t.reward is not None]
    _check_label_free(rows)
    groups = [g for g in groups if any(t.reward is not None for t in g.trajectories_G)]
    prompts = [next(t for t in g.trajectories_G if t.reward is not None).info["prompt_messages"] for g in groups]
    archives = [state.task(g.task_id) for g in groups]
    rubric_out = services.text_pass(
        [
            p + [{"role": "user", "content": cfg.rubric_prompt.format(n=cfg.num_criteria, examples=_examples(a))}]
            for p, a in zip(prompts, archives, strict=True)
        ],
        max_new_tokens=cfg.rubric_max_new_tokens,
        temperature=cfg.rubric_temperature,
        seed=state.next_seed(),
    )
    candidates = [
        list(dict.fromkeys(a["rubric"] + parse_criteria(r.text, cfg.num_criteria)))
        for a, r in zip(archives, rubric_out, strict=True)
    ]
    # one judge pass over every (response, criterion) of every group, archived responses included
    queries: list[tuple[int, str, str]] = []  # (group, response text, criterion)
    responses = [[services.transcript(t) for t in g.trajectories_G if t.reward is not None] for g in groups]
    for gi, (a, cands) in enumerate(zip(archives, candidates, strict=True)):
        for text in dict.fromkeys(responses[gi] + a["good"] + a["bad"]):
            queries += [(gi, text, c) for c in cands]
    verdicts = services.text_pass(
        [
            prompts[gi] + [{"role": "user", "content": cfg.judge_prompt.format(response=text, criterion=c)}]
            for gi, text, c in queries
        ],
        max_new_tokens=1,
        temperature=1.0,
        seed=state.next_seed(),
        topk=cfg.verdict_topk,
    )
    p = {q: services.verdict_probability(v.first_topk, cfg.yes, cfg.no) for q, v in zip(queries, verdicts, strict=True)}
    kept_sizes, scores = [], []
    for gi, (g, a, cands) in enumerate(zip(groups, archives, candidates, strict=True)):
        kept = cands[: cfg.max_criteria]
        if a["good"] and a["bad"]:
            margin = {
                c: _mean(p[(gi, y, c)] for y in a["good"]) - _mean(p[(gi, y, c)] for y in a["bad"]) for c in cands
            }
            ranked = sorted((c for c in cands if margin[c] > cfg.min_margin), key=lambda c: -margin[c])
            kept = ranked[: cfg.max_criteria] or kept  # nothing discriminates yet: keep the candidates
        scored = [t for t in g.trajectories_G if t.reward is not None]
        for t, text in zip(scored, responses[gi], strict=True):
            t.reward = _mean(p[(gi, text, c)] for c in kept) if kept else 0.5
            t.info.update(serpo_score=t.reward, serpo_rubric=kept)
            scores.append(t.reward)
        best, worst = max(scored, key=lambda t: t.reward), min(scored, key=lambda t: t.reward)
        if best.reward > worst.reward:  # the group's extremes, maximally separated
            a["good"] = (a["good"] + [responses[gi][scored.index(best)]])[-cfg.archive_size :]
            a["bad"] = (a["bad"] + [responses[gi][scored.index(worst)]])[-cfg.archive_size :]
        a["rubric"] = kept
        kept_sizes.append(len(kept))
    metrics = {
        "serpo/criteria_kept": _mean(kept_sizes),
        "serpo/score_mean": _mean(scores),
        "serpo/rubric_tokens": float(sum(len(r.token_ids) for r in rubric_out)),
        "serpo/verdicts": float(len(verdicts)),
        "serpo/verdicts_failed": float(sum(v.text is None for v in verdicts)),
        # a backend that returns no top-k (a chat-only API) leaves every verdict at 0.5: this says so
        "serpo/verdicts_without_topk": float(sum(v.text is not None and not v.first_topk for v in verdicts)),
    }
    return FilterResult(groups=groups, metrics=metrics, means=frozenset({"serpo/criteria_kept", "serpo/score_mean"}))


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


record_choice(
    "serpo",
    "archives, rubric evolution and scoring",
    "per task, Good / Bad archives of the group's best and worst responses (2 each; the Normal tier is not kept); each step the "
    "policy writes 4 criteria (temperature 1) next to the kept ones; a criterion is kept while it scores Good above Bad (up to 8; "
    "none does: all candidates); reward = mean P(yes) over kept criteria, P(yes) = p_yes / (p_yes + p_no) among the top-20 "
    "candidates of the verdict token (neither present: 0.5)",
)

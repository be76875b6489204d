"""Test-time RL without labels: pseudo-labels from the group's majority vote (``ttpo``).

The env runs label-free (``envs.rewards.LabelFreeEnv``): reward 0, no verdict keys, its final
answer in ``info["final_answer"]`` and a placeholder teacher context. This filter turns each
group's votes into the pseudo-reward (agreement with the majority) and the teacher's context (the
majority answer), so neither the reward nor the teacher ever sees the hidden label.
"""

from __future__ import annotations

from collections import Counter

from pydantic import Field

from agent_rl.algorithms.registry import ComponentConfig, FilterResult, record_choice, register_filter
from agent_rl.core.types import TrajectoryGroup

# the teacher context a label-free env gives at reset (envs/rewards.py: PENDING_CONTEXT, the same text)
PENDING_CONTEXT = "(pseudo-label pending)"


class TtpoVoteConfig(ComponentConfig):
    context_template: str = Field(
        "A reference answer (the majority of your attempts): {answer}",
        description="the teacher's context; {answer} = the majority answer",
    )


def majority(answers: list[str | None]) -> str | None:
    """The most common answer (ties: the one seen first); None when no episode answered."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None
    top = max(votes.values())
    return next(a for a in answers if a is not None and votes[a] == top)


@register_filter(
    "ttpo_vote",
    config=TtpoVoteConfig,
    status="interpretation",
    evidence="from TTPO's abstract (seed 003): majority vote, tie rule and the teacher context are "
    "ours (recorded choice); tests/algorithms/test_ttpo.py",
)
def ttpo_vote(groups: list[TrajectoryGroup], state: object, cfg: TtpoVoteConfig) -> FilterResult:
    """TTPO's pseudo-labels (Test-Time Policy Optimization, 2026): majority vote within each group.

    y_hat = majority of the group's final answers; reward_i = 1[answer_i == y_hat] (agreeing rows distil,
    disagreeing rows are penalized by ``ttpo``); teacher context = context_template with y_hat.
    Groups where no episode answered are dropped. The env's own rewards are overwritten; episodes whose
    teacher context is a real one (a verified solution) are refused: the env is not label-free.
    """
    kept, agree, total = [], 0, 0
    for g in groups:
        for t in g.trajectories_G:
            if t.info.get("teacher_context") not in (PENDING_CONTEXT, None):  # a verified solution: a labelled env
                raise ValueError(
                    "filter 'ttpo_vote' needs a label-free env (envs.rewards.LabelFreeEnv / register_label_free)"
                )
        answers = [t.info.get("final_answer") for t in g.trajectories_G]
        y_hat = majority(answers)
        if y_hat is None:
            continue
        for t, a in zip(g.trajectories_G, answers, strict=True):
            t.reward = 1.0 if a == y_hat else 0.0
            t.info["pseudo_label"] = y_hat
            if "teacher_context" in t.info:
                t.info["teacher_context"] = cfg.context_template.format(answer=y_hat)
            agree += int(a == y_hat)
            total += 1
        kept.append(g)
    metrics = {
        "filter/ttpo_vote_share": agree / total if total else 0.0,
        "filter/ttpo_no_answer_groups": float(len(groups) - len(kept)),
    }
    return FilterResult(groups=kept, metrics=metrics, means=frozenset({"filter/ttpo_vote_share"}))


record_choice(
    "ttpo",
    "majority-vote ties and unanswered groups",
    (
        "ties go to the answer seen first; groups where no episode answered are dropped; the teacher context is 'A "
        "reference answer (the majority of your attempts): y_hat'"
    ),
)

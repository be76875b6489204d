"""GenAC's advantage: the generative critic's values as the baseline of the actor's tokens, and
REINFORCE on the critic's own rows (Shan, Zhong, Wang, Zhao 2026, "Bringing Value Models Back:
Generative Critics for Value Modeling in LLM Reinforcement Learning", arXiv 2604.10701).

The filter ``genac`` (``filters/genac.py``) asks the critic for a value at chosen boundaries of each
actor row (it reasons, then writes ``<value>v</value>``) and appends its answers as critic rows to
the row's group. This module holds the pure parts, computed by hand in the tests:

    V_k  = clip(v parsed from the critic's k-th answer, v_min, v_max)     (None when unparseable)
    A_t  = R - V_{k(t)}          actor token t; k(t) the last boundary b_k <= t (GAE, gamma = lambda = 1)
    r^c  = -(V - R)^2            critic row ('squared'; 'absolute': -|V - R|); unparseable: the worst
                                 in-range answer, -max((v_min - R)^2, (v_max - R)^2)
    A^c  = r^c - mean(r^c of the group's critic rows)    on every token of the critic's answer

R is the actor row's final reward (the episode's return, undiscounted; minus its summed KL penalty
when ``algorithm.kl.placement`` is ``in_reward``). An unparseable boundary
takes the nearest earlier parsed value of its row, else the mean reward of the row's group.
"""

from __future__ import annotations

import math
import re
from typing import Literal

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import sequence_rewards
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
)
from agent_rl.core.types import Trajectory

ACTOR_KEY = "genac"  # actor row: info[ACTOR_KEY] = {"boundaries": [...], "values": [v | None, ...], "texts": [...]}
CRITIC_KEY = "genac_critic"  # critic row: info[CRITIC_KEY] = {"actor", "boundary", "value", "return"}

_VALUE = re.compile(r"<value>\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*</value>")


def parse_value(text: str | None, v_min: float, v_max: float) -> float | None:
    """The number in the last ``<value>...</value>`` of ``text``, clipped to [v_min, v_max]; None
    when there is none (or it is not finite). Never raises."""
    found = _VALUE.findall(text or "")
    if not found:
        return None
    v = float(found[-1])
    return min(max(v, v_min), v_max) if math.isfinite(v) else None


def critic_reward(value: float | None, ret: float, kind: str, v_min: float, v_max: float) -> float:
    """The critic row's REINFORCE reward for answering ``value`` on a row that returned ``ret``."""
    err = (lambda v: (v - ret) ** 2) if kind == "squared" else (lambda v: abs(v - ret))
    return -(err(value) if value is not None else max(err(v_min), err(v_max)))


def boundaries(t: Trajectory, segment_tokens: int, max_boundaries: int) -> list[int]:
    """Token indices where the critic is asked: each assistant turn's first token and, with
    ``segment_tokens`` > 0, every ``segment_tokens`` generated tokens inside a turn; the first
    ``max_boundaries`` of them, in order."""
    out: list[int] = []
    for u in t.turns_N:
        step = segment_tokens if segment_tokens > 0 else max(1, u.end - u.start)
        out += list(range(u.start, max(u.end, u.start + 1), step))
    return sorted(set(out))[:max_boundaries]


def filled_values(values: list[float | None], fallback: float) -> list[float]:
    """Each boundary's value: its own, else the nearest earlier parsed one, else ``fallback``."""
    out, last = [], fallback
    for v in values:
        last = v if v is not None else last
        out.append(last)
    return out


def actor_token_advantages(T: int, bounds: list[int], values: list[float], ret: float) -> torch.Tensor:
    """``[T]``: R - V_k on the tokens from boundary k up to the next one (0 before the first)."""
    a = torch.zeros(T, dtype=torch.float64)
    for k, (b, v) in enumerate(zip(bounds, values, strict=True)):
        end = bounds[k + 1] if k + 1 < len(bounds) else T
        a[b:end] = ret - v
    return a


class GenacAdvantageConfig(ComponentConfig):
    train_actor: bool = Field(True, description="False: the actor's advantages are 0 (the critic's REINFORCE pretraining stage alone)")
    critic_baseline: Literal["group_mean", "none"] = Field(
        "group_mean", description="baseline of the critic rows' REINFORCE: the mean reward of the group's critic rows (ours), or none"
    )


@register_advantage("genac", config=GenacAdvantageConfig,
                    status="interpretation",
                    evidence="arXiv 2604.10701 read through summaries; no code (docs/objectives-backlog.md lists "
                             "the searches); 8 recorded choices; tests/algorithms/test_genac.py")
def genac(x: AdvantageInputs, cfg: GenacAdvantageConfig) -> AdvantageOutput:
    """GenAC, Generative Actor-Critic (Shan et al. 2026, arXiv 2604.10701): the critic's values as the baseline.

    A_t = R - V_k(t) on actor tokens (V: the generative critic's parsed answers, filter ``genac``);
    A^c = r^c - mean(r^c of the group's critic rows) on the critic's rows, r^c = -(V - R)^2.
    R is the row's reward minus its summed in-reward KL penalty, if any. Rows are read from
    ``x.groups`` (the trainer always gives them); without them (outside a run) every row is an actor
    row without values, whose baseline is its group's mean reward.
    """
    B, T = x.loss_mask_BT.shape
    rows = [t for g in x.groups for t in g.trajectories_G if t.trainable] if x.groups is not None else None
    if rows is not None and len(rows) != B:
        raise ValueError(f"advantage 'genac': {len(rows)} trainable rows in the groups, {B} in the batch")
    rewards = sequence_rewards(x).cpu()
    adv = torch.zeros(B, T, dtype=torch.float64)
    group_of = x.group_index_B.cpu()
    critic = torch.tensor([CRITIC_KEY in t.info for t in rows] if rows is not None else [False] * B, dtype=torch.bool)
    actor_mean: dict[int, float] = {}
    for g in group_of.unique().tolist():
        actor_rows = (group_of == g) & ~critic
        actor_mean[g] = float(rewards[actor_rows].mean()) if actor_rows.any() else 0.0
    abs_err, n_values, n_missing = 0.0, 0, 0
    for i in range(B):
        t = rows[i] if rows is not None else None
        if critic[i]:
            continue
        info = t.info.get(ACTOR_KEY) if t is not None else {"boundaries": [0], "values": [None]}
        if info is None:
            raise ValueError("advantage 'genac' needs the critic's values: add the filter, algorithm.filters=[..., {name: genac}] (last)")
        ret = float(rewards[i])
        for v in info["values"]:
            n_missing += v is None
            if v is not None:
                abs_err, n_values = abs_err + abs(v - ret), n_values + 1
        if cfg.train_actor:
            vals = filled_values(info["values"], actor_mean[int(group_of[i])])
            adv[i] = actor_token_advantages(T, info["boundaries"], vals, ret)
    metrics = {"genac/values": float(n_values), "genac/values_unparsed": float(n_missing)}
    if n_values:
        metrics["genac/value_abs_error"] = abs_err / n_values
    if critic.any():
        for g in group_of[critic].unique().tolist():
            sel = critic & (group_of == g)
            base = rewards[sel].mean() if cfg.critic_baseline == "group_mean" else 0.0
            adv[sel] = (rewards[sel] - base)[:, None].expand(-1, T)
        metrics.update({"genac/critic_rows": float(critic.sum()), "genac/critic_reward_mean": float(rewards[critic].mean())})
    return AdvantageOutput(advantages_BT=(adv * x.loss_mask_BT.double().cpu()).to(torch.float32).to(x.loss_mask_BT.device), metrics=metrics)


record_choice("genac", "how the value is read from the critic's text", "the number in the last <value>...</value> tag, clipped to [value_min, value_max] = [0, 1]; none or not finite: no value (counted in genac/values_unparsed, never an error)")
record_choice("genac", "the critic's REINFORCE reward", "-(V - R)^2 (its expected maximizer is E[R], the value; -|V - R| would target the median): 'absolute' selectable; an unparseable answer gets the worst in-range reward")
record_choice("genac", "where the critic is asked", "at each assistant turn's first token (segment_tokens > 0: also every that many tokens inside a turn), the first max_boundaries = 4")
record_choice("genac", "the advantage from the values", "A_t = R - V_k on the tokens from boundary k to the next (GAE with gamma = lambda = 1 on the boundaries); an unparseable boundary takes the row's previous value, else the group's mean reward")
record_choice("genac", "REINFORCE baseline of the critic rows", "the mean critic reward of the group's critic rows; in the joint stage they are trained by the run's loss (ppo_clip) with that advantage, like the actor")

"""Preference losses: DPO, RPO (DPO + SFT on the preferred responses) and KTO.

They read sequence log-ratios against the frozen reference (the initial policy the run already
builds for a KL): rho_i = sum_t m_it (logp_it - ref_it), summed over the row's loss-masked tokens
(a multi-turn episode: every policy turn, observations masked out, as everywhere).

Where the pairs come from. Every row carries a reward and a group (``rewards``, ``group_index``):

- online, a group is one task's rollout group; ``pairing`` builds pairs from it: ``best_worst``
  (the highest- vs the lowest-reward row, one pair per group whose rewards differ) or ``pos_neg``
  (every row above the group's mean reward x every row below it: all correct x incorrect for 0/1
  rewards). KTO labels each row by itself: desirable when its reward > ``desirable_threshold``.
- offline (``agent_rl/algorithms/preference_data.py``), a JSONL pair is a group of two rows with
  rewards 1 (chosen) and 0 (rejected); a labelled sample is a group of one row with reward 1 / 0.

A group's objective J_g (the mean over its pairs; 0 without any) is put on every token of every row
of the group, and ``seq_mean_token_mean`` (the aggregation these losses require) turns that into
sum_g G_g J_g / sum_g G_g: the mean over pairs for offline data (every group two rows, one pair),
group-size-weighted for rollout groups. A micro-batch must hold whole groups
(``learner.micro_batch_size`` a multiple of ``rollout.group_size``), as for every group loss, and
a row must be a whole episode (``rollout.layout: concat``; per-turn rows would be paired turn by turn).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from agent_rl.algorithms.losses.common import broadcast, group_ids, seq_len, seq_sum
from agent_rl.algorithms.needs import NeedContext, register_need
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    record_choice,
    register_policy_loss,
    require,
)

Pairing = Literal["best_worst", "pos_neg"]
# rewards closer than this (relative) are ties: no pair, not "above the mean"
_TIE = 1e-6


def preference_pairs(
    rewards_B: torch.Tensor, group_index_B: torch.Tensor, pairing: Pairing
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(chosen row, rejected row, dense group id) of every pair, each ``_P``, in group then row order.

    ``best_worst``: per group, the first row with the highest reward vs the first with the lowest,
    when they differ. ``pos_neg``: every row above the group's mean x every row below it.
    """
    rewards = rewards_B.detach().to(torch.float64).cpu()
    gid_B, n = group_ids(group_index_B.detach().cpu())
    chosen, rejected, groups = [], [], []
    for g in range(n):
        rows = torch.nonzero(gid_B == g).flatten()
        r = rewards[rows]
        tol = _TIE * (1.0 + float(r.abs().max()))
        if pairing == "best_worst":
            if float(r.max() - r.min()) > tol:
                chosen.append(int(rows[int(torch.argmax(r))]))
                rejected.append(int(rows[int(torch.argmin(r))]))
                groups.append(g)
        else:
            mean = float(r.mean())
            above = [int(i) for i, v in zip(rows, r, strict=True) if float(v) > mean + tol]
            below = [int(i) for i, v in zip(rows, r, strict=True) if float(v) < mean - tol]
            for w in above:
                for lo in below:
                    chosen.append(w)
                    rejected.append(lo)
                    groups.append(g)
    as_long = lambda v: torch.tensor(v, dtype=torch.long, device=rewards_B.device)  # noqa: E731
    return as_long(chosen), as_long(rejected), as_long(groups)


def _sequence_log_ratio(x: LossInputs, entry: str) -> torch.Tensor:
    """rho_i = sum_t m_it (logp_it - ref_it); carries the gradient of ``logprobs_BT``."""
    ref_BT = require(x, "ref_logprobs_BT", entry)
    return seq_sum(x.logprobs_BT - ref_BT.detach(), x.loss_mask_BT)


def _pairs(
    x: LossInputs, pairing: Pairing, entry: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    rewards_B = require(x, "rewards_B", entry)
    group_index_B = require(x, "group_index_B", entry)
    chosen_P, rejected_P, pair_group_P = preference_pairs(rewards_B, group_index_B, pairing)
    gid_B, n = group_ids(group_index_B.to(x.logprobs_BT.device))
    return chosen_P, rejected_P, pair_group_P, gid_B, n


def _per_group_mean(values_P: torch.Tensor, group_P: torch.Tensor, n: int) -> torch.Tensor:
    """Mean over each group's pairs (0 for a group without pairs), ``_G``."""
    sums = torch.zeros(n, dtype=values_P.dtype, device=values_P.device).index_add(0, group_P, values_P)
    counts = torch.zeros(n, dtype=values_P.dtype, device=values_P.device).index_add(
        0, group_P, torch.ones_like(values_P)
    )
    return sums / counts.clamp(min=1.0)


def _dpo_terms(
    x: LossInputs, cfg: DpoConfig, entry: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, dict[str, float]]:
    """Per pair: the DPO loss; plus the pairs' chosen rows, groups, row groups, n and the metrics."""
    rho_B = _sequence_log_ratio(x, entry)
    chosen_P, rejected_P, group_P, gid_B, n = _pairs(x, cfg.pairing, entry)
    h_P = cfg.beta * (rho_B[chosen_P] - rho_B[rejected_P])
    loss_P = -(1.0 - cfg.label_smoothing) * F.logsigmoid(h_P) - cfg.label_smoothing * F.logsigmoid(-h_P)
    with torch.no_grad():
        num = max(int(h_P.numel()), 1)
        metrics = {
            "loss/pref_pairs_per_row": float(h_P.numel()) / max(int(rho_B.numel()), 1),
            "loss/pref_accuracy": float((h_P > 0).sum()) / num,
            "loss/pref_margin": float(h_P.sum()) / num,
            "loss/pref_reward_chosen": cfg.beta * float(rho_B[chosen_P].sum()) / num,
            "loss/pref_reward_rejected": cfg.beta * float(rho_B[rejected_P].sum()) / num,
        }
    return loss_P, chosen_P, group_P, gid_B, n, metrics


class DpoConfig(ComponentConfig):
    beta: float = Field(
        0.1, gt=0.0, description="inverse temperature of the implicit reward beta log pi/pi_ref (DPO: 0.1)"
    )
    label_smoothing: float = Field(
        0.0, ge=0.0, lt=0.5, description="cDPO: probability eps that a pair's label is flipped (0: plain DPO)"
    )
    pairing: Pairing = Field(
        "best_worst",
        description="pairs of a rollout group: best_worst (one per group) or pos_neg (all above-mean x below-mean rows)",
    )


@register_policy_loss(
    "dpo",
    config=DpoConfig,
    needs={"ref_logprobs", "rewards", "group_index"},
    aggregation="seq_mean_token_mean",
    status="reference",
    evidence="tests/algorithms/test_losses_preference_trl.py vs TRL 1.16.0 "
    "DPOTrainer._compute_loss, sigmoid (golden file "
    "tests/algorithms/data/trl_preference_golden.json); label_smoothing hand-computed "
    "only",
)
def dpo(x: LossInputs, cfg: DpoConfig) -> LossOutput:
    """DPO, Direct Preference Optimization (Rafailov et al. 2023, arXiv 2305.18290).

    rho_i = sum_t (log pi - log pi_ref)(y_it) over the row's policy tokens; per pair (w preferred, l not):
        h = beta * (rho_w - rho_l)
        L_p = -(1 - eps) log sigmoid(h) - eps log sigmoid(-h)        (eps = label_smoothing, cDPO; 0: DPO)
    J_g = mean of L_p over the pairs of group g, on every token of its rows (0 without pairs).
    Pairs from a rollout group: best_worst (max vs min reward, first row on ties) or pos_neg (every
    above-mean x every below-mean row). Requires aggregation seq_mean_token_mean, whole groups per
    micro-batch; offline pairs (groups of two) give the mean over pairs, as TRL's sigmoid loss.
    """
    loss_P, _, group_P, gid_B, n, metrics = _dpo_terms(x, cfg, "dpo")
    loss_B = _per_group_mean(loss_P, group_P, n)[gid_B]
    return LossOutput(loss_BT=broadcast(loss_B, x.logprobs_BT), metrics=metrics)


class RpoConfig(DpoConfig):
    alpha: float = Field(1.0, ge=0.0, description="weight of the NLL of the preferred response (IRPO / TRL: 1.0)")
    nll: Literal["token_mean", "sum"] = Field(
        "token_mean", description="NLL of y_w: -log pi(y_w)/|y_w| (token_mean, IRPO) or -log pi(y_w) (sum, Liu et al.)"
    )


@register_policy_loss(
    "rpo",
    config=RpoConfig,
    needs={"ref_logprobs", "rewards", "group_index"},
    aggregation="seq_mean_token_mean",
    status="reference",
    evidence="tests/algorithms/test_losses_preference_trl.py vs TRL 1.16.0 "
    "DPOTrainer._compute_loss, [sigmoid, sft] (golden file "
    "tests/algorithms/data/trl_preference_golden.json)",
)
def rpo(x: LossInputs, cfg: RpoConfig) -> LossOutput:
    """RPO, DPO plus an SFT loss on the preferred response (Liu et al. 2024, arXiv 2405.16436; Pang et al. 2024, IRPO).

    Per pair: L_p = L_p^DPO + alpha * NLL(y_w), with (nll = token_mean, the default)
        NLL(y_w) = -(1/|y_w|) sum_t log pi(y_w,t)        or (nll = sum) -sum_t log pi(y_w,t)
    |y_w| the preferred row's policy tokens. J_g = mean of L_p over the group's pairs, on every token
    of its rows; pairs, aggregation and micro-batches as in ``dpo``. TRL's [sigmoid, sft] mix averages
    the NLL over all chosen tokens of the batch: the same as ours when the chosen lengths are equal.
    """
    loss_P, chosen_P, group_P, gid_B, n, metrics = _dpo_terms(x, cfg, "rpo")
    nll_B = -seq_sum(x.logprobs_BT, x.loss_mask_BT)
    if cfg.nll == "token_mean":
        nll_B = nll_B / seq_len(x.loss_mask_BT).to(nll_B.dtype)
    loss_P = loss_P + cfg.alpha * nll_B[chosen_P]
    metrics["loss/rpo_nll"] = float(nll_B[chosen_P].detach().mean()) if chosen_P.numel() else 0.0
    loss_B = _per_group_mean(loss_P, group_P, n)[gid_B]
    return LossOutput(loss_BT=broadcast(loss_B, x.logprobs_BT), metrics=metrics)


def _kto_reference_point(ctx: NeedContext) -> torch.Tensor:
    """z0 = max(0, mean_i (sum_t log pi - log pi_ref)(y_i)) over the step's rows, before the update;
    every row gets the same value (so any micro-batching gives the same z0)."""
    policy_BT, _ = ctx.score(ctx.policy, ctx.batch)
    ref_BT = ctx.batch.ref_logprobs_BT
    if ref_BT is None:
        raise ValueError("need 'kto_z0' is computed after 'ref_logprobs'; declare both")
    mask = ctx.batch.loss_mask_BT
    z0 = seq_sum(policy_BT - ref_BT, mask).mean().clamp(min=0.0)
    return z0.expand(mask.shape[0]).clone()


register_need(
    "kto_z0",
    "KTO's reference point: the policy's KL to the reference on the step's own rows (clamped at 0)",
    compute=_kto_reference_point,
)


class KtoConfig(ComponentConfig):
    beta: float = Field(0.1, gt=0.0, description="inverse temperature of the implicit reward (KTO: 0.1)")
    desirable_weight: float = Field(1.0, ge=0.0, description="lambda_D, weight of desirable samples (KTO: 1)")
    undesirable_weight: float = Field(1.0, ge=0.0, description="lambda_U, weight of undesirable samples (KTO: 1)")
    desirable_threshold: float = Field(
        0.5, description="a row is desirable when its reward > this (binary verifier: 0.5)"
    )


@register_policy_loss(
    "kto",
    config=KtoConfig,
    needs={"ref_logprobs", "rewards", "kto_z0"},
    aggregation="seq_mean_token_mean",
    status="reference",
    evidence="tests/algorithms/test_losses_preference_trl.py vs TRL 1.16.0 "
    "KTOTrainer._compute_loss (golden file); online z0 is our choice (recorded)",
)
def kto(x: LossInputs, cfg: KtoConfig) -> LossOutput:
    """KTO, Kahneman-Tversky Optimization (Ethayarajh et al. 2024, arXiv 2402.01306).

    r_i = sum_t (log pi - log pi_ref)(y_it); z0 = max(0, mean over the step's rows of r_i), detached
    (need ``kto_z0``, computed once before the update). Prospect-theory value of row i:
        v_i = lambda_D sigmoid(beta (r_i - z0))    if desirable (reward > desirable_threshold)
        v_i = lambda_U sigmoid(beta (z0 - r_i))    otherwise
    L_i = lambda_{y_i} - v_i on every token of row i; with seq_mean_token_mean the mean over rows
    (TRL's mean over desirable and undesirable samples together). Online, each rollout is labelled by
    its own reward; z0 is estimated on the rows themselves, not on mismatched (x, y') pairs.
    """
    rewards_B = require(x, "rewards_B", "kto").to(x.logprobs_BT.device)
    if "kto_z0" not in x.extras:
        raise ValueError("'kto' needs extras['kto_z0'], which the caller did not provide")
    z0 = torch.as_tensor(x.extras["kto_z0"], dtype=x.logprobs_BT.dtype, device=x.logprobs_BT.device).detach()
    z0_B = z0.expand(rewards_B.shape[0]) if z0.dim() == 0 else z0
    r_B = _sequence_log_ratio(x, "kto")
    desirable_B = rewards_B > cfg.desirable_threshold
    loss_B = torch.where(
        desirable_B,
        cfg.desirable_weight * (1.0 - torch.sigmoid(cfg.beta * (r_B - z0_B))),
        cfg.undesirable_weight * (1.0 - torch.sigmoid(cfg.beta * (z0_B - r_B))),
    )
    with torch.no_grad():
        metrics = {
            "loss/kto_z0": float(z0_B[0]) if z0_B.numel() else 0.0,
            "loss/kto_desirable_frac": float(desirable_B.float().mean()) if desirable_B.numel() else 0.0,
            "loss/kto_reward_mean": cfg.beta * float(r_B.mean()) if r_B.numel() else 0.0,
        }
    return LossOutput(loss_BT=broadcast(loss_B, x.logprobs_BT), metrics=metrics)


for _key, _question, _choice in (
    (
        "dpo",
        "which pairs a rollout group gives",
        (
            "configurable: best_worst (default; one pair per group, first row on ties) or pos_neg (all above-mean "
            "x below-mean rows); groups with equal rewards give none"
        ),
    ),
    (
        "dpo",
        "how pair losses are averaged over a step of groups",
        (
            "mean over each group's pairs on every row, then seq_mean_token_mean: groups weighted by their size, "
            "equal-reward groups count as 0; offline pairs = mean over pairs"
        ),
    ),
    (
        "dpo",
        "sequence log-probability of a multi-turn episode",
        "sum of the policy tokens' logprobs (loss mask 1), observations excluded",
    ),
    (
        "rpo",
        "normalization and weight of the SFT term",
        "alpha = 1 on the per-sequence token mean of -log pi(y_w) (IRPO, TRL's recommendation); nll=sum gives Liu et al.'s -log pi(y_w)",
    ),
    (
        "kto",
        "reference point z0 without mismatched pairs",
        (
            "z0 = max(0, mean of the step's own sequence log-ratios) before the update (online rows are samples of "
            "pi, so this estimates KL(pi || pi_ref)); TRL uses mismatched (x, y') pairs"
        ),
    ),
    ("kto", "which rollouts are desirable", "reward > desirable_threshold (0.5 for 0/1 verifiers); no pairing needed"),
):
    record_choice(_key, _question, _choice)

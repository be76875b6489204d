"""Multiscale Policy Optimization, a documented interpretation of its one-sentence abstract.

The abstract (the only text of the method we had): "aligns long-horizon agent training with turn-level value
changes by combining multiscale advantage estimation for token-level credit assignment with
turn-level importance sampling for policy updates". No paper or code was found; our choices:

1. Turn-level values without a critic: V(s) = mean return-to-go over every visit of state key s
   within the prompt group (G2PO/GiGPO-style anchor states); a turn whose state has no key, or
   was visited once, is its own estimate.
2. A "scale" is a horizon h in turns. Scale h >= 1 is the h-turn value change (h-step TD
   advantage) D^h_{j,k} = sum_{i<h} gamma^i r_{j,k+i} + gamma^h V(s_{j,k+h}) - V(s_{j,k}), with V = 0
   past the end. Scale 0 is the episode scale: R_j - mean_group R (GRPO's outcome credit), so
   every turn keeps an outcome signal even where no state is shared.
3. Each scale is normalised over the step rows of the prompt group (mean_std_norm by default),
   then the scales are averaged with ``weights``; the turn's advantage goes to all its tokens.
4. Turn-level importance sampling is the policy loss ``turn_ppo`` (registered here): one ratio per
   turn, the geometric mean of its token ratios (as ST-PPO/SORL), with the PPO clip. Turns are the
   maximal runs of loss-masked tokens, so the loss needs no extra input. Pair the two with
   ``algorithm.credit={name: multiscale}`` and ``algorithm.loss={name: turn_ppo}``.
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from agent_rl.algorithms.credit.common import (
    batch_rows,
    discounted_turn_returns,
    scatter_turn_values,
    zscore,
)
from agent_rl.algorithms.credit.gigpo import NormMode
from agent_rl.algorithms.losses.common import (
    LOG_RATIO_CLAMP,
    log_ratio,
    ppo_surrogate,
    ratio_metrics,
)
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_credit,
    register_policy_loss,
    require,
)
from agent_rl.core.types import Trajectory


class MultiscaleConfig(ComponentConfig):
    scales: list[int] = Field([0, 1, 4], description="horizons in turns; 0 = the episode scale R - mean R (our choice)")
    weights: list[float] | None = Field(None, description="weight of each scale (None: equal weights)")
    gamma: float = Field(1.0, description="discount per turn of the returns and value changes")
    mode: NormMode = Field("mean_std_norm", description="per-scale normalisation over the group's step rows")
    eps: float = Field(1e-6, description="added to the std before dividing")

    @model_validator(mode="after")
    def _check(self) -> MultiscaleConfig:
        if not self.scales or any(h < 0 for h in self.scales):
            raise ValueError(f"scales must be a non-empty list of horizons >= 0; got {self.scales}")
        if self.weights is not None and len(self.weights) != len(self.scales):
            raise ValueError(f"weights needs one entry per scale ({len(self.scales)}); got {self.weights}")
        return self


def state_values(trajectories: list[Trajectory], returns: list[list[float]]) -> list[list[float]]:
    """V(s_{j,k}) = mean return-to-go over the group's visits of the turn's state key (own return without a key)."""
    visits: dict[str, list[float]] = {}
    for t, g in zip(trajectories, returns, strict=True):
        for u, r in zip(t.turns_N, g, strict=True):
            if u.state_key is not None:
                visits.setdefault(u.state_key, []).append(r)
    return [
        [
            sum(visits[u.state_key]) / len(visits[u.state_key]) if u.state_key is not None else r
            for u, r in zip(t.turns_N, g, strict=True)
        ]
        for t, g in zip(trajectories, returns, strict=True)
    ]


def scale_changes(trajectories: list[Trajectory], h: int, gamma: float) -> list[list[float]]:
    """D^h of every turn (h >= 1), or R_j - mean_group R on every turn (h = 0)."""
    rewards = [[u.reward for u in t.turns_N] for t in trajectories]
    if h == 0:
        outcomes = [float(t.reward or 0.0) for t in trajectories]
        mean = sum(outcomes) / len(outcomes)
        return [[r - mean] * len(t.turns_N) for t, r in zip(trajectories, outcomes, strict=True)]
    returns = [discounted_turn_returns(r, gamma) for r in rewards]
    values = state_values(trajectories, returns)
    out = []
    for r, v in zip(rewards, values, strict=True):
        n = len(r)
        out.append([
            sum(gamma**i * r[k + i] for i in range(min(h, n - k))) + (gamma**h * v[k + h] if k + h < n else 0.0) - v[k]
            for k in range(n)
        ])  # fmt: skip
    return out


def multiscale_turn_advantages(trajectories: list[Trajectory], cfg: MultiscaleConfig) -> list[list[float]]:
    weights = cfg.weights or [1.0 / len(cfg.scales)] * len(cfg.scales)
    out = [[0.0] * len(t.turns_N) for t in trajectories]
    for h, w in zip(cfg.scales, weights, strict=True):
        changes = scale_changes(trajectories, h, cfg.gamma)
        flat = zscore([d for c in changes for d in c], cfg.mode, cfg.eps)
        n = 0
        for j, c in enumerate(changes):
            for k in range(len(c)):
                out[j][k] += w * flat[n]
                n += 1
    return out


@register_credit(
    "multiscale",
    config=MultiscaleConfig,
    status="interpretation",
    evidence="built from a one-sentence abstract (seed 002; no paper or code found): values, scales "
    "and weights are ours (module docstring lists them); tests/algorithms/test_credit_turn.py",
)
def multiscale(x: AdvantageInputs, cfg: MultiscaleConfig) -> AdvantageOutput:
    """Multiscale Policy Optimization (abstract only; our documented interpretation, see the module docstring).

    V(s) = mean return-to-go over the prompt group's visits of state key s (own return without a shared key).
    Scale h >= 1: D^h_k = sum_{i<h} gamma^i r_{k+i} + gamma^h V(s_{k+h}) - V(s_k) (V = 0 past the end);
    scale 0: R - mean_group R. A_k = sum_h w_h norm_h(D^h_k), norm over the group's step rows, on turn k's tokens.
    Turn-level importance sampling: the ``turn_ppo`` policy loss.
    """
    groups = require(x, "groups", "multiscale")
    rows = batch_rows(groups, x)
    per_turn: list[list[float]] = []
    for g in groups:
        per_turn += multiscale_turn_advantages([t for t in g.trajectories_G if t.trainable], cfg)
    return AdvantageOutput(advantages_BT=scatter_turn_values(rows, per_turn, x.loss_mask_BT).float())


class TurnPpoConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="turn ratio >= 1 - eps_low (our choice: PPO's bounds)")
    eps_high: float = Field(0.28, description="turn ratio <= 1 + eps_high")


def turn_runs(mask_BT: torch.Tensor) -> torch.Tensor:
    """1, 2, ... numbering the maximal runs of loss-masked tokens of each row (0 off the mask)."""
    m = mask_BT > 0
    starts = m & ~torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], dim=1)
    return torch.cumsum(starts.long(), dim=1) * m.long()


def turn_mean(values_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Each masked token gets the mean of ``values_BT`` over its turn (run); 0 off the mask."""
    B, T = mask_BT.shape
    run_BT = turn_runs(mask_BT)
    idx = (torch.arange(B, device=mask_BT.device)[:, None] * (T + 1) + run_BT).flatten()
    m = (mask_BT > 0).flatten().to(values_BT.dtype)
    sums = torch.zeros(B * (T + 1), dtype=values_BT.dtype, device=values_BT.device).index_add_(
        0, idx, values_BT.flatten() * m
    )
    counts = torch.zeros_like(sums).index_add_(0, idx, m)
    return ((sums / counts.clamp(min=1))[idx] * m).view(B, T)


@register_policy_loss(
    "turn_ppo",
    config=TurnPpoConfig,
    status="interpretation",
    evidence="turn ratio of ST-PPO / SORL (arXiv 2511.20718) from a summary and a third-party "
    "implementation; PPO's bounds are our choice; tests/algorithms/test_credit_turn.py",
)
def turn_ppo(x: LossInputs, cfg: TurnPpoConfig) -> LossOutput:
    """Turn-level importance sampling with the PPO clip (ST-PPO / SORL, arXiv 2511.20718; Multiscale PO's update).

    rho_turn = exp(mean_{t in turn} log rho_t), a turn = a maximal run of loss-masked tokens (observations split turns);
    token form r_t = sg(rho_turn) * pi_t / sg(pi_t) (value rho_turn, gradient through token t);
    L_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)): a clipped turn loses the gradient of all its tokens.
    """
    lr_BT = log_ratio(x)
    turn_lr_BT = turn_mean(lr_BT.detach(), x.loss_mask_BT)
    r_BT = torch.exp((x.logprobs_BT - x.logprobs_BT.detach() + turn_lr_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    loss_BT, low_BT, high_BT = ppo_surrogate(r_BT, x.advantages_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, low_BT, high_BT))

"""Token-ratio losses with hard clip bounds: PPO and its fixed, dynamic and adaptive-bound variants."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import (
    dual_clip,
    log_ratio,
    ppo_surrogate,
    ratio_metrics,
)
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    register_policy_loss,
    require,
)


class PpoClipConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="lower clip: ratio >= 1 - eps_low")
    eps_high: float = Field(0.28, description="upper clip: ratio <= 1 + eps_high (DAPO clip-higher)")
    dual_clip_c: float | None = Field(3.0, description="dual-clip bound for A < 0 (None disables)")


@register_policy_loss(
    "ppo_clip",
    config=PpoClipConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_ppo.py: loss and gradient equal verl 0.9.1 "
    "compute_policy_loss_vanilla (0.08, same gradients; random inputs max diff 0; run "
    "outside CI)",
)
def ppo_clip(x: LossInputs, cfg: PpoClipConfig) -> LossOutput:
    """PPO clipped surrogate (Schulman et al. 2017) with DAPO's asymmetric clip and dual clip.

    rho_t = exp(logp_t - logp_old_t)
    L_t   = max(-A_t * rho_t, -A_t * clip(rho_t, 1 - eps_low, 1 + eps_high))
    and, when A_t < 0 and ``dual_clip_c`` is set (Ye et al. 2020), L_t = min(L_t, -A_t * c).
    Agrees with verl's ``vanilla`` policy loss.
    """
    lr_BT = log_ratio(x)
    adv_BT = x.advantages_BT
    loss_BT, low_BT, high_BT = ppo_surrogate(torch.exp(lr_BT), adv_BT, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
    loss_BT = dual_clip(loss_BT, adv_BT, cfg.dual_clip_c)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, low_BT, high_BT))


@register_policy_loss(
    "reinforce",
    config=ComponentConfig,
    status="reference",
    evidence="tests/algorithms/test_losses_ppo.py: loss and gradient equal verl 0.9.1 "
    "compute_policy_loss_reinforce (run outside CI)",
)
def reinforce(x: LossInputs, cfg: ComponentConfig) -> LossOutput:
    """Plain policy gradient, no ratio, no clip (REINFORCE; RLOO, Ahmadian et al. 2024; ReMax, Li et al. 2023).

    L_t = -A_t * logp_t, so grad = -A_t * grad logp_t. Pair with ``seq_mean_token_sum`` for RLOO's
    sum over tokens. Agrees with verl's ``compute_policy_loss_reinforce`` (without its IS weights,
    which ``rollout_is`` adds).
    """
    loss_BT = -x.advantages_BT * x.logprobs_BT
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, log_ratio(x)))


class DcpoConfig(ComponentConfig):
    eps_low: float = Field(0.2, description="probability-scaled lower budget: (1 - r) * r * q <= eps_low")
    eps_high: float = Field(0.28, description="probability-scaled upper budget: (r - 1) * r * q <= eps_high")
    ratio_max: float = Field(10.0, description="cap on the dynamic upper bound (DCPO recipe: 10)")
    dual_clip_c: float | None = Field(10.0, description="dual-clip bound for A < 0 (DCPO recipe: 10; None disables)")


@register_policy_loss(
    "dcpo",
    config=DcpoConfig,
    status="paper",
    evidence="DCPO's dynamic bounds (Yang et al. 2025), defaults from the authors' run_dcpo.sh; "
    "hand-computed in tests/algorithms/test_losses_ppo.py",
)
def dcpo(x: LossInputs, cfg: DcpoConfig) -> LossOutput:
    """DCPO dynamic clipping (Yang et al. 2025, "DCPO: Dynamic Clipping Policy Optimization").

    The clip bounds depend on the old probability q = pi_old(y_t): the allowed change of the *new*
    probability p = r q is |(r - 1) p| <= eps, which gives per token
        low_t  = 0.5 + 0.5 * sqrt(max(1 - 4 eps_low / q, 0))
        high_t = min(0.5 + 0.5 * sqrt(1 + 4 eps_high / q), ratio_max)
    L_t = max(-A r, -A clip(r, low_t, high_t)), dual-clipped at c for A < 0. Rare tokens (small q)
    get wide bounds, likely ones tight bounds. Defaults are the authors' recipe (run_dcpo.sh).
    DCPO's smoothed advantage is the ``dcpo_smooth`` advantage estimator, not part of this loss.
    """
    lr_BT = log_ratio(x)
    with torch.no_grad():
        q_BT = torch.exp(x.old_logprobs_BT.detach()).clamp(min=1e-12)
        low_BT = 0.5 + 0.5 * torch.sqrt((1.0 - 4.0 * cfg.eps_low / q_BT).clamp(min=0.0))
        high_BT = (0.5 + 0.5 * torch.sqrt(1.0 + 4.0 * cfg.eps_high / q_BT)).clamp(max=cfg.ratio_max)
    loss_BT, clip_low_BT, clip_high_BT = ppo_surrogate(torch.exp(lr_BT), x.advantages_BT, low_BT, high_BT)
    loss_BT = dual_clip(loss_BT, x.advantages_BT, cfg.dual_clip_c)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, clip_low_BT, clip_high_BT))


class BapoConfig(ComponentConfig):
    target: float = Field(0.5, description="rho_0: wanted share of the positive-advantage contribution")
    lower_start: float = Field(0.6, description="a-: first lower ratio bound c_low")
    lower_max: float = Field(0.9, description="a+: largest c_low the search may reach")
    lower_step: float = Field(0.05, description="delta_2: increment of c_low per search step")
    upper_start: float = Field(1.2, description="b-: first upper ratio bound c_high")
    upper_max: float = Field(3.0, description="b+: largest c_high the search may reach")
    upper_step: float = Field(0.1, description="delta_1: increment of c_high per search step")
    dual_clip_c: float | None = Field(3.0, description="dual-clip bound for A < 0 (None disables)")


class BapoState:
    """The bounds BAPO chose on its last call and how often it searched; checkpointed by the trainer."""

    def __init__(self) -> None:
        self.c_low: float | None = None
        self.c_high: float | None = None
        self.positive_share: float | None = None
        self.calls = 0

    def state_dict(self) -> dict[str, Any]:
        return {"c_low": self.c_low, "c_high": self.c_high, "positive_share": self.positive_share, "calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c_low = state["c_low"]
        self.c_high = state["c_high"]
        self.positive_share = state["positive_share"]
        self.calls = int(state["calls"])


def _bapo_search(
    ratio_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, cfg: BapoConfig
) -> tuple[float, float, float]:
    """Walk (c_low, c_high) up from (a-, b-) until the positive share reaches rho_0 or both hit their caps."""
    with torch.no_grad():
        n_low = round(max(cfg.lower_max - cfg.lower_start, 0.0) / cfg.lower_step) if cfg.lower_step > 0 else 0
        n_high = round(max(cfg.upper_max - cfg.upper_start, 0.0) / cfg.upper_step) if cfg.upper_step > 0 else 0
        k_K = torch.arange(max(n_low, n_high) + 1, dtype=torch.float64, device=ratio_BT.device)
        low_K = (cfg.lower_start + k_K * cfg.lower_step).clamp(max=max(cfg.lower_max, cfg.lower_start))
        high_K = (cfg.upper_start + k_K * cfg.upper_step).clamp(max=max(cfg.upper_max, cfg.upper_start))
        m = mask_BT.bool()
        r_N = ratio_BT.detach()[m].to(torch.float64)
        a_N = adv_BT.detach()[m].to(torch.float64)
        # a token contributes gradient unless its clip side is active: A > 0 needs r <= c_high, A < 0 needs r >= c_low
        pos_K = ((a_N > 0) & (r_N[None, :] <= high_K[:, None])).to(torch.float64) @ (r_N * a_N.clamp(min=0))
        neg_K = ((a_N < 0) & (r_N[None, :] >= low_K[:, None])).to(torch.float64) @ (r_N * (-a_N).clamp(min=0))
        share_K = torch.where(pos_K + neg_K > 0, pos_K / (pos_K + neg_K).clamp(min=1e-300), torch.ones_like(pos_K))
        reached_K = share_K >= cfg.target
        k = int(torch.nonzero(reached_K)[0]) if bool(reached_K.any()) else len(k_K) - 1
        return float(low_K[k]), float(high_K[k]), float(share_K[k])


@register_policy_loss(
    "bapo",
    config=BapoConfig,
    state=BapoState,
    status="paper",
    evidence="BAPO's adaptive clipping (Xi et al. 2025); ranges from the authors' README, step "
    "sizes from their script; hand-computed in tests/algorithms/test_losses_ppo.py",
)
def bapo(x: LossInputs, cfg: BapoConfig) -> LossOutput:
    """BAPO adaptive clipping (Xi et al. 2025, "BAPO: Balanced Policy Optimization with Adaptive Clipping").

    For the tokens of this call, share(c_low, c_high) = P / (P + N) with
        P = sum_{A>0, r <= c_high} r * A,   N = sum_{A<0, r >= c_low} r * |A|
    (the gradient-carrying positive and negative contributions). Starting from (a-, b-) both bounds
    move up by (delta_2, delta_1) per step, each up to its cap, until share >= rho_0; then
    L_t = max(-A r, -A clip(r, c_low, c_high)), dual-clipped for A < 0. Raising c_high admits more
    positive tokens, raising c_low drops more negative ones. Defaults: paper's ranges (authors'
    README), step sizes of the authors' example script. The search reruns on every call (each
    micro-batch: as in the authors' verl recipe); ``x.state`` (a ``BapoState``) records the last
    bounds for logging and checkpoints.
    """
    state: BapoState = require(x, "state", "bapo")
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    c_low, c_high, share = _bapo_search(ratio_BT, x.advantages_BT, x.loss_mask_BT, cfg)
    state.c_low, state.c_high, state.positive_share = c_low, c_high, share
    state.calls += 1
    loss_BT, clip_low_BT, clip_high_BT = ppo_surrogate(ratio_BT, x.advantages_BT, c_low, c_high)
    loss_BT = dual_clip(loss_BT, x.advantages_BT, cfg.dual_clip_c)
    metrics = ratio_metrics(x, lr_BT, clip_low_BT, clip_high_BT)
    metrics.update({"loss/bapo_c_low": c_low, "loss/bapo_c_high": c_high, "loss/bapo_positive_share": share})
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


class WapoConfig(ComponentConfig):
    eps: float = Field(0.2, description="upper clip of the ratio on positive rollouts: min(r, 1 + eps)")


@register_policy_loss(
    "wapo",
    config=WapoConfig,
    status="paper",
    evidence="WAPO (A Gradient Perspective on RLVR Stability, 2026) as the docstring states it; "
    "hand-computed in tests/algorithms/test_losses_ppo.py",
)
def wapo(x: LossInputs, cfg: WapoConfig) -> LossOutput:
    """WAPO, winner-advantage policy optimization ("A Gradient Perspective on RLVR Stability", 2026).

    Only tokens with A > 0 (the winners) are trained:  L_t = -min(r_t, 1 + eps) * max(A_t, 0).
    Negative-advantage tokens get loss 0 (they still count in the aggregation's token count; drop
    them with a filter if that matters).
    """
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    adv_pos_BT = x.advantages_BT.clamp(min=0.0)
    loss_BT = -torch.clamp(ratio_BT, max=1.0 + cfg.eps) * adv_pos_BT
    high_BT = (ratio_BT.detach() > 1.0 + cfg.eps) & (adv_pos_BT > 0)
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, None, high_BT))


class KimiK3Config(ComponentConfig):
    ratio_low: float = Field(0.8, description="alpha: lower bound of the clipped ratio (value not published; ours)")
    ratio_high: float = Field(1.28, description="beta: upper bound of the clipped ratio (value not published; ours)")
    tau: float = Field(0.1, description="weight of the (log r)^2 proximal term (value not published; ours)")


@register_policy_loss(
    "kimi_k3",
    config=KimiK3Config,
    status="interpretation",
    evidence="the KIMI-K3 objective as summarised in survey 000, not the report's text; clip "
    "bounds not published (ours); tests/algorithms/test_losses_ppo.py",
)
def kimi_k3(x: LossInputs, cfg: KimiK3Config) -> LossOutput:
    """Kimi K2.5 / K3 RL objective (Moonshot AI, KIMI-K3 report, as summarised in survey 000).

    L_t = -clip(r_t, alpha, beta) * A_t + tau * (log r_t)^2
    No min(): outside [alpha, beta] the first term has no gradient and the proximal term pulls the
    token back, grad = -2 tau log r_t * grad logp_t. At r = 1 the gradient is -A grad logp.
    Pair with ``token_mean`` (the report divides by the total token count).
    """
    lr_BT = log_ratio(x)
    ratio_BT = torch.exp(lr_BT)
    loss_BT = -torch.clamp(ratio_BT, cfg.ratio_low, cfg.ratio_high) * x.advantages_BT + cfg.tau * lr_BT**2
    r = ratio_BT.detach()
    return LossOutput(loss_BT=loss_BT, metrics=ratio_metrics(x, lr_BT, r < cfg.ratio_low, r > cfg.ratio_high))

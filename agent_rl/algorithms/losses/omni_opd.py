"""OmniOPD's objective (loss ``omni_opd``): chunk targets from the teacher's audit, a base-model KL
anchor on the tokens no chunk covers (arXiv 2606.01476; the audit: ``filters/omni_opd.py``).

For a chunk c of row i (tokens t in c, k_sem(c) from N teacher continuations):

    pi_bar(c) = exp(mean_{t in c} log pi_theta(y_t))          the student's geometric-mean chunk probability
    pi_hat(c) = (k_sem(c) + alpha * pi_bar(c)) / (N + alpha)   Dirichlet-Multinomial (Beta) smoothing, detached
    loss_t    = -pi_hat(c) * log pi_theta(y_t)                 t in an audited chunk
    loss_t    = beta * KL_t(pi_theta || pi_base)               every other generated token (k3 on the sampled token)

pi_hat is the posterior mean of the chunk's acceptance rate: N teacher "trials" with k_sem
(fractional) successes, under a prior of strength alpha centred on the student's own pi_bar. The
base model is the run's frozen initial policy (need ``ref_logprobs``). The per-token losses go
through ``algorithm.aggregation`` like any other loss.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.losses.common import LOG_RATIO_CLAMP
from agent_rl.algorithms.needs import NeedContext, register_need
from agent_rl.algorithms.registry import (
    ComponentConfig,
    LossInputs,
    LossOutput,
    record_choice,
    register_policy_loss,
    require,
)


def audit_tensor(ctx: NeedContext) -> torch.Tensor:
    """``[B, T, 3]``: per token its chunk's index in the row (-1: no chunk), k_sem and N of that chunk."""
    rows = [t for g in ctx.groups for t in g.trajectories_G if t.trainable]  # the batch's rows, in order
    B, T = ctx.batch.loss_mask_BT.shape
    out = torch.zeros(B, T, 3, dtype=torch.float32)
    out[..., 0] = -1
    for b, t in enumerate(rows):
        audit = t.info.get("omni_opd")
        if audit is None:
            raise ValueError("the loss omni_opd needs the filter omni_opd in algorithm.filters (it audits the chunks)")
        C = int(audit["chunk_tokens"])
        for c, (a, k) in enumerate(zip(audit["anchors"], audit["k_sem"], strict=True)):
            out[b, a : a + C] = torch.tensor([float(c), float(k), float(audit["samples"])])
    return out.to(ctx.batch.loss_mask_BT.device)


register_need("omni_opd_chunks", "OmniOPD's audited chunks of each row (index, k_sem, N per token)", compute=audit_tensor)


class OmniOpdConfig(ComponentConfig):
    alpha: float = Field(1.0, gt=0.0, description="strength of the Dirichlet-Multinomial prior centred on the student's pi_bar (reimplementation's default)")
    beta: float = Field(0.1, ge=0.0, description="weight of the base-model KL anchor on unaudited tokens (reimplementation's default)")


def chunk_targets(logprobs_BT: torch.Tensor, chunks_BT3: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(pi_hat_BT, audited_BT): each audited token's chunk target (detached), and where chunks are."""
    idx_BT = chunks_BT3[..., 0].long()
    audited_BT = idx_BT >= 0
    M = int(idx_BT.max().item()) + 1 if bool(audited_BT.any()) else 0
    if M == 0:
        return torch.zeros_like(logprobs_BT), audited_BT
    onehot_BTM = (idx_BT.unsqueeze(-1) == torch.arange(M, device=idx_BT.device)).to(torch.float64)
    lp_BT = logprobs_BT.detach().double()
    mean_BM = (lp_BT.unsqueeze(-1) * onehot_BTM).sum(1) / onehot_BTM.sum(1).clamp(min=1)
    pi_bar_BT = torch.exp((onehot_BTM * mean_BM.unsqueeze(1)).sum(-1))
    k_BT, n_BT = chunks_BT3[..., 1].double(), chunks_BT3[..., 2].double()
    pi_hat_BT = torch.where(audited_BT, (k_BT + alpha * pi_bar_BT) / (n_BT + alpha), torch.zeros_like(k_BT))
    return pi_hat_BT.to(logprobs_BT.dtype), audited_BT


@register_policy_loss("omni_opd", config=OmniOpdConfig, needs={"omni_opd_chunks", "ref_logprobs"}, with_filters=("omni_opd",),
                      status="interpretation",
                      evidence="formulas from a third-party reimplementation (benyucong/verl omniopd_*.py), the "
                               "abstract names the parts only; 7 recorded choices; tests/algorithms/test_omni_opd.py")
def omni_opd(x: LossInputs, cfg: OmniOpdConfig) -> LossOutput:
    """OmniOPD logit-free on-policy distillation (Zhou et al. 2026, arXiv 2606.01476).

    audited t in chunk c: -pi_hat(c) log pi(y_t), pi_hat = (k_sem + alpha pi_bar) / (N + alpha), pi_bar = exp(mean_c log pi)
    other generated t: beta * k3_t, k3 = r - 1 - log r, r = pi_base(y_t) / pi(y_t)  (the base-model anchor)
    Needs the filter omni_opd (the audit); advantages are not read.
    """
    ref_BT = require(x, "ref_logprobs_BT", "omni_opd")
    chunks_BT3 = x.extras.get("omni_opd_chunks")
    if chunks_BT3 is None:
        raise ValueError("'omni_opd' needs omni_opd_chunks, which the caller did not provide")
    mask_BT = x.loss_mask_BT.to(x.logprobs_BT.dtype)
    pi_hat_BT, audited_BT = chunk_targets(x.logprobs_BT, chunks_BT3.to(x.logprobs_BT.device), cfg.alpha)
    audited_BT = audited_BT & (mask_BT > 0)
    log_r_BT = (ref_BT.detach().to(x.logprobs_BT.dtype) - x.logprobs_BT).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    k3_BT = torch.exp(log_r_BT) - 1.0 - log_r_BT
    chunk_BT = -pi_hat_BT * x.logprobs_BT
    anchor_BT = cfg.beta * k3_BT
    loss_BT = torch.where(audited_BT, chunk_BT, anchor_BT) * mask_BT
    a, u = audited_BT, (~audited_BT) & (mask_BT > 0)
    metrics = {
        "omni_opd/audited_frac": float(a.sum()) / max(float(mask_BT.sum()), 1.0),
        "omni_opd/target_mean": float(pi_hat_BT[a].mean()) if bool(a.any()) else 0.0,
        "omni_opd/anchor_kl": float(k3_BT.detach()[u].mean()) if bool(u.any()) else 0.0,
    }
    return LossOutput(loss_BT=loss_BT, metrics=metrics)


record_choice("omni_opd", "the base-model KL anchor", "k3 on the sampled token against the run's frozen initial policy (the reimplementation takes the exact full-vocabulary KL(pi_base || pi)); beta 0.1, on generated tokens outside every audited chunk")
record_choice("omni_opd", "reduction", "per-token losses through algorithm.aggregation (token_mean by default); the reimplementation sums (it notes token-mean changes the step size with the audited fraction)")

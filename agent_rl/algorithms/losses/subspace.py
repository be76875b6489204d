"""GCPO: GRPO whose parameter updates avoid the pretrained weights' dominant singular subspaces.

The loss is GRPO's (``ppo_clip``); the method lives in an optimizer hook (``ObjectiveEntry.optimizer_hook``):
at the start of the run, each trainable weight matrix W0 (m x n) gets its top-k left and right
singular vectors U_k (m x k), V_k (n x k); after every optimizer step the update dW = W - W_before
is replaced by its bilateral orthogonal projection

    P(dW) = (I - U_k U_k^T) dW (I - V_k V_k^T)

so no update has a component along the principal subspaces (Principal-Subspace Overlap 0 by construction).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from agent_rl.algorithms.losses.ppo import PpoClipConfig, ppo_clip
from agent_rl.algorithms.registry import LossInputs, LossOutput, record_choice, register_policy_loss


class GcpoConfig(PpoClipConfig):
    rank_ratio: float = Field(
        0.05,
        gt=0.0,
        le=1.0,
        description="k = ceil(rank_ratio * min(m, n)) singular directions protected per matrix (ours)",
    )
    skip_embeddings: bool = Field(
        True,
        description="leave the input embedding and the LM head unprojected (ours: their SVD is the largest and their rows are tokens)",
    )


def project_update(delta: torch.Tensor, u_k: torch.Tensor, v_k: torch.Tensor) -> torch.Tensor:
    """(I - U U^T) delta (I - V V^T), without forming the m x m / n x n projectors."""
    left = delta - u_k @ (u_k.T @ delta)
    return left - (left @ v_k) @ v_k.T


class SubspaceProjection:
    """The hook object: the protected subspaces of each matrix, and the pre/post step hooks on the optimizer."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg: GcpoConfig):
        skip: set[int] = set()
        if cfg.skip_embeddings:
            for getter in ("get_input_embeddings", "get_output_embeddings"):
                module = getattr(model, getter, lambda: None)()
                if module is not None and getattr(module, "weight", None) is not None:
                    skip.add(id(module.weight))
        self.bases: dict[torch.nn.Parameter, tuple[torch.Tensor, torch.Tensor]] = {}
        for p in model.parameters():
            if p.requires_grad and p.ndim == 2 and id(p) not in skip:
                self.bases[p] = top_singular_vectors(p.detach(), cfg.rank_ratio)
        self._before: dict[torch.nn.Parameter, torch.Tensor] = {}
        self.handles = [optimizer.register_step_pre_hook(self._pre), optimizer.register_step_post_hook(self._post)]

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._before = {p: p.detach().clone() for p in self.bases}

    @torch.no_grad()
    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        for p, (u_k, v_k) in self.bases.items():
            before = self._before[p]
            delta = (p.detach() - before).float()
            p.copy_((before.float() + project_update(delta, u_k, v_k)).to(p.dtype))
        self._before = {}

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def top_singular_vectors(w: torch.Tensor, rank_ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """U_k, V_k of ``w`` (float32), k = ceil(rank_ratio * min(m, n))."""
    u, _, vh = torch.linalg.svd(w.float(), full_matrices=False)
    k = max(1, int(-(-rank_ratio * min(w.shape) // 1)))
    return u[:, :k].contiguous(), vh[:k].T.contiguous()


def install_projection(cfg: GcpoConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> SubspaceProjection:
    return SubspaceProjection(model, optimizer, cfg)


@register_policy_loss(
    "gcpo",
    config=GcpoConfig,
    optimizer_hook=install_projection,
    status="interpretation",
    evidence="from GCPO's abstract (seed 003): k = ceil(0.05 min(m, n)), which matrices and "
    "projecting the update are ours (recorded choice); tests/algorithms/test_gcpo.py",
)
def gcpo(x: LossInputs, cfg: GcpoConfig) -> LossOutput:
    """GCPO, geometrically constrained PO (2026): GRPO's loss; every update projected off the pretrained top-k subspaces.

    L = ppo_clip(A); after each optimizer step, per weight matrix: dW <- (I - U_k U_k^T) dW (I - V_k V_k^T),
    U_k, V_k = top-k singular vectors of the initial weights, k = ceil(rank_ratio * min(m, n)).
    """
    return ppo_clip(x, cfg)


for _key, _question, _choice in (
    (
        "gcpo",
        "rank, which matrices, and what is projected",
        (
            "k = ceil(0.05 min(m, n)) per matrix from the initial weights' SVD; every trainable 2-D weight but the "
            "embeddings and LM head; the optimizer's update (after the step), not the gradient"
        ),
    ),
):
    record_choice(_key, _question, _choice)

"""PRIME's implicit process reward model: a second causal LM trained online on outcome labels.

The PRM starts as a copy of the initial policy (its SFT weights) and gets its own AdamW
optimizer (``algorithm.advantage.prm_lr``); the reference is the run's frozen reference model.
Each step, after the advantage read its token rewards, one optimizer step of the cross-entropy
of the sequence's implicit reward against the outcome label (Cui et al. 2025, Eq. 4):

    r_phi(y) = beta * sum_t m_t (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t))
    L = -1/B sum_i [ l_i log sigmoid(r_phi(y_i)) + (1 - l_i) log(1 - sigmoid(r_phi(y_i))) ]

with ``l_i`` the outcome reward clamped to [0, 1] and B the step's rows (step-global, so
micro-batching does not change the gradient). Built like the critic (``learner/critic.py``):
the learner's micro-batches, the learner's logprob path, one local process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from agent_rl.core.types import TrainBatch
from agent_rl.learner import packing
from agent_rl.learner.learner import Optimizer


def prm_loss(
    prm_logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    loss_mask_BT: torch.Tensor,
    labels_B: torch.Tensor,
    beta: float,
    num_rows: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed cross-entropy of these rows divided by ``num_rows``, and each row's implicit reward."""
    mask_BT = loss_mask_BT.to(prm_logprobs_BT.dtype)
    reward_B = beta * ((prm_logprobs_BT - ref_logprobs_BT.to(prm_logprobs_BT.dtype)) * mask_BT).sum(-1)
    ce = F.binary_cross_entropy_with_logits(reward_B, labels_B.to(reward_B.dtype).clamp(0.0, 1.0), reduction="sum")
    return ce / max(num_rows, 1.0), reward_B.detach()


class ImplicitPRM:
    def __init__(
        self,
        model: torch.nn.Module,
        cfg: Any,
        learner_cfg: Any,
        logprobs: Callable[..., Any],
        total_steps: int | None = None,
    ):
        """``cfg``: the ``prime`` advantage's config (beta, prm_lr, prm_grad_clip); ``logprobs``: the
        learner's ``logprobs(model, batch)`` (its temperature, chunking and packing)."""
        self.cfg, self.learner_cfg, self.logprobs = cfg, learner_cfg, logprobs
        self.model = model.requires_grad_(True)
        self.optim = Optimizer(self.model, cfg.prm_lr, learner_cfg, total_steps, prefix="prm")
        self.optimizer, self.scheduler = self.optim.optimizer, self.optim.scheduler

    def update(self, batch: TrainBatch, ref_logprobs_BT: torch.Tensor, rewards_B: torch.Tensor) -> dict[str, float]:
        """One optimizer step of the cross-entropy on this step's outcome labels; metrics."""
        self.model.train()
        num_rows = float(batch.input_ids_BT.shape[0])
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, correct = 0.0, 0.0
        for micro in packing.micro_batches(batch, self.learner_cfg):
            rows, mb = micro.rows, micro.select(batch)
            logprobs_BT = self.logprobs(self.model, mb)[0]
            labels_B = rewards_B[rows].float().clamp(0.0, 1.0)
            loss, reward_B = prm_loss(
                logprobs_BT, ref_logprobs_BT[rows], mb.loss_mask_BT, labels_B, self.cfg.beta, num_rows
            )
            loss.backward()
            loss_sum += float(loss.detach())
            hit_B = ((reward_B > 0) == (labels_B > 0.5)).float()
            correct += float(torch.where(reward_B == 0, 0.5, hit_B).sum())  # sign of r_phi vs the label, ties 1/2
        metrics = self.optim.step(self.cfg.prm_grad_clip)
        metrics.update({"prm/loss": loss_sum, "prm/accuracy": correct / max(num_rows, 1.0)})
        return metrics

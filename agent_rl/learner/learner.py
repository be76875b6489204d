"""The policy learner: logprob recompute, the configured objective, AdamW, micro-batching.

One optimizer step per call of ``update``; the loss of every micro-batch is aggregated with the
step-global denominators, so any micro-batch size gives the same update. (Multi-rank FSDP2 wraps
this same step; see issue 8.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from agent_rl.algorithms import AGGREGATIONS, POLICY_LOSSES
from agent_rl.algorithms.aggregation import aggregation_inputs_for, select_rows
from agent_rl.algorithms.losses import LossOptions, apply_cross_cutting
from agent_rl.algorithms.registry import LossInputs
from agent_rl.learner.logprobs import token_logprobs
from agent_rl.types import TrainBatch


@dataclass
class ObjectiveParts:
    """The configured entries of one step's loss (configs from ``algorithm.*``)."""

    loss: Any
    aggregation: Any
    kl: Any
    options: LossOptions | None = None  # cross-cutting: rollout_is, entropy bonus, NLL (KL comes from ``kl``)
    loss_state: Any = None

    def loss_options(self) -> LossOptions:
        """``options`` with the KL term of ``algorithm.kl`` when it is placed in the loss."""
        opts = self.options or LossOptions()
        kl_on = self.kl is not None and self.kl.coef > 0 and self.kl.placement == "in_loss"
        return opts.model_copy(update={"kl_coef": self.kl.coef if kl_on else 0.0, "kl": self.kl or opts.kl})

    def needs(self) -> set[str]:
        return set(POLICY_LOSSES.get(self.loss.name).needs) | self.loss_options().needs()


def _fused_ok(params: list[torch.nn.Parameter]) -> bool:
    """Fused AdamW (one kernel for all parameters) where torch has it for these tensors."""
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


class Learner:
    def __init__(
        self, model: torch.nn.Module, cfg: Any, temperature: float = 1.0, max_response_tokens: float | None = None
    ):
        self.model = model
        self.cfg = cfg
        self.temperature = temperature
        self.max_response_tokens = max_response_tokens  # the generation budget (Dr. GRPO's constant)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay, fused=_fused_ok(params)
        )
        warmup = cfg.warmup_steps

        def schedule(step: int) -> float:
            return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.version = 0

    def update(self, batch: TrainBatch, advantages_BT: torch.Tensor, parts: ObjectiveParts, step: int = 0) -> dict[str, float]:
        """One optimizer step on ``batch``; returns metrics."""
        self.model.train()
        loss_entry = POLICY_LOSSES.get(parts.loss.name)
        opts = parts.loss_options()
        needs = parts.needs()
        need_entropy = "entropy" in needs
        if "ref_logprobs" in needs and batch.ref_logprobs_BT is None:
            raise ValueError("the KL term / loss needs ref_logprobs_BT, which the batch does not have")
        agg_all = aggregation_inputs_for(batch.loss_mask_BT, batch.group_index_B, self.max_response_tokens)
        aggregate = AGGREGATIONS(parts.aggregation)
        mbs = self.cfg.micro_batch_size
        self.optimizer.zero_grad(set_to_none=True)
        metrics: dict[str, float] = {}
        total_loss = 0.0
        mismatch_abs_max, mismatch_k3_sum = 0.0, 0.0
        for s in range(0, batch.batch_size, mbs):
            rows = slice(s, s + mbs)
            mb = batch.select(rows)
            topk_BTK = None
            if "topk" in needs:
                if mb.topk_ids_BTK is None:
                    raise ValueError("the loss needs the sampler's top-k candidates: set rollout.topk > 0")
                logprobs_BT, entropy_BT, topk_BTK = token_logprobs(
                    self.model, mb, self.temperature, with_entropy=need_entropy, topk_ids_BTK=mb.topk_ids_BTK
                )
            else:
                logprobs_BT, entropy_BT = token_logprobs(self.model, mb, self.temperature, with_entropy=need_entropy)
            mask = mb.loss_mask_BT
            with torch.no_grad():
                d = (logprobs_BT.detach() - mb.rollout_logprobs_BT) * mask
                mismatch_abs_max = max(mismatch_abs_max, float(d.abs().max()))
                log_r = (mb.rollout_logprobs_BT - logprobs_BT.detach()) * mask  # k3 of KL(sampler||learner)
                mismatch_k3_sum += float(((torch.exp(-log_r) - 1 + log_r) * mask).sum())
            old_BT = mb.old_logprobs_BT if mb.old_logprobs_BT is not None else logprobs_BT.detach()
            x = LossInputs(
                logprobs_BT=logprobs_BT,
                old_logprobs_BT=old_BT,
                advantages_BT=advantages_BT[rows],
                loss_mask_BT=mask,
                rollout_logprobs_BT=mb.rollout_logprobs_BT,
                entropy_BT=entropy_BT,
                ref_logprobs_BT=mb.ref_logprobs_BT,
                teacher_logprobs_BT=mb.teacher_logprobs_BT,
                rollout_topk_logprobs_BTK=mb.rollout_topk_logprobs_BTK,
                topk_logprobs_BTK=topk_BTK,
                old_topk_logprobs_BTK=None if topk_BTK is None else topk_BTK.detach(),
                topk_mask_BTK=mb.topk_mask_BTK,
                rewards_B=mb.rewards_B,
                group_index_B=mb.group_index_B,
                step=step,
                state=parts.loss_state,
            )
            out = apply_cross_cutting(x, loss_entry.fn(x, parts.loss), opts)
            loss = aggregate(out.loss_BT, mask, select_rows(agg_all, rows), parts.aggregation)
            loss.backward()
            total_loss += float(loss.detach())
            frac = float(mask.sum()) / max(agg_all.num_tokens, 1.0)
            for k, v in out.metrics.items():
                metrics[k] = metrics.get(k, 0.0) + frac * v
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if math.isfinite(float(grad_norm)):
            self.optimizer.step()
        self.scheduler.step()
        self.version += 1
        metrics.update(
            {
                "train/loss": total_loss,
                "train/grad_norm": float(grad_norm),
                "train/lr": self.scheduler.get_last_lr()[0],
                "train/mismatch_kl": mismatch_k3_sum / max(agg_all.num_tokens, 1.0),
                "train/mismatch_logprob_abs_max": mismatch_abs_max,
                "train/tokens": agg_all.num_tokens,
            }
        )
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = state["version"]

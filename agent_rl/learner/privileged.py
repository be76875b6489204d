"""A critic that reads privileged context (``redippo``'s reference-guided critic).

The env's ``teacher_context`` (Arithmetic: ``Verified solution: EXPR = N``; MathTool, CodeExec,
ShellTask: their reference solutions) is what self-distillation teachers see and the policy never
does. :class:`PrivilegedCritic` is the project's :class:`~agent_rl.learner.critic.Critic` run on
each row with that context spliced into its prompt as one more user message, exactly as the
sdpo / opsd teacher gets it (``Renderer.context_insertion`` + ``splice_teacher_context``):

    row       = prompt[:k] + context + prompt[k:] + response
    V_ref_BT[b, t] = the critic's value at student token t's position in the spliced row

so its values, returns and loss masks line up token for token with the standard critic's. It is
trained with the same clipped value loss (``Critic.update``), on the spliced rows, towards returns
given in the student's layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from agent_rl.core.types import TrainBatch
from agent_rl.learner.critic import Critic
from agent_rl.learner.teacher import splice_teacher_context


def to_spliced(x_BT: torch.Tensor, positions_BT: torch.Tensor, S: int, fill: float = 0) -> torch.Tensor:
    """``out[b, positions_BT[b, t]] = x_BT[b, t]``; ``fill`` on the context tokens and padding."""
    B = x_BT.shape[0]
    out = torch.full((B, S), fill, dtype=x_BT.dtype, device=x_BT.device)
    keep = positions_BT >= 0
    rows = torch.arange(B, device=x_BT.device)[:, None].expand_as(positions_BT)
    out[rows[keep], positions_BT[keep]] = x_BT[keep]
    return out


def from_spliced(y_BS: torch.Tensor, positions_BT: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = y_BS[b, positions_BT[b, t]]``; 0 where the student token has no position."""
    keep = positions_BT >= 0
    return torch.where(
        keep, y_BS.gather(1, positions_BT.clamp(min=0)), torch.zeros((), dtype=y_BS.dtype, device=y_BS.device)
    )


def spliced_batch(
    batch: TrainBatch, insert_at_B: list[int], context_ids_B: list[list[int]], pad_id: int
) -> tuple[TrainBatch, torch.Tensor]:
    """``batch`` with ``context_ids_B[b]`` inserted before token ``insert_at_B[b]`` of each row.

    Per-token fields move with their tokens (context tokens: loss mask 0, turn index -1); positions
    restart at 0 per row; per-row fields are kept; scores of the policy (old / reference / teacher
    logprobs, top-k candidates, extras) are dropped: a critic reads none of them. Returns the new
    batch and ``positions_BT`` (where student token t sits; -1 on padding).
    """
    ids_BS, mask_BS, positions_BT = splice_teacher_context(
        batch.input_ids_BT, batch.attention_mask_BT, insert_at_B, context_ids_B, pad_id
    )
    B, S = ids_BS.shape

    def move(x_BT: torch.Tensor, fill: float = 0) -> torch.Tensor:
        return to_spliced(x_BT, positions_BT, S, fill)

    out = replace(
        batch,
        input_ids_BT=ids_BS,
        attention_mask_BT=mask_BS,
        loss_mask_BT=move(batch.loss_mask_BT),
        position_ids_BT=torch.arange(S, device=ids_BS.device).expand(B, S).clone(),
        rollout_logprobs_BT=move(batch.rollout_logprobs_BT),
        turn_index_BT=move(batch.turn_index_BT, fill=-1),
        old_logprobs_BT=None,
        ref_logprobs_BT=None,
        values_BT=None,
        entropy_BT=None,
        teacher_logprobs_BT=None,
        topk_ids_BTK=None,
        rollout_topk_logprobs_BTK=None,
        topk_mask_BTK=None,
        extras={},
    )
    return out, positions_BT


class PrivilegedCritic:
    """A :class:`Critic` whose rows carry each trajectory's ``info["teacher_context"]``.

    ``batch_of(groups)`` builds the step's batch from its groups (the trainer's ``make_batch``);
    ``renderer.context_insertion`` says where the context goes and its token ids.
    """

    def __init__(
        self,
        critic: Critic,
        renderer: Any,
        pad_id: int,
        batch_of: Callable[[list[Any]], TrainBatch],
        env_id: str = "the env",
    ):
        self.critic, self.renderer, self.pad_id, self.batch_of, self.env_id = critic, renderer, pad_id, batch_of, env_id

    def batch(self, groups: list[Any]) -> tuple[TrainBatch, torch.Tensor]:
        """The step's rows with their privileged context, and where each student token went."""
        insert_at_B, context_ids_B = [], []
        for t in (t for g in groups for t in g.trajectories_G if t.trainable):  # the rows of make_batch, in order
            context = t.info.get("teacher_context")
            if not context:
                raise ValueError(
                    f"redippo's reference-guided critic needs the reference answer, but {self.env_id} gives no info['teacher_context'] at reset"
                )
            k, ids = self.renderer.context_insertion(t.info["prompt_messages"], t.info["tools"], context)
            insert_at_B.append(k)
            context_ids_B.append(ids)
        return spliced_batch(self.batch_of(groups), insert_at_B, context_ids_B, self.pad_id)

    def values(self, spliced: TrainBatch, positions_BT: torch.Tensor) -> torch.Tensor:
        """V_ref in the student's layout (0 off the rows' tokens)."""
        return from_spliced(self.critic.values(spliced), positions_BT)

    def update(
        self, spliced: TrainBatch, positions_BT: torch.Tensor, returns_BT: torch.Tensor, old_values_BT: torch.Tensor
    ) -> dict[str, float]:
        """One clipped-value-loss step towards ``returns_BT`` (student layout); metrics as ``critic_ref/*``."""
        S = spliced.input_ids_BT.shape[1]
        with torch.enable_grad():
            metrics = self.critic.update(
                spliced, to_spliced(returns_BT, positions_BT, S), to_spliced(old_values_BT, positions_BT, S)
            )
        return {k.replace("critic/", "critic_ref/", 1): v for k, v in metrics.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.critic.model.state_dict(),
            "optimizer": self.critic.optimizer.state_dict(),
            "scheduler": self.critic.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.model.load_state_dict(state["model"])
        self.critic.optimizer.load_state_dict(state["optimizer"])
        self.critic.scheduler.load_state_dict(state["scheduler"])

"""Reward models of ``agent-rl train-rm`` read by a run: the scalar head at a row's last policy token
(``sequence_rewards``) and ``TrajectoryScorer``, sigmoid(r) of finished trajectories (e_grm's scorer)."""

from __future__ import annotations

from typing import Any

import torch

from agent_rl.core.types import TrajectoryGroup
from agent_rl.rollout.batching import make_batch


def sequence_rewards(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """r_B: the head's output at each row's last loss-masked token."""
    out_BT = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits[..., 0].float()
    positions_BT = torch.arange(out_BT.shape[1], device=out_BT.device).expand_as(out_BT)
    last_B = torch.where(batch.loss_mask_BT.bool(), positions_BT, torch.full_like(positions_BT, -1)).max(dim=1).values
    if bool((last_B < 0).any()):
        raise ValueError("a response has no assistant tokens to score")
    return out_BT.gather(1, last_B.unsqueeze(1)).squeeze(1)


class TrajectoryScorer:
    """sigmoid(r) of finished trajectories under a reward model of ``agent-rl train-rm`` (either loss):
    the head at each row's last policy token, read from the sampled token ids (no re-rendering; the
    reward model must share the policy's tokenizer, as one trained from the same base model does)."""

    def __init__(self, path: str, pad_token_id: int, device: str = "cpu"):
        from transformers import AutoModelForTokenClassification

        try:
            self.model = AutoModelForTokenClassification.from_pretrained(path).to(device).eval()
        except OSError as e:
            raise ValueError(f"reward model {path}: cannot load it ({str(e).splitlines()[0]})") from None
        self.pad_token_id, self.device = pad_token_id, device

    @torch.no_grad()
    def __call__(self, trajectories: list[Any]) -> list[float]:
        if not trajectories:
            return []
        groups = [TrajectoryGroup(t.task_id, t.group_id, [t]) for t in trajectories]
        return torch.sigmoid(sequence_rewards(self.model, make_batch(groups, self.pad_token_id, self.device))).tolist()

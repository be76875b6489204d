"""Teacher hook for self-distillation losses (``sdpo``, ``opsd``): a second forward pass with a
privileged teacher context (environment feedback, a verified solution) inserted before the response.

    teacher = EmaTeacher(model, decay=cfg.loss.teacher_ema_decay)      # once, checkpointed
    ids_BS, mask_BS, pos_BT = splice_teacher_context(batch.input_ids_BT, batch.attention_mask_BT,
                                                     insert_at_B, context_ids_B, pad_id)
    x.teacher_logprobs_BT = compute_teacher_logprobs(teacher.model, ids_BS, mask_BS, pos_BT, temperature)
    ...optimizer step...
    teacher.update(model)

``teacher_logprobs_BT[b, t]`` is aligned with the student's ``input_ids_BT`` like the learner's
logprobs: the teacher's log-probability of student token t, given the teacher context and the
student tokens before t (0 where the token has no teacher position). With ``topk`` it also gives
the teacher's top-K candidates of each position (top-K distribution matching, ``sdpo`` / ``opsd``
with ``estimator: topk``). Pure torch plus the
transformers call convention ``model(input_ids=..., attention_mask=...).logits``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from agent_rl.learner.logprobs import scoring_logits


class EmaTeacher:
    """A frozen copy of the policy whose weights follow it slowly: theta_T <- d theta_T + (1 - d) theta.

    ``decay = 0`` makes the teacher the current policy after every update (OPSD's self-teacher);
    SDPO uses a slow EMA so that the student does not chase its own mistakes.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EmaTeacher decay must be in [0, 1); got {decay}")
        self.decay = decay
        self.num_updates = 0
        self.model = copy.deepcopy(model)
        self.model.eval()
        self.model.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """Move the teacher towards ``model`` (call after each optimizer step)."""
        student = dict(model.named_parameters())
        for name, param in self.model.named_parameters():
            param.lerp_(student[name].detach().to(param.dtype), 1.0 - self.decay)
        student_buffers = dict(model.named_buffers())
        for name, buf in self.model.named_buffers():
            buf.copy_(student_buffers[name])
        self.num_updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "num_updates": self.num_updates, "model": self.model.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay = float(state["decay"])
        self.num_updates = int(state["num_updates"])
        self.model.load_state_dict(state["model"])


def splice_teacher_context(
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    insert_at_B: list[int],
    context_ids_B: list[list[int]],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Insert ``context_ids_B[b]`` before token ``insert_at_B[b]`` of each (right-padded) row.

    Returns the teacher's ``input_ids_BS`` / ``attention_mask_BS`` (right-padded with ``pad_id``)
    and ``positions_BT``: where student token t sits in the teacher row (-1 on padding).
    """
    B, T = input_ids_BT.shape
    lengths_B = attention_mask_BT.sum(dim=-1).tolist()
    rows, positions_BT = [], torch.full((B, T), -1, dtype=torch.long, device=input_ids_BT.device)
    for b in range(B):
        n, k, ctx = int(lengths_B[b]), int(insert_at_B[b]), list(context_ids_B[b])
        if not 0 <= k <= n:
            raise ValueError(f"insert_at_B[{b}] = {k} is outside the row's {n} tokens")
        ids = input_ids_BT[b, :n].tolist()
        rows.append(ids[:k] + ctx + ids[k:])
        t_T = torch.arange(n, device=input_ids_BT.device)
        positions_BT[b, :n] = torch.where(t_T < k, t_T, t_T + len(ctx))
    S = max(len(r) for r in rows)
    ids_BS = torch.full((B, S), pad_id, dtype=input_ids_BT.dtype, device=input_ids_BT.device)
    mask_BS = torch.zeros((B, S), dtype=attention_mask_BT.dtype, device=input_ids_BT.device)
    for b, row in enumerate(rows):
        ids_BS[b, : len(row)] = torch.tensor(row, dtype=input_ids_BT.dtype, device=input_ids_BT.device)
        mask_BS[b, : len(row)] = 1
    return ids_BS, mask_BS, positions_BT


@torch.no_grad()
def compute_teacher_logprobs(
    model: torch.nn.Module,
    input_ids_BS: torch.Tensor,
    attention_mask_BS: torch.Tensor,
    positions_BT: torch.Tensor,
    temperature: float = 1.0,
    topk: int = 0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``out[b, t]`` = log q(input_ids_BS[b, j] | input_ids_BS[b, :j]) with j = positions_BT[b, t].

    Positions < 1 (padding, or the first token, which has no context) give 0. Only the needed
    rows of the logits go through the log-softmax (``[B, T, V]``, not ``[B, S, V]``).

    ``topk > 0`` also returns the teacher's ``topk`` most likely ids of the distribution that
    predicts each student token t and their logprobs (``ids_BTK``, ``logprobs_BTK``; ids 0 and
    logprobs 0 where the token has no teacher position): the support of top-K distillation.
    """

    logits_BSV = scoring_logits(model, input_ids_BS, attention_mask_BS)  # packed under learner.packing (Teaching)
    has_BT = positions_BT >= 1
    target_pos_BT = positions_BT.clamp(min=1)
    pred_pos_BT = target_pos_BT - 1  # the logits at j-1 predict token j
    V = logits_BSV.shape[-1]
    logits_BTV = logits_BSV.gather(1, pred_pos_BT.unsqueeze(-1).expand(-1, -1, V))
    logp_BTV = torch.log_softmax(logits_BTV.float() / temperature, dim=-1)
    targets_BT = input_ids_BS.gather(1, target_pos_BT)
    logp_BT = logp_BTV.gather(-1, targets_BT.unsqueeze(-1)).squeeze(-1)
    logp_BT = torch.where(has_BT, logp_BT, torch.zeros_like(logp_BT))
    if topk <= 0:
        return logp_BT
    top_lp_BTK, top_ids_BTK = logp_BTV.topk(min(topk, V), dim=-1)
    keep_BT1 = has_BT.unsqueeze(-1)
    return logp_BT, torch.where(keep_BT1, top_ids_BTK, 0), torch.where(keep_BT1, top_lp_BTK, 0.0)


class FrozenTeacher:
    """Another model as the teacher (an hf checkpoint with the student's tokenizer): never updated."""

    def __init__(self, model: torch.nn.Module, path: str):
        self.path = path
        self.model = model.eval().requires_grad_(False)

    def update(self, model: torch.nn.Module) -> None:
        """A separate teacher does not follow the student."""

    def state_dict(self) -> dict[str, Any]:
        return {"path": self.path}  # the weights are the checkpoint's; nothing moves

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("path") != self.path:
            raise ValueError(f"the checkpoint's teacher is {state.get('path')}, this run's is {self.path}")


def check_same_tokenizer(student: Any, teacher: Any, teacher_path: str) -> None:
    """Refuse a teacher whose tokenizer differs from the student's: its logprobs would score other tokens."""
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    if s_vocab != t_vocab:
        differ = sorted(set(s_vocab.items()) ^ set(t_vocab.items()))[:3]
        raise ValueError(
            f"teacher {teacher_path}: its tokenizer differs from the student's ({len(t_vocab)} vs {len(s_vocab)} tokens; "
            f"e.g. {differ}); a teacher must share the student's tokenizer"
        )


def score_with(
    teacher: Any,
    ids_BS: torch.Tensor,
    mask_BS: torch.Tensor,
    positions_BT: torch.Tensor,
    temperature: float,
    topk: int = 0,
) -> Any:
    """One teacher's logprobs (and top-K): a model in this process, or one that scores itself (a server)."""
    if hasattr(teacher, "score"):
        return teacher.score(ids_BS, mask_BS, positions_BT, temperature, topk)
    return compute_teacher_logprobs(teacher.model, ids_BS, mask_BS, positions_BT, temperature, topk)


class TeacherMixture:
    """Several frozen teachers at once (multi-teacher distillation).

    Unrouted rows: q(y) = sum_k w_k q_k(y), the weighted mixture of their next-token distributions,
    scored on the sampled tokens. ``routes`` (per-task routing) sends a row whose task matches a route
    to that one teacher instead: ``logprobs(..., route_B)`` takes each row's teacher index, or None
    for the mixture; a routed row's logprobs (and top-K) are exactly its teacher's."""

    def __init__(self, teachers: list[Any], weights: list[float]):
        if len(teachers) != len(weights) or not teachers:
            raise ValueError(f"teacher weights: one per teacher; got {len(weights)} for {len(teachers)} teachers")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"teacher weights must be >= 0 with a positive sum; got {weights}")
        self.teachers = teachers
        self.weights = [w / sum(weights) for w in weights]

    def update(self, model: torch.nn.Module) -> None:
        """Frozen teachers do not follow the student."""

    def state_dict(self) -> dict[str, Any]:
        return {"paths": [t.path for t in self.teachers], "weights": self.weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("paths") != [t.path for t in self.teachers]:
            raise ValueError(
                f"the checkpoint's teachers are {state.get('paths')}, this run's are {[t.path for t in self.teachers]}"
            )

    def logprobs(
        self,
        ids_BS: torch.Tensor,
        mask_BS: torch.Tensor,
        positions_BT: torch.Tensor,
        temperature: float,
        topk: int = 0,
        route_B: list[int | None] | None = None,
    ) -> Any:
        route_B = [None] * ids_BS.shape[0] if route_B is None else list(route_B)
        if topk and None in route_B:
            raise ValueError(
                "top-K distillation takes one teacher per row; several teachers mix only sampled-token logprobs (route every task)"
            )
        B, T = positions_BT.shape
        logp_BT = torch.zeros(B, T, dtype=torch.float32, device=positions_BT.device)
        ids_BTK = torch.zeros(B, T, max(topk, 1), dtype=torch.long, device=positions_BT.device)
        top_BTK = torch.zeros(B, T, max(topk, 1), dtype=torch.float32, device=positions_BT.device)
        mixed = [b for b, r in enumerate(route_B) if r is None]
        log_w = [math.log(w) if w > 0 else -math.inf for w in self.weights]
        parts_KBT = []
        for k, teacher in enumerate(self.teachers):
            rows = [b for b, r in enumerate(route_B) if r is None or r == k]
            if not rows:
                continue
            idx = torch.tensor(rows, device=positions_BT.device)
            out = score_with(teacher, ids_BS[idx], mask_BS[idx], positions_BT[idx], temperature, topk)
            lp = out[0] if topk else out
            own = [i for i, b in enumerate(rows) if route_B[b] == k]
            if own:  # routed rows: this teacher alone
                dst = idx[own]
                logp_BT[dst] = lp[own].float()
                if topk:
                    ids_BTK[dst], top_BTK[dst] = out[1][own], out[2][own].float()
            if mixed:
                in_mix = [i for i, b in enumerate(rows) if route_B[b] is None]
                parts_KBT.append(lp[in_mix].float() + log_w[k])
        if mixed:
            dst = torch.tensor(mixed, device=positions_BT.device)
            logp_BT[dst] = torch.logsumexp(torch.stack(parts_KBT), dim=0)
        logp_BT = torch.where(positions_BT >= 1, logp_BT, torch.zeros_like(logp_BT))  # 0 where no teacher position
        return (logp_BT, ids_BTK, top_BTK) if topk else logp_BT


def teacher_logprobs(
    teacher: Any,
    ids_BS: torch.Tensor,
    mask_BS: torch.Tensor,
    positions_BT: torch.Tensor,
    temperature: float,
    topk: int = 0,
    route_B: list[int | None] | None = None,
) -> Any:
    """The logprobs (and top-K) of any teacher object: one model (EMA / frozen / served) or several (mixed or routed per row)."""
    if isinstance(teacher, TeacherMixture):
        return teacher.logprobs(ids_BS, mask_BS, positions_BT, temperature, topk, route_B)
    return score_with(teacher, ids_BS, mask_BS, positions_BT, temperature, topk)

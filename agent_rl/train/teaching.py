"""The plan's teacher as the trainer uses it: built once at start, then scoring each batch.

The models themselves (an EMA of the policy, frozen checkpoints, a served teacher, their mixture or per-task routing) and the forward pass
live in ``agent_rl/learner/teacher.py``; this module adds what needs the run: the student's tokenizer
to check against, and the env's ``teacher_context`` rendered into the prompt.
"""

from __future__ import annotations

from typing import Any

import torch

from agent_rl.config import Config
from agent_rl.core.types import TrajectoryGroup
from agent_rl.learner import hidden
from agent_rl.learner.logprobs import packed_scoring
from agent_rl.learner.remote_teacher import SCHEME, RemoteTeacher
from agent_rl.learner.teacher import (
    EmaTeacher,
    FrozenTeacher,
    TeacherMixture,
    check_same_tokenizer,
    splice_teacher_context,
    teacher_logprobs,
)
from agent_rl.models.loading import load_model, load_tokenizer
from agent_rl.run.preflight import check_model
from agent_rl.run.runtime import Components


class Teaching:
    """``teacher`` is what is checkpointed (by the ``teacher`` component, ``components.py``); ``scores`` provides the
    ``teacher_logprobs`` / ``teacher_topk`` needs."""

    def __init__(self, cfg: Config, components: Components, spec: Any):
        self.cfg, self.components, self.spec = cfg, components, spec
        self.teacher = self._make_teacher(spec)

    def scores(self, batch: Any, groups: list[TrajectoryGroup]) -> dict[str, torch.Tensor]:
        """``teacher_logprobs``; with the plan's ``teacher.topk`` also ``teacher_topk`` (the teacher's
        logprobs at its top-k ids), and those ids become the batch's candidates, where the learner
        scores the policy (top-K distillation)."""
        k = self.spec.topk
        if k == 0:
            return {"teacher_logprobs": self.logprobs(batch, groups)}
        logprobs_BT, ids_BTK, topk_BTK = self.logprobs(batch, groups, topk=k)
        batch.topk_ids_BTK, batch.topk_mask_BTK = ids_BTK, torch.ones_like(topk_BTK)
        return {"teacher_logprobs": logprobs_BT, "teacher_topk": topk_BTK}

    def logprobs(self, batch: Any, groups: list[TrajectoryGroup], topk: int = 0) -> Any:
        """The teacher's logprobs of the sampled tokens, with the env's ``teacher_context`` (feedback,
        a verified solution) added to the prompt as one more user message."""
        renderer, insert_at_B, context_ids_B = self.components.renderer, [], []
        rows = [t for g in groups for t in g.trajectories_G]
        for t in rows:
            if not self.spec.context:  # a separate teacher scores the student's own rows
                insert_at_B.append(0)
                context_ids_B.append([])
                continue
            if "teacher_context" not in t.info:
                raise ValueError(
                    f"the objective needs a teacher context, but {self.cfg.env.id} gives no info['teacher_context'] at reset"
                )
            k, ids = renderer.context_insertion(t.info["prompt_messages"], t.info["tools"], t.info["teacher_context"])
            insert_at_B.append(k)
            context_ids_B.append(ids)
        ids_BS, mask_BS, positions_BT = splice_teacher_context(
            batch.input_ids_BT,
            batch.attention_mask_BT,
            insert_at_B,
            context_ids_B,
            self.components.tokenizer.pad_token_id,
        )
        route_B = [self.route(t) for t in rows] if self.spec.routes else None
        with packed_scoring(self.cfg.learner.packing, self.cfg.learner.share_prefixes):  # as the learner's forwards
            return teacher_logprobs(
                self.teacher, ids_BS, mask_BS, positions_BT, self.cfg.rollout.temperature, topk, route_B
            )

    def route(self, trajectory: Any) -> int | None:
        """The teacher of a row under per-task routing: the route with the longest prefix of its task value
        (``route_key``: the task id, or that key of the env's task info), or None (the weighted mixture)."""
        key = self.spec.route_key
        value = trajectory.task_id if key == "task_id" else (trajectory.info.get("task") or {}).get(key)
        if value is None:
            return None
        hits = [(len(prefix), k) for prefix, k in self.spec.routes if str(value).startswith(prefix)]
        return max(hits)[1] if hits else None

    def layer_states(self, batch: Any) -> torch.Tensor:
        """``[B, T, L, H]``: the teacher's decoder-layer outputs (``spec.hidden_layers``) on the
        student's rows, without privileged context (ride); one local model only."""
        model = getattr(self.teacher, "model", None)
        if model is None or not isinstance(model, torch.nn.Module):
            raise ValueError(
                "the objective reads the teacher's hidden states (need teacher_layers): teacher_path must name one local "
                "hf checkpoint (not a mixture or a served teacher)"
            )
        return hidden.layer_states(model, batch, self.spec.hidden_layers)

    def _make_teacher(self, spec: Any) -> Any:
        """An EMA of the policy, or the frozen hf checkpoint(s) at ``spec.path`` (each refused at start
        unless it shares the student's tokenizer; several: their mixture)."""
        if spec.path is None:
            return EmaTeacher(self.components.model, decay=spec.ema_decay)
        paths = [spec.path] if isinstance(spec.path, str) else list(spec.path)
        teachers: list[Any] = []
        for path in paths:
            if path.startswith(SCHEME):  # a server scores the rows (refused unless it can, with our tokenizer)
                if self.cfg.rollout.temperature != 1.0:
                    raise ValueError(
                        f"teacher {path}: a server's prompt logprobs are at temperature 1; "
                        f"rollout.temperature={self.cfg.rollout.temperature} (use an hf teacher_path, or temperature 1)"
                    )
                teachers.append(RemoteTeacher(path, self.components.tokenizer))
                continue
            check_model(path, key="algorithm.loss.teacher_path")  # a missing directory in one line, no hub retries
            try:
                tokenizer, model = load_tokenizer(path), load_model(path, self.cfg.model.dtype, self.cfg.model.device)
            except OSError as e:
                raise ValueError(f"config key 'algorithm.loss.teacher_path': cannot load {path}: {e}") from None
            check_same_tokenizer(self.components.tokenizer, tokenizer, path)
            teachers.append(FrozenTeacher(model, path))
        if len(teachers) == 1 and spec.weights is None and not spec.routes:
            return teachers[0]
        return TeacherMixture(teachers, list(spec.weights) if spec.weights is not None else [1.0] * len(teachers))

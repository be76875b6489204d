"""The run's side of ``RunAPI`` (``agent_rl/algorithms/run_api.py``): what a method that acts on the
run may do, implemented over the run's parts.

An entry of ``agent_rl.algorithms`` sits below the learner, the rollout engine and the env loader
(import contracts in pyproject.toml), yet some act on the run itself: ``lspo`` has the env's
scripted teacher solve all-fail tasks, fits a scaffold adapter on the solutions and re-rolls the
tasks with it. The trainer builds one ``RunServices`` from the parts these operations use (the
config, the components, the engine, the task queue, the learner's scoring) and hands it to each
such entry's state (``state.bind(run, cfg)``); the entry sees the protocol, never the trainer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict

from agent_rl.algorithms.run_api import AdapterSpec, Player, RunFacts
from agent_rl.config import Config, LoraConfig
from agent_rl.core.types import EpisodeSpec, PassResult, Trajectory, TrajectoryGroup
from agent_rl.learner.chunk_teacher import make_chunk_teacher
from agent_rl.learner.logprobs import token_logprobs
from agent_rl.models import lora
from agent_rl.models.loading import load_model, load_tokenizer
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.rollout.backends.scripted import ScriptedBackend
from agent_rl.rollout.batching import make_batch
from agent_rl.rollout.render import ChatRenderer
from agent_rl.rollout.text_pass import run_text_pass, transcript, verdict_probability
from agent_rl.run.envloader import bind_tool_format, load_policy, sft_teacher
from agent_rl.run.preflight import check_model
from agent_rl.run.runtime import Components
from agent_rl.train.scorers import TrajectoryScorer
from agent_rl.train.task_queue import TaskQueue


class RunServices:
    """``RunAPI`` over the run's parts. ``score(model, batch, entropy) -> (logprobs_BT, entropy_BT)``
    and ``version() -> int`` are the learner's."""

    def __init__(
        self,
        cfg: Config,
        facts: RunFacts,
        components: Components,
        engine: Any,
        queue: TaskQueue,
        score: Callable[..., Any],
        version: Callable[[], int],
    ):
        self.cfg, self.facts, self.components, self.engine, self.queue = cfg, facts, components, engine, queue
        self._score, self._version = score, version

    # -- episodes -------------------------------------------------------------------------------
    def play(self, specs: list[EpisodeSpec], seed: int, player: Player = "policy") -> list[Trajectory]:
        c = self.components
        if isinstance(player, torch.nn.Module):  # an in-process sampler of the method's own model
            backend = HfBackend(player, c.tokenizer.pad_token_id)
            backend.policy_version = self._version()
            engine = c.engine(backend=backend)
        elif player == "teacher":  # the env's scripted SFT teacher
            teacher = bind_tool_format(load_policy(sft_teacher(self.cfg)), c.tool_format)
            engine = c.engine(backend=ScriptedBackend(teacher, c.tokenizer, seed=seed, tool_format=c.tool_format))
        elif player == "policy":
            engine = c.engine()
        else:
            raise ValueError(f"play: unknown player {player!r}; known: 'policy', 'teacher', or a torch module")
        try:
            return engine.run_sync(specs, seed=seed)
        finally:
            engine.close()

    async def fork(
        self, t: Trajectory, at_token: int, n: int, *, seed: int, group_id: str | None = None
    ) -> list[Trajectory]:
        return await self.engine.fork(t, at_token, n, seed=seed, group_id=group_id)

    def enqueue(self, groups: list[list[EpisodeSpec]]) -> int:
        for g in groups:
            self.queue.put(g)
        return len(groups)

    def make_env(self) -> gym.Env:
        return self.components.make_env()

    # -- text -----------------------------------------------------------------------------------
    def text_pass(
        self,
        conversations: list[list[dict]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        topk: int = 0,
        tools: list[list[dict] | None] | None = None,
    ) -> list[PassResult]:
        c = self.components
        return run_text_pass(
            c.backend,
            c.renderer,
            conversations,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            topk=topk,
            tools=tools,
            batch_size=self.cfg.rollout.max_batch_requests,
        )

    def transcript(self, t: Trajectory, special_tokens: bool = True) -> str:
        return transcript(t, self.components.renderer, special_tokens)

    def decode(self, token_ids: list[int], special_tokens: bool = False) -> str:
        if special_tokens:
            return self.components.renderer.decode(token_ids)
        return self.components.tokenizer.decode(token_ids, skip_special_tokens=True)

    def assistant_text(self, sampled_ids: list[int]) -> str:
        return self.components.renderer.assistant_text(sampled_ids)

    def verdict_probability(self, first_topk: dict[int, float] | None, yes: list[str], no: list[str]) -> float:
        tok = self.components.tokenizer
        ids = {w: tok.encode(w, add_special_tokens=False)[0] for w in (*yes, *no)}
        return verdict_probability(first_topk, [ids[w] for w in yes], [ids[w] for w in no])

    # -- models ---------------------------------------------------------------------------------
    def policy_scores(self, groups: list[TrajectoryGroup]) -> tuple[torch.Tensor, torch.Tensor]:
        batch = make_batch(groups, self.components.tokenizer.pad_token_id, self.cfg.model.device)
        return self._score(self.components.model, batch, True)

    def fit_adapter(
        self, demos: list[TrajectoryGroup], adapter: dict[str, torch.Tensor] | None, spec: AdapterSpec
    ) -> tuple[torch.nn.Module, list[float], dict[str, torch.Tensor]]:
        lcfg = LoraConfig(
            rank=spec.rank, alpha=spec.alpha, target_modules=list(spec.target_modules), adapter_name=spec.name
        )
        model = lora.apply_lora(copy.deepcopy(self.components.model), lcfg)
        if adapter is not None:
            set_peft_model_state_dict(model, adapter, adapter_name=spec.name)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=spec.lr, weight_decay=0.0)
        batch = make_batch(demos, self.components.tokenizer.pad_token_id, self.cfg.model.device)
        losses = []
        model.train()
        for _ in range(spec.steps):
            logprobs_BT, _ = token_logprobs(model, batch, temperature=1.0)
            mask = batch.loss_mask_BT
            loss = -(logprobs_BT * mask).sum() / mask.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
        model.eval()
        tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model, adapter_name=spec.name).items()}
        return model, losses, tensors

    def reward_model(self, path: str) -> Any:
        """sigmoid(r) of finished trajectories under the ``agent-rl train-rm`` model at ``path`` (read
        from the sampled ids, so with the policy's tokenizer)."""
        check_model(path, key="reward model")
        return TrajectoryScorer(path, self.components.tokenizer.pad_token_id, self.cfg.model.device)

    def text_model(self, path: str) -> Callable[..., list[PassResult]]:
        """Generated in process by an hf backend of its own."""
        check_model(path, key="judge")
        tokenizer = load_tokenizer(path)
        backend = HfBackend(load_model(path, device=self.cfg.model.device).eval(), tokenizer.pad_token_id)
        renderer = ChatRenderer(tokenizer)
        return lambda conversations, **kw: run_text_pass(backend, renderer, conversations, **kw)

    def chunk_teacher(self, path: str) -> Any:
        """``learner/chunk_teacher.py``."""
        cfg = self.cfg

        def load(p: str) -> tuple[Any, Any]:
            check_model(p, "algorithm.filters omni_opd teacher_path")
            return load_model(p, cfg.model.dtype, cfg.model.device), load_tokenizer(p)

        return make_chunk_teacher(path, self.components.tokenizer, load)

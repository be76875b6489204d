"""The multi-turn rollout engine: many episodes at once, exact token trajectories.

Each round, the pending assistant turns of all live episodes are generated in one batched call,
then all environment steps run concurrently (``astep`` when the env has one, else ``step`` in a
thread). Sampled ids are appended as sampled (mask 1, the sampler's logprobs); observations are
rendered by the chat template and appended with mask 0. Every episode ends with a ``StopReason``;
env and infrastructure failures get ``reward=None`` and are never trained on as failures.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agent_rl.rollout.backends.base import GenerationRequest, GenerationResult, InferenceBackend
from agent_rl.rollout.render import ChatRenderer
from agent_rl.task_sampler import derive_seed
from agent_rl.types import InfraError, StopReason, Trajectory, Turn


@dataclass
class EpisodeSpec:
    """What to run: the env is reset with ``seed`` and ``options`` (same seed = same task)."""

    seed: int
    group_id: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class EngineConfig:
    max_turns: int = 4
    max_new_tokens: int = 64
    max_total_tokens: int = 1024
    max_tool_response_tokens: int | None = 128
    temperature: float = 1.0
    top_p: float = 1.0
    concurrency: int = 64
    check_drift: bool = True
    ignore_eos: bool = False
    topk: int = 0  # record the sampler's top-k candidates of every generated token
    # ScaleRL forced interruption (set by the ``forced_interruption`` filter): after this many
    # generated tokens, ``interrupt_message`` is appended (mask 0) inside the assistant's turn and
    # it may generate ``answer_budget_tokens`` more before the turn is cut.
    think_budget_tokens: int | None = None
    answer_budget_tokens: int = 0
    interrupt_message: str = ""

    @classmethod
    def from_rollout(cls, cfg: Any, temperature: float | None = None, **extra: Any) -> EngineConfig:
        return cls(
            **extra,
            max_turns=cfg.max_turns,
            max_new_tokens=cfg.max_new_tokens,
            max_total_tokens=cfg.max_total_tokens,
            max_tool_response_tokens=cfg.max_tool_response_tokens,
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p,
            concurrency=cfg.concurrency,
            ignore_eos=cfg.ignore_eos,
            topk=cfg.topk,
        )


class _Episode:
    def __init__(self, spec: EpisodeSpec, env: gym.Env):
        self.spec, self.env = spec, env
        self.episode_id = uuid.uuid4().hex[:12]
        self.messages: list[dict] = []
        self.tools: list[dict] | None = None
        self.task_id = ""
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.topk_ids: list[list[int]] = []  # filled only when the engine records top-k
        self.topk_logprobs: list[list[float]] = []
        self.turns: list[Turn] = []
        self.reward = 0.0
        self.stop: StopReason | None = None
        self.state_key: str | None = None
        self.info: dict[str, Any] = {}
        self.generated = 0  # policy tokens so far (for the forced-interruption budget)
        self.interrupted = False
        self.turn_start: int | None = None  # set while an assistant turn continues after an interruption

    def append(
        self,
        ids: list[int],
        mask: int,
        logprobs: list[float] | None = None,
        topk: tuple[list[list[int]], list[list[float]]] | None = None,
    ) -> None:
        self.token_ids += ids
        self.loss_mask += [mask] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        if topk is not None:
            self.topk_ids += topk[0]
            self.topk_logprobs += topk[1]
        else:
            self.topk_ids += [[] for _ in ids]
            self.topk_logprobs += [[] for _ in ids]

    def trajectory(self) -> Trajectory:
        failed = self.stop in (StopReason.ENV_ERROR, StopReason.INFRA_ERROR)
        return Trajectory(
            task_id=self.task_id,
            group_id=self.spec.group_id,
            episode_id=self.episode_id,
            token_ids_T=self.token_ids,
            loss_mask_T=self.loss_mask,
            rollout_logprobs_T=self.logprobs,
            turns_N=self.turns,
            reward=None if failed else self.reward,
            stop_reason=self.stop or StopReason.DONE,
            topk_ids_TK=self.topk_ids if any(self.topk_ids) else None,
            topk_logprobs_TK=self.topk_logprobs if any(self.topk_ids) else None,
            info=self.info,
        )


async def _call_env(env: gym.Env, name: str, *args: Any, **kwargs: Any) -> Any:
    method = getattr(env.unwrapped, "a" + name, None)
    if method is not None:
        return await method(*args, **kwargs)
    return await asyncio.to_thread(getattr(env, name), *args, **kwargs)


class RolloutEngine:
    def __init__(self, backend: InferenceBackend, renderer: ChatRenderer, make_env: Any, cfg: EngineConfig):
        self.backend = backend
        self.renderer = renderer
        self.make_env = make_env  # () -> gym.Env
        self.cfg = cfg
        self._idle_envs: list[gym.Env] = []
        self.metrics: Counter[str] = Counter()

    def close(self) -> None:
        for env in self._idle_envs:
            env.close()
        self._idle_envs.clear()

    async def run(self, specs: list[EpisodeSpec], seed: int = 0) -> list[Trajectory]:
        """Run every episode to its end; returns trajectories in the order of ``specs``."""
        out: list[Trajectory] = []
        for i in range(0, len(specs), self.cfg.concurrency):
            out += await self._run_wave(specs[i : i + self.cfg.concurrency], seed=seed + i)
        return out

    def run_sync(self, specs: list[EpisodeSpec], seed: int = 0) -> list[Trajectory]:
        return asyncio.run(self.run(specs, seed))

    # ------------------------------------------------------------------------------------------
    async def _run_wave(self, specs: list[EpisodeSpec], seed: int) -> list[Trajectory]:
        episodes = [_Episode(s, self._idle_envs.pop() if self._idle_envs else self.make_env()) for s in specs]
        await asyncio.gather(*(self._reset(ep) for ep in episodes))
        round_ = 0
        while live := [ep for ep in episodes if ep.stop is None]:
            requests = [self._request(ep) for ep in live]
            t0 = time.perf_counter()
            try:
                results = await self.backend.generate(requests, seed=derive_seed(seed, round_))
            except Exception as e:  # the backend failed: these episodes end as infra errors
                for ep in live:
                    ep.stop, ep.info["error"] = StopReason.INFRA_ERROR, f"backend: {e!r}"
                break
            self.metrics["time/generate_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            await asyncio.gather(*(self._turn(ep, res) for ep, res in zip(live, results, strict=True)))
            self.metrics["time/env_s"] += time.perf_counter() - t0
            round_ += 1
        self._idle_envs += [ep.env for ep in episodes]
        return [ep.trajectory() for ep in episodes]

    async def _reset(self, ep: _Episode) -> None:
        try:
            obs, info = await _call_env(ep.env, "reset", seed=ep.spec.seed, options=ep.spec.options)
        except Exception as e:
            ep.stop, ep.info["error"] = StopReason.ENV_ERROR, f"reset: {e!r}"
            return
        ep.messages = list(obs)
        ep.tools = info.get("tools")
        ep.task_id = info.get("task_id") or _hash_task(obs)
        ep.state_key = info.get("state_key")
        ep.info.update(task=info.get("task"), seed=ep.spec.seed, options=ep.spec.options)
        if info.get("teacher_context"):  # privileged view for self-distillation (sdpo / opsd)
            ep.info.update(teacher_context=info["teacher_context"], prompt_messages=ep.messages, tools=ep.tools)
        ep.append(self.renderer.prompt_ids(ep.messages, ep.tools), mask=0)

    def _request(self, ep: _Episode) -> GenerationRequest:
        budget = min(self.cfg.max_new_tokens, self.cfg.max_total_tokens - len(ep.token_ids))
        if self.cfg.think_budget_tokens is not None:
            if ep.turn_start is not None:  # continuing after the interruption message
                budget = min(budget, self.cfg.answer_budget_tokens)
            elif not ep.interrupted:
                budget = min(budget, self.cfg.think_budget_tokens - ep.generated)
        return GenerationRequest(
            prompt_ids=list(ep.token_ids),
            max_new_tokens=max(1, budget),
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            stop_token_ids=self.renderer.stop_token_ids,
            ignore_eos=self.cfg.ignore_eos,
            messages=ep.messages,
            topk=self.cfg.topk,
        )

    def _interrupt(self, ep: _Episode, res: GenerationResult) -> bool:
        """Append the interruption message inside the turn when the thinking budget ran out."""
        budget = self.cfg.think_budget_tokens
        if budget is None or ep.interrupted or res.finish_reason != "length" or ep.generated < budget:
            return False
        ep.interrupted = True
        ep.info["forced_interruption"] = True
        ep.append(self.renderer.encode(self.cfg.interrupt_message), mask=0)
        self.metrics["rollout/forced_interruptions"] += 1
        return self.cfg.answer_budget_tokens > 0

    async def _turn(self, ep: _Episode, res: GenerationResult) -> None:
        start = len(ep.token_ids) if ep.turn_start is None else ep.turn_start
        topk = (res.topk_ids, res.topk_logprobs) if res.topk_ids is not None else None
        ep.append(res.token_ids, mask=1, logprobs=res.logprobs, topk=topk)
        ep.generated += len(res.token_ids)
        if self._interrupt(ep, res):
            ep.turn_start = start  # the same turn goes on in the next round
            return
        ep.turn_start = None
        turn = Turn(start=start, end=len(ep.token_ids), obs_start=len(ep.token_ids), obs_end=len(ep.token_ids))
        turn.state_key = ep.state_key
        turn.policy_version = self.backend.policy_version
        ep.turns.append(turn)
        text = self.renderer.assistant_text(ep.token_ids[start:])
        try:
            obs, reward, terminated, truncated, info = await _call_env(ep.env, "step", text)
        except Exception as e:
            ep.stop = StopReason.INFRA_ERROR if isinstance(e, InfraError) else StopReason.ENV_ERROR
            ep.info["error"] = f"step: {e!r}"
            self.metrics["episodes/" + ep.stop] += 1
            return
        turn.reward = float(reward)
        turn.action_valid = bool(info.get("action_valid", True))
        self.metrics["turns/invalid_actions"] += int(not turn.action_valid)
        ep.reward += float(reward)
        ep.state_key = info.get("state_key")
        ep.messages = ep.messages + [{"role": "assistant", "content": text}]
        if terminated:
            ep.stop = StopReason.DONE
        elif truncated or len(ep.turns) >= self.cfg.max_turns:
            ep.stop = StopReason.MAX_TURNS
        elif res.finish_reason == "length" and len(ep.token_ids) >= self.cfg.max_total_tokens:
            ep.stop = StopReason.MAX_TOKENS
        if ep.stop is not None:
            ep.info.update({k: v for k, v in info.items() if k not in ("state_key",) and _json_safe(v)})
            return
        obs, cut = self.renderer.truncate_observation(list(obs))
        self.metrics["obs/truncated"] += cut
        obs_ids = self.renderer.observation_ids(ep.messages, obs, ep.tools, res.finish_reason == "stop")
        ep.messages = ep.messages + obs
        if len(ep.token_ids) + len(obs_ids) >= self.cfg.max_total_tokens:
            ep.stop = StopReason.MAX_TOKENS
            return
        ep.append(obs_ids, mask=0)
        turn.obs_end = len(ep.token_ids)
        if self.cfg.check_drift:
            drift = self.renderer.drift(ep.token_ids, ep.messages, ep.tools)
            self.metrics["render_drift"] += int(drift)


def _hash_task(obs: list[dict]) -> str:
    return "task-" + hashlib.sha256(repr(obs).encode()).hexdigest()[:12]


def _json_safe(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | dict)

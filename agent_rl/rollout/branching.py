"""Branching (``RolloutEngine.fork``): a child episode that starts from a parent's exact prefix.

The child's token ids, mask, logprobs and top-k up to the branch point are the parent's, copied.
Its environment is brought to the state the parent's env had before the branching turn by
replaying: reset with the parent's seed and options, then one step per completed turn with that
turn's assistant text. When the env has ``snapshot()`` and ``restore(snapshot)``, only the first
child replays; the others restore its snapshot (``fork/replayed`` / ``fork/restored`` count them). Observations that
re-render differently from the parent's stored ids (a
non-deterministic env) are counted in ``fork/replay_drift``; the child keeps the parent's ids.
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from typing import Any, Protocol

from agent_rl.core.errors import InfraError
from agent_rl.core.types import StopReason, Trajectory
from agent_rl.rollout.episode import Episode, env_options
from agent_rl.rollout.render import ChatRenderer


class ForkHost(Protocol):
    """What a replay uses of the engine that forks (``RolloutEngine``)."""

    renderer: ChatRenderer
    metrics: Counter[str]
    cfg: Any

    async def env_call(self, env: Any, name: str, *args: Any, **kwargs: Any) -> Any: ...

    def observation(self, ep: Episode, obs: list[dict], turn_ended_with_stop: bool) -> list[int]: ...


def branch_turn(trajectory: Trajectory, at_token: int) -> int:
    """Index of the assistant turn that ``at_token`` falls in; ValueError when it is not a sampled token."""
    T = len(trajectory.token_ids_T)
    if not 0 <= at_token < T or trajectory.loss_mask_T[at_token] != 1:
        spans = ", ".join(f"[{u.start}, {u.end})" for u in trajectory.turns_N)
        raise ValueError(
            f"fork: at_token={at_token} is not a sampled token of the trajectory (length {T}); "
            f"branch inside an assistant turn or at its first token; turns: {spans}"
        )
    for k, turn in enumerate(trajectory.turns_N):
        if turn.start <= at_token < turn.end:
            return k
    raise ValueError(f"fork: at_token={at_token} is in no recorded turn of the trajectory")


class SharedReplay:
    """One fork's replay, shared by its children when the env can ``snapshot()`` / ``restore(s)``:
    the first child replays and snapshots, the others restore that snapshot instead of replaying."""

    def __init__(self) -> None:
        self.leader_taken = False
        self.result: asyncio.Future[tuple[Any, dict[str, Any]] | None] = asyncio.get_running_loop().create_future()


async def replay_prefix(
    host: ForkHost, ep: Episode, parent: Trajectory, at_token: int, k: int, shared: SharedReplay
) -> None:
    """Set ``ep`` (a fresh episode with an env) to the parent's state at ``at_token`` in turn ``k``."""
    ep.parent_id, ep.branch_point = parent.episode_id, at_token
    ep.info.update({key: copy.deepcopy(v) for key, v in parent.info.items() if key in _KEPT_INFO})
    ep.info.update(sample_seed=ep.sample_seed)
    env = ep.env.unwrapped
    snapshots = callable(getattr(env, "snapshot", None)) and callable(getattr(env, "restore", None))
    leader = not shared.leader_taken
    shared.leader_taken = True
    try:
        restored = None if leader or not snapshots else await shared.result
        if restored is not None:
            await host.env_call(ep.env, "restore", restored[0])
            ep.set_conversation(restored[1])
            host.metrics["fork/restored"] += 1
        else:
            await _replay(host, ep, parent, k)
            host.metrics["fork/replayed"] += 1
        if leader and not shared.result.done():
            shared.result.set_result(
                (await host.env_call(ep.env, "snapshot"), ep.conversation()) if snapshots else None
            )
    except Exception as e:  # noqa: BLE001 - env failures end the child, never the run
        if leader and not shared.result.done():
            shared.result.set_result(None)  # the others replay for themselves
        ep.fail(StopReason.INFRA_ERROR if isinstance(e, InfraError) else StopReason.ENV_ERROR, f"fork replay: {e!r}")
        return
    branching = parent.turns_N[k]
    context_ids = list(branching.prompt_ids) if branching.prompt_ids is not None else None
    if host.cfg.layout == "per_turn" and context_ids is None:
        context_ids = host.renderer.prompt_ids(ep.messages, ep.tools)
    ep.start_from_prefix(parent, at_token, k, context_ids)


async def _replay(host: ForkHost, ep: Episode, parent: Trajectory, k: int) -> None:
    """Reset with the parent's seed and options, then step with its first ``k`` turns' texts."""
    info = parent.info
    options = info.get("options") or {}
    obs, reset_info = await host.env_call(ep.env, "reset", seed=info.get("seed"), options=env_options(options))
    ep.messages, ep.tools = list(obs) + list(options.get("extra_messages") or []), reset_info.get("tools")
    ep.state_key = reset_info.get("state_key")
    for j, turn in enumerate(parent.turns_N[:k]):
        text = host.renderer.assistant_text(parent.token_ids_T[turn.start : turn.end])
        obs, reward, terminated, truncated, step_info = await host.env_call(ep.env, "step", text)
        if terminated or truncated:
            raise RuntimeError(f"replayed turn {j} ended the episode; the parent went on (a non-deterministic env?)")
        ep.messages = ep.messages + [{"role": "assistant", "content": text}]
        ended_with_stop = parent.token_ids_T[turn.end - 1] in host.renderer.stop_token_ids
        obs_ids = host.observation(ep, list(obs), ended_with_stop)
        host.metrics["fork/replay_drift"] += int(obs_ids != parent.token_ids_T[turn.obs_start : turn.obs_end])
        ep.state_key = step_info.get("state_key")
        ep.reward += float(reward)


# parent info carried over to children (the task, and what self-distillation needs)
_KEPT_INFO = ("task", "seed", "options", "teacher_context", "prompt_messages", "tools")

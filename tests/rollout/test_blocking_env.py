"""An env that blocks (a synchronous sleep inside ``astep``) stalls only its own episode."""

from __future__ import annotations

import threading
from typing import ClassVar

from rollout_helpers import AsyncEchoEnv

from agent_rl.core.types import EpisodeSpec, StopReason
from agent_rl.rollout.backends.scripted import ScriptedBackend
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import RolloutEngine
from agent_rl.rollout.render import ChatRenderer

EVENTS: list[str] = []
SLOW_BLOCKING = threading.Event()
FAST_DONE = threading.Event()
WAIT_S = 30.0  # far longer than either episode needs; reached only if one episode stalls the other


class BlockingEchoEnv(AsyncEchoEnv):
    """``AsyncEchoEnv`` whose ``astep`` blocks the thread it runs on (its reward code).

    The two episodes wait on each other: the slow one blocks until the fast one has finished, and the fast
    one finishes only after the slow one is blocking. That can end only if the engine steps them
    concurrently; if one blocked the other, each wait would run out, and the events would say so. The
    order the scheduler happens to give them does not matter."""

    loop_safe = False  # what an env that does not declare itself safe gets

    async def astep(self, action: str):
        name = self.options["name"]
        out = self._act(action)
        if name == "slow":
            EVENTS.append("slow: blocking")
            SLOW_BLOCKING.set()
            woken = FAST_DONE.wait(WAIT_S)  # noqa: ASYNC251 - the point: a synchronous wait inside a coroutine
            EVENTS.append("slow: unblocked" if woken else "slow: timed out")
        elif out[2]:
            seen = SLOW_BLOCKING.wait(WAIT_S)  # noqa: ASYNC251
            EVENTS.append("fast: done" if seen else "fast: timed out")
            FAST_DONE.set()
        return out


class LoopSafeEchoEnv(AsyncEchoEnv):
    loop_safe = True  # declares that its coroutines never block: they run on the engine's loop (as AsyncEchoEnv)
    threads: ClassVar[set[str]] = set()

    async def astep(self, action: str):
        LoopSafeEchoEnv.threads.add(threading.current_thread().name)
        return await super().astep(action)


def engine_for(tok, env) -> RolloutEngine:
    return RolloutEngine(ScriptedBackend(lambda m, rng: "7", tok), ChatRenderer(tok), env, RolloutConfig(max_turns=5))


def test_a_blocking_env_does_not_stall_the_other_episodes(tiny_tokenizer):
    EVENTS.clear()
    SLOW_BLOCKING.clear()
    FAST_DONE.clear()
    engine = engine_for(tiny_tokenizer, BlockingEchoEnv)
    specs = [
        EpisodeSpec(seed=0, group_id="g0", options={"name": "slow", "turns": 1}),
        EpisodeSpec(seed=1, group_id="g1", options={"name": "fast", "turns": 4}),
    ]
    trajectories = engine.run_sync(specs)
    engine.close()
    assert [t.stop_reason for t in trajectories] == [StopReason.DONE, StopReason.DONE]
    assert len(trajectories[1].turns_N) == 4
    # the fast episode stepped its last turn while the slow env's thread was blocked, and the slow one
    # was woken by it, not by the timeout
    assert EVENTS == ["slow: blocking", "fast: done", "slow: unblocked"], EVENTS


def test_a_loop_safe_env_runs_on_the_engine_loop(tiny_tokenizer):
    LoopSafeEchoEnv.threads.clear()
    engine = engine_for(tiny_tokenizer, LoopSafeEchoEnv)
    [t] = engine.run_sync([EpisodeSpec(seed=0, group_id="g", options={"turns": 2})])
    engine.close()
    assert t.stop_reason == StopReason.DONE and LoopSafeEchoEnv.threads == {threading.current_thread().name}

"""BFCL-MultiTurn-v0's API instances live in a worker process (``envs.bfcl.worker``): a call past
``call_timeout_s`` is stopped (the process killed and reaped) and the next episode gets a fresh
one; a worker that dies on its own is an infrastructure failure (never a reward of 0); nothing
outlives ``close()``."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil
import pytest

from envs.bfcl.data import check_installed

try:
    check_installed()
except RuntimeError as exc:  # pragma: no cover - make setup installs it
    pytest.skip(str(exc), allow_module_level=True)

from bfcl_helpers import replay

from agent_rl.core.errors import InfraError
from agent_rl.core.types import EpisodeSpec, StopReason
from agent_rl.rollout.backends.scripted import ScriptedBackend
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import RolloutEngine
from agent_rl.rollout.render import ChatRenderer
from envs.bfcl import policies, worker
from envs.bfcl.data import multi_turn_tasks
from envs.bfcl.multi_turn import BfclMultiTurnEnv
from envs.bfcl.worker import ApiWorker, exit_text

MATH_TASK = next(t for t in multi_turn_tasks() if "MathAPI" in t.classes).task_id
FOREVER = '<tool_call>{"name": "mean", "arguments": {"numbers": ["forever"]}}</tool_call>'
DIE = '<tool_call>{"name": "mean", "arguments": {"numbers": ["die"]}}</tool_call>'
MEAN = '<tool_call>{"name": "mean", "arguments": {"numbers": [1, 2]}}</tool_call>'


@pytest.fixture
def hooks(monkeypatch):
    """Workers started in this test import ``bfcl_hooks`` (the ``forever`` and ``die`` arguments)."""
    monkeypatch.setattr(worker, "PRELOAD", ("bfcl_hooks",))


def gone(pid: int) -> bool:
    """No process ``pid``, not even a zombie (a zombie still exists for psutil)."""
    return not psutil.pid_exists(pid)


def test_a_call_past_its_limit_is_stopped_and_the_next_episode_gets_a_fresh_worker(hooks):
    env = BfclMultiTurnEnv(split="all", call_timeout_s=0.5)

    async def episode():
        await env.areset(options={"task": MATH_TASK})
        pid, ticks = env._apis.pid, 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        other = asyncio.ensure_future(ticker())
        start = time.monotonic()
        out = await env.astep(FOREVER + MEAN)  # the second call never runs
        took = time.monotonic() - start
        other.cancel()
        return pid, out, took, ticks

    first, (obs, reward, terminated, truncated, info), took, ticks = asyncio.run(episode())
    # the call never ends: that it returned at all shows it was stopped; the bound (far below the
    # 60 s the worker's other requests get) shows it was stopped at the call's own limit
    assert took < 0.5 + 5.0
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["failure"] == "turn 0: 'mean' ran longer than 0.5 s" and info["action_valid"] is False
    assert [m["content"] for m in obs] == ["error: 'mean' ran longer than 0.5 s; stopped"]
    assert ticks >= 5  # the event loop (every other episode) ran while the call computed
    assert env._apis.pid is None and gone(first)  # killed and reaped: no zombie

    assert replay(env, MATH_TASK) == 1.0  # a normal episode after it scores as before
    second = env._apis.pid
    assert second not in (None, first) and env._apis.starts == 2
    env.close()
    assert gone(second) and env._apis.pid is None
    assert not {first, second} & {p.pid for p in psutil.Process().children(recursive=True)}


def test_close_stops_a_call_still_running(hooks):
    """An episode cancelled in the middle of a call (its thread still waits for the worker), then
    ``close()``: the worker is killed at once, not after ``call_timeout_s``, and reaped."""
    env = BfclMultiTurnEnv(split="all", call_timeout_s=600.0)

    async def main():
        await env.areset(options={"task": MATH_TASK})
        pid = env._apis.pid
        step = asyncio.ensure_future(env.astep(FOREVER))
        await asyncio.sleep(0.2)  # the call starts (whether it has or not, close() must stop it)
        step.cancel()
        await env.aclose_resources()
        return pid

    pid = asyncio.run(main())  # returns once the call's thread has ended
    assert gone(pid) and env._apis.pid is None


def test_a_worker_that_dies_is_an_infrastructure_failure_and_the_next_reset_replaces_it(hooks):
    env = BfclMultiTurnEnv(split="all")
    env.reset(options={"task": MATH_TASK})
    pid = env._apis.pid
    os.kill(pid, signal.SIGKILL)  # between two calls
    with pytest.raises(InfraError, match=rf"^the BFCL API worker \(pid {pid}\) died during 'mean': killed by SIGKILL$"):
        env.step(MEAN)
    assert gone(pid)
    assert replay(env, MATH_TASK) == 1.0
    pid = env._apis.pid
    env.reset(options={"task": MATH_TASK})
    with pytest.raises(InfraError, match=rf"\(pid {pid}\) died during 'mean': killed by SIGKILL$"):
        env.step(DIE)  # in the middle of a call, as the OOM killer would
    env.close()
    assert gone(pid)


def test_the_engine_ends_an_episode_whose_worker_died_as_infra_error_unscored(hooks, tiny_tokenizer):
    def policy(messages, rng):  # the episode whose task ends with "kill me" makes the fatal call
        return DIE if messages[-1]["content"] == "kill me" else policies.replay(messages)

    made: list[BfclMultiTurnEnv] = []

    def make_env():
        made.append(BfclMultiTurnEnv(split="all"))
        return made[-1]

    engine = RolloutEngine(
        ScriptedBackend(policy, tiny_tokenizer),
        ChatRenderer(tiny_tokenizer),
        make_env,
        RolloutConfig(max_turns=30, max_new_tokens=4096, max_total_tokens=200_000),
    )
    kill_me = {"task": MATH_TASK, "extra_messages": [{"role": "user", "content": "kill me"}]}
    died, solved = engine.run_sync(
        [
            EpisodeSpec(seed=0, group_id="g", options=kill_me),
            EpisodeSpec(seed=1, group_id="g", options={"task": MATH_TASK}),
        ]
    )
    engine.close()
    assert (died.stop_reason, died.reward) == (StopReason.INFRA_ERROR, None)
    assert "died during 'mean': killed by SIGKILL" in died.info["error"]
    assert (solved.stop_reason, solved.reward) == (StopReason.DONE, 1.0)
    assert made and all(e._apis.pid is None for e in made)


def test_exit_text_names_the_signal_or_the_status():
    assert [exit_text(rc) for rc in (-9, -15, 1, 0)] == [
        "killed by SIGKILL",
        "killed by SIGTERM",
        "exit status 1",
        "exit status 0",
    ]
    assert ApiWorker().pid is None

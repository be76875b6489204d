"""Rollout workers as child processes (``distributed.backend: process``): same results as one process,
the staleness bound, dead workers replaced, weights moved through shared memory."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import threading
import time

import pytest
import torch

from agent_rl.distributed.process_group import pack, unpack
from agent_rl.train.trainer import Trainer
from tests.distributed.conftest import small_config
from tests.distributed.helpers import (
    assert_one_worker_replaced_and_nothing_lost,
    run_killing_a_worker,
    run_steps,
    trajectory_key,
)
from tests.distributed.test_async import LATENCY_ENV

pytestmark = pytest.mark.distributed


def test_pack_keeps_every_tensor_and_value_in_order():
    sd = {
        "a": torch.arange(6, dtype=torch.float32).view(2, 3),
        "n": 7,
        "b": torch.tensor([1, 2], dtype=torch.int64),
        "c": torch.ones(4, dtype=torch.float32),
    }
    packed = pack(sd)
    assert len(packed["flats"]) == 2  # one flat tensor per dtype
    assert all(f.is_shared() for f in packed["flats"])
    out = unpack(packed)
    assert list(out) == ["a", "n", "b", "c"]
    assert out["n"] == 7
    for k in ("a", "b", "c"):
        assert out[k].dtype == sd[k].dtype and torch.equal(out[k], sd[k])
    assert out["a"].data_ptr() == packed["flats"][0].data_ptr()  # views, nothing copied


def test_process_workers_synchronous_equal_local(tmp_path, tiny_model_dir):
    lr = "learner.lr=0.05"  # large enough that step 1 samples from visibly different weights
    local, local_rec, _ = run_steps(small_config(tmp_path / "local", tiny_model_dir, lr), steps=2)
    cfg = small_config(
        tmp_path / "proc",
        tiny_model_dir,
        lr,
        "distributed.backend=process",
        "distributed.process.num_rollout_workers=2",
    )
    remote, rec, metrics = run_steps(cfg, steps=2)
    for (s1, v1, ts1), (s2, v2, ts2) in zip(local_rec.calls, rec.calls, strict=True):
        assert (s1, v1) == (s2, v2)
        assert [trajectory_key(t) for t in ts1] == [trajectory_key(t) for t in ts2]
        for t1, t2 in zip(ts1, ts2, strict=True):  # other batch shapes: equal up to float rounding
            torch.testing.assert_close(
                torch.tensor(t1.rollout_logprobs_T), torch.tensor(t2.rollout_logprobs_T), rtol=0, atol=1e-5
            )
    assert [u.policy_version for _, _, ts in rec.calls for t in ts for u in t.turns_N][-1] == 1
    for (name, p1), p2 in zip(
        local.components.model.state_dict().items(), remote.components.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-5, msg=name)
    assert metrics[1]["distributed/staleness_max"] == 0
    assert sum(m.get("distributed/weights_mismatches", 0) for m in metrics) == 0  # every swap confirmed
    assert sum(m.get("distributed/weight_loads", 0) for m in metrics) >= 2  # start weights, then version 1


def test_a_killed_worker_process_is_replaced_and_nothing_is_lost(tmp_path, tiny_model_dir):
    cfg = small_config(
        tmp_path,
        tiny_model_dir,
        "distributed.backend=process",
        "distributed.max_staleness=1",
        "distributed.process.num_rollout_workers=2",
        *LATENCY_ENV,
    )
    source, victim, record, metrics = run_killing_a_worker(cfg, lambda victim: os.kill(victim.pid, signal.SIGKILL))
    assert_one_worker_replaced_and_nothing_lost(source, victim, record, metrics)
    assert "exited with code -9" in str(victim.dead)
    assert max(record.staleness_values()) == 1  # produced one version ahead
    assert all(not h.process.is_alive() for h in source.group.handles())  # closed with the source


def test_a_worker_that_cannot_start_stops_the_run_in_one_line(tmp_path, tiny_model_dir, monkeypatch):
    from agent_rl.distributed import process_group

    cfg = small_config(tmp_path, tiny_model_dir, "distributed.backend=process", "distributed.max_staleness=1")
    real = process_group.ProcessWorkerGroup.__init__

    def init(self, cfg_, *args, **kwargs):  # the trainer's own env is built by now: break only the worker's
        cfg_.env.id = "agent_rl/NoSuchEnv-v0"
        return real(self, cfg_, *args, **kwargs)

    monkeypatch.setattr(process_group.ProcessWorkerGroup, "__init__", init)
    with pytest.raises(ValueError, match=r"rollout worker rollout-0-1 could not start: .*NoSuchEnv") as e:
        Trainer(cfg, log=lambda *a: None)
    assert "\n" not in str(e.value)


def test_a_worker_that_does_not_start_in_time_stops_the_run_in_one_line(tmp_path, tiny_model_dir, monkeypatch):
    from agent_rl.distributed import process_group

    monkeypatch.setattr(process_group, "CLOSE_WAIT_S", 0.5)  # the worker still loading is killed, not awaited
    cfg = small_config(
        tmp_path,
        tiny_model_dir,
        "distributed.backend=process",
        "distributed.max_staleness=1",
        "distributed.process.startup_timeout_s=0.05",
    )
    with pytest.raises(
        ValueError, match=r"^rollout worker rollout-0-1 did not start within .*startup_timeout_s=0.05 s$"
    ):
        Trainer(cfg, log=lambda *a: None)


# -- one handle, its pipe's other end held by the test (the worker's side of the protocol) ---------------
@pytest.fixture
def handle_loop():
    from agent_rl.distributed.buffer import LoopThread

    loop = LoopThread("test-process-handle")
    yield loop
    loop.stop()


def start_handle(loop, target, args):
    """A real process (``target(*args)``) behind a ProcessHandle whose pipe's other end the test holds."""
    from agent_rl.distributed.process_group import ProcessHandle

    ctx = multiprocessing.get_context("forkserver")
    process = ctx.Process(target=target, args=args, daemon=True)
    process.start()
    ours, theirs = ctx.Pipe(duplex=True)
    return ProcessHandle("rollout-0-1", 0, process, ours, loop.loop), theirs


def test_a_handle_answers_each_job_by_its_id_and_kills_a_worker_that_does_not_close(handle_loop, monkeypatch):
    from agent_rl.distributed import process_group

    handle, worker = start_handle(handle_loop, time.sleep, (60,))
    worker.send(("ready",))
    assert handle.ready.wait(10)
    job = asyncio.run_coroutine_threadsafe(handle.run(["spec"], 7), handle_loop.loop)
    assert worker.recv() == ("run", 0, ["spec"], 7)
    worker.send(("done", 5, ["not this job's"], {}))  # an answer for no waiting job is dropped
    worker.send(("failed", 0, ValueError("the env broke")))
    with pytest.raises(ValueError, match="the env broke"):
        job.result(10)
    job = asyncio.run_coroutine_threadsafe(handle.run(["spec"], 8), handle_loop.loop)
    assert worker.recv() == ("run", 1, ["spec"], 8)
    worker.send(("done", 1, ["trajectory"], {"m": 1.0}))
    assert job.result(10) == (["trajectory"], {"m": 1.0})

    monkeypatch.setattr(process_group, "CLOSE_WAIT_S", 0.2)
    handle.close()  # asked to close; the sleeping process does not, and is killed
    assert worker.recv() == ("close",)
    handle.process.join(10)
    assert handle.process.exitcode == -signal.SIGKILL


def test_a_handle_whose_worker_died_fails_its_jobs_and_every_later_send(handle_loop):
    from agent_rl.distributed.process_group import WorkerProcessDied

    handle, worker = start_handle(handle_loop, sys.exit, (3,))
    worker.send(("ready",))
    assert handle.ready.wait(10)
    job = asyncio.run_coroutine_threadsafe(handle.run(["spec"], 1), handle_loop.loop)
    assert worker.recv()[0] == "run"
    worker.close()  # the worker's end of the pipe is gone, as when its process exits
    with pytest.raises(
        WorkerProcessDied, match=rf"^rollout worker rollout-0-1 \(pid {handle.pid}\) exited with code 3$"
    ):
        job.result(10)
    with pytest.raises(WorkerProcessDied, match="exited with code 3"):
        handle.send(("cancel", 0))
    handle.close()  # nothing to ask: the pipe is closed and the process reaped
    assert handle.conn.closed


class LocalError(Exception):
    def __init__(self, message: str, holds):
        super().__init__(message)
        self.holds = holds


def test_a_worker_error_crosses_the_pipe_as_itself_or_as_a_runtime_error_naming_it():
    from agent_rl.distributed.process_group import _portable

    picklable = ValueError("bad action")
    assert _portable(picklable) is picklable
    unpicklable = LocalError("the sandbox is gone", threading.Lock())
    crossed = _portable(unpicklable)
    assert type(crossed) is RuntimeError and str(crossed) == "LocalError: the sandbox is gone"

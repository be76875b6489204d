"""The chaos run: a training run on Ray workers, a served policy and docker sandboxes, while its
infrastructure fails under it.

20 steps of ``distributed.backend=ray`` (two rollout workers, one step of staleness), the ``openai``
backend pointed at a real ``agent-rl serve`` on loopback, and an env whose every step runs a program
in a docker sandbox (``tests/distributed/chaos_env.py``). A thread injects four faults at chosen steps:

- the Docker daemon is stopped (SIGTERM, as a service manager does) under a running call and
  started again 6 s later, longer than a step: a private daemon of the test's own
  (``OwnDockerd``), as every test that stops a daemon uses, never the machine's;
- a rollout worker actor is killed (``ray.kill``);
- the inference server is killed (``kill -9``) and started again on the same port;
- a sandbox program fills its disk.

The run must finish. Episodes hit by the daemon or the server are ``infra_error``: counted in the
step's metrics, never given a reward, never in a training batch. The killed worker's groups run
again. The disk filler is the program's own failure (scored 0), not an infrastructure error. A
group that lost episodes is trained smaller only with ``train/short_groups`` saying so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, cli_env

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.distributed]

STEPS = 20
GROUP_SIZE = 4
# the step whose rollout request starts each fault
FAULT_STEPS = {"docker": 4, "worker": 8, "serve": 11, "disk": 15}
DOCKER_DOWN_S = 6.0  # between the daemon's stop and its start: longer than a step


def _need_or_skip(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"chaos run in CI: {why}", pytrace=False)
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {timeout_s:.0f} s")


class Server:
    """``agent-rl serve`` of the tiny model in a subprocess, on one fixed loopback port."""

    def __init__(self, model_dir: Path, log: Path):
        self.model_dir, self.log = model_dir, log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def launch(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "agent_rl.cli",
            "serve",
            "--model",
            str(self.model_dir),
            "--port",
            str(self.port),
            "--served-model-name",
            "tiny",
        ]
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=cli_env())

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def wait_ready(self) -> None:
        _wait(self._healthy, 120, "agent-rl serve did not answer /health")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"agent-rl serve exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class Faults(threading.Thread):
    """Injects each fault when the trainer asks for its step's rollouts; records when it did what."""

    def __init__(self, trainer, server: Server, daemon, fault_dir: Path):
        super().__init__(name="chaos", daemon=True)
        self.trainer, self.server, self.daemon, self.fault_dir = trainer, server, daemon, fault_dir
        self.step_started = {s: threading.Event() for s in range(STEPS)}
        self.stopping = False  # the run ended early: inject nothing more
        self.done: dict[str, tuple[float, float]] = {}  # fault -> (start, end) in perf_counter
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for name, step in sorted(FAULT_STEPS.items(), key=lambda kv: kv[1]):
                self.step_started[step].wait()
                if self.stopping:
                    return
                t0 = time.perf_counter()
                getattr(self, name)()
                self.done[name] = (t0, time.perf_counter())
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def stop(self) -> None:
        self.stopping = True
        for started in self.step_started.values():
            started.set()
        self.join(timeout=180)  # a fault under way ends first: never leave a server it restarts behind

    def docker(self) -> None:
        (self.fault_dir / "hold").touch()  # a call that is surely running when the daemon stops
        _wait((self.fault_dir / "holding").exists, 120, "no episode took the hold ticket")
        time.sleep(1.0)
        self.daemon.stop()  # its containers die with it: the held call is in flight
        time.sleep(DOCKER_DOWN_S)  # a slow restart: steps go on meanwhile
        self.daemon.start()

    def worker(self) -> None:
        import ray

        ray.kill(self.trainer.rollouts.group.handles()[0].actor)

    def serve(self) -> None:
        self.server.kill()
        self.server.start()  # the requests meanwhile retry (rollout.backend.max_retries)

    def disk(self) -> None:
        (self.fault_dir / "fill_disk").touch()


def test_chaos_training_run(ray_cluster, tmp_path, tiny_model_dir, monkeypatch):
    from sandbox.image import DEFAULT_IMAGE
    from tests.sandbox.sandbox_helpers import OwnDockerd

    _need_or_skip(os.geteuid() == 0, "starting a private dockerd needs root")
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    daemon = OwnDockerd()
    server = Server(tiny_model_dir, tmp_path / "serve.log")
    try:
        server.launch()  # it loads while the daemon starts
        daemon.start()
        daemon.load_image(DEFAULT_IMAGE)
        server.wait_ready()
        _chaos_run(tmp_path, tiny_model_dir, monkeypatch, server, daemon, fault_dir)
    finally:
        server.kill()
        daemon.stop_and_remove()


def _chaos_run(tmp_path, tiny_model_dir, monkeypatch, server, daemon, fault_dir) -> None:
    from agent_rl.config import load_config
    from agent_rl.core.types import StopReason
    from agent_rl.train import trainer as trainer_module
    from agent_rl.train.trainer import Trainer

    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.path={tiny_model_dir}",
            f"run.root={tmp_path}",
            "env.id=chaos/SandboxEcho-v0",
            "env.plugins=[tests.distributed.chaos_env]",
            f"env.options={{fault_dir: {fault_dir}, docker_url: '{daemon.url}'}}",
            "sandbox.backend=docker",
            "rollout.backend.name=openai",
            f"rollout.backend.base_url={server.url}",
            "rollout.backend.model=tiny",
            # requests and weight pushes wait out the server's restart (~15-30 s on a loaded 2-core machine)
            "rollout.backend.max_retries=20",
            "rollout.backend.backoff_s=0.25",
            "rollout.backend.max_backoff_s=4",
            f"rollout.group_size={GROUP_SIZE}",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=8",
            "trainer.prompts_per_step=2",
            f"trainer.steps={STEPS}",
            "trainer.eval_every=0",
            "distributed.backend=ray",
            "distributed.max_staleness=1",
            "distributed.ray.num_rollout_workers=2",
            "distributed.ray.sandbox_pools=false",  # each worker's own docker pool, on the private daemon
            "tracking.loggers=[]",
            "tracking.progress=false",
            "tracking.save_trajectories=0",
        ],
    )
    logs: list[str] = []
    trainer = Trainer(cfg, log=logs.append)
    faults = Faults(trainer, server, daemon, fault_dir)
    handed: dict[int, list] = {}  # step -> every trajectory the source handed over
    trained: dict[int, list] = {}  # step -> the groups that went into the batch
    inner_rollout, inner_step = trainer.rollouts.rollout, trainer.step
    real_make_batch = trainer_module.make_batch

    def rollout(step: int, round_: int, n: int):
        faults.step_started[step].set()
        out = inner_rollout(step, round_, n)
        handed.setdefault(step, []).extend(out)
        return out

    current = {"step": -1}

    def step(s: int):
        current["step"] = s
        return inner_step(s)

    def make_batch(groups, *args, **kwargs):
        trained[current["step"]] = list(groups)
        return real_make_batch(groups, *args, **kwargs)

    trainer.rollouts.rollout, trainer.step = rollout, step
    monkeypatch.setattr(trainer_module, "make_batch", make_batch)
    faults.start()
    t0 = time.perf_counter()
    try:
        run_dir = trainer.train()
    finally:
        faults.stop()
        server.kill()
    wall = time.perf_counter() - t0
    assert faults.error is None, repr(faults.error)
    assert set(faults.done) == set(FAULT_STEPS)

    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))  # the run reached its last step
    by_step = {m["step"] - 1: m for m in metrics}

    # every infra_error episode is counted in its step's metrics, has no reward, and never trained
    infra: dict[int, list] = {}
    for s, ts in handed.items():
        failed = [t for t in ts if t.stop_reason == StopReason.INFRA_ERROR]
        assert by_step[s].get("rollout/stop_infra_error", 0.0) == len(failed), s
        assert all(t.reward is None and not t.trainable for t in failed)
        infra[s] = failed
    for s, groups in trained.items():
        assert all(
            t.stop_reason != StopReason.INFRA_ERROR and t.reward is not None for g in groups for t in g.trajectories_G
        )
    errors = {s: [t.info.get("error", "") for t in ts] for s, ts in infra.items() if ts}
    near_faults = {s for f in ("docker", "serve") for s in range(FAULT_STEPS[f], FAULT_STEPS[f] + 4)}
    assert set(errors) <= near_faults, errors  # no infra_error away from the daemon and the server
    docker_errors = sum("sandbox" in e or "docker" in e or "executor" in e for es in errors.values() for e in es)
    server_errors = sum("ServerUnavailableError" in e for es in errors.values() for e in es)

    # the killed worker was replaced and its groups ran again
    assert sum(m.get("distributed/worker_restarts", 0) for m in metrics) == 1
    assert sum(m.get("distributed/requeued_after_failure", 0) for m in metrics) >= 1

    # the disk filler: the program's failure, scored, never infra_error
    filled = [t for ts in handed.values() for t in ts if t.info.get("filled_disk")]
    assert len(filled) == 1, [t.info for t in filled]
    assert filled[0].stop_reason == StopReason.DONE and filled[0].reward == 0.0
    assert filled[0].info["program_status"] == "nonzero_exit"
    assert "No space left on device" in filled[0].info["stderr_tail"]

    # a group trained with fewer than rollout.group_size episodes is reported, never silent
    for s, groups in trained.items():
        short = [g for g in groups if len(g.trajectories_G) < GROUP_SIZE]
        assert by_step[s].get("train/short_groups", 0.0) == len(short), s
        assert all(len(g.trajectories_G) == GROUP_SIZE for g in groups if g not in short)
    summary = {
        "wall_s": round(wall, 1),
        "infra_error_per_step": {s: len(ts) for s, ts in infra.items() if ts},
        "docker_errors": docker_errors,
        "server_errors": server_errors,
        "short_groups": {s: by_step[s]["train/short_groups"] for s in by_step if by_step[s].get("train/short_groups")},
        "faults_s": {k: round(b - a, 1) for k, (a, b) in faults.done.items()},
        "skipped_steps": [s for s in by_step if by_step[s].get("train/skipped")],
    }
    summary["stale_requeued_groups"] = sum(m.get("distributed/stale_requeue_groups", 0) for m in metrics)
    print("chaos:", json.dumps(summary))
    # the restarted server sampled nothing older than the bound (it got the weights again first)
    assert all(m.get("distributed/staleness_max", 0) <= 1 for m in metrics)
    assert docker_errors >= ("docker" in FAULT_STEPS), summary
    assert re.search(r"fewer than rollout.group_size", "\n".join(logs)) or not summary["short_groups"]

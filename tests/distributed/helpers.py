"""Recording what the trainer is handed by its rollout source."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_rl.core.types import Trajectory
from agent_rl.distributed import staleness
from agent_rl.train.trainer import Trainer


@dataclass
class Record:
    """Per call of ``rollout``: (step, learner version then, the trajectories handed over)."""

    calls: list[tuple[int, int, list[Trajectory]]] = field(default_factory=list)

    def staleness_values(self) -> list[int]:
        return [staleness(t, version) for _, version, ts in self.calls for t in ts if t.turns_N]


def record_rollouts(trainer: Trainer) -> Record:
    record, inner = Record(), trainer.rollouts.rollout

    def rollout(step: int, round_: int, n: int) -> list[Trajectory]:
        out = inner(step, round_, n)
        record.calls.append((step, trainer.learner.version, out))
        return out

    trainer.rollouts.rollout = rollout
    return record


def run_steps(cfg, steps: int) -> tuple[Trainer, Record, list[dict]]:
    """A trainer of ``cfg`` run for ``steps`` steps, what its source handed over, and each step's metrics."""
    trainer = Trainer(cfg, log=lambda *a: None)
    record = record_rollouts(trainer)
    try:
        metrics = [trainer.step(s) for s in range(steps)]
    finally:
        trainer.rollouts.close()
    return trainer, record, metrics


def trajectory_key(t: Trajectory) -> tuple:
    """What two runs that sample the same must agree on, per trajectory."""
    return (t.group_id, t.token_ids_T, t.loss_mask_T, t.reward, [u.policy_version for u in t.turns_N])


def run_killing_a_worker(cfg, kill: Callable[[Any], None], steps: int = 4) -> tuple[Any, Any, Record, list[dict]]:
    """``steps`` steps of ``cfg``; as step 2's groups go out to the workers, ``kill(victim)`` runs 0.2 s
    later on the first worker's handle. Returns the rollout source, the victim, the record and the metrics."""
    trainer = Trainer(cfg, log=lambda *a: None)
    record = record_rollouts(trainer)
    source = trainer.rollouts
    victim = source.group.handles()[0]
    inner = source.rollout

    def rollout(step: int, round_: int, n: int) -> list[Trajectory]:
        if step == 1:  # step 2's groups were just dispatched to both workers: kill one mid-episode
            threading.Timer(0.2, kill, args=(victim,)).start()
        return inner(step, round_, n)

    source.rollout = rollout
    try:
        metrics = [trainer.step(s) for s in range(steps)]
    finally:
        source.close()
    return source, victim, record, metrics


def assert_one_worker_replaced_and_nothing_lost(source: Any, victim: Any, record: Record, metrics: list[dict]) -> None:
    """One restart, its jobs re-queued, and every step trained on all of its groups (two prompts of
    two episodes), each complete, none older than one version."""
    assert sum(m.get("distributed/worker_restarts", 0) for m in metrics) == 1
    assert sum(m.get("distributed/requeued_after_failure", 0) for m in metrics) >= 1
    assert victim not in source.group.handles()
    for step, (s, _, ts) in enumerate(record.calls):
        assert s == step
        assert sorted(t.group_id for t in ts) == sorted([f"s{step}r0p0"] * 2 + [f"s{step}r0p1"] * 2)
    assert all(v <= 1 for v in record.staleness_values())

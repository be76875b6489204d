"""Recording what the trainer is handed by its rollout source."""

from __future__ import annotations

from dataclasses import dataclass, field

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

"""The trainer's circuit breaker: a run whose infrastructure keeps failing stops instead of "training".

An episode that ends as ``infra_error`` (a dead inference server, a broken sandbox) is never trained
on, so a step where most episodes hit one trains on almost nothing, and a step where all do trains
on nothing while still logging "reward 0.00". The breaker reads each step's episodes and trips when

- the step's share of ``infra_error`` episodes reaches ``trainer.max_infra_error_frac`` (default 1.0:
  every episode), or
- it exceeds ``trainer.sustained_infra_error_frac`` (default 0.5) for ``trainer.infra_error_patience``
  consecutive steps (default 3; 0 turns this rule off).

Tripping raises ``InfraErrorRateError`` (an ``InfraError``) whose one line names the failing
component and the first error of the step (the episode's ``info["error"]``); the trainer leaves a
resumable checkpoint and the command exits non-zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_rl.core.errors import InfraError

if TYPE_CHECKING:  # the command line imports this module to catch its error: no torch at start-up
    from agent_rl.core.types import Trajectory

INFRA_ERROR = "infra_error"  # StopReason.INFRA_ERROR (a StrEnum)


class InfraErrorRateError(InfraError):
    """Too many episodes of a step (or of consecutive steps) ended in an infrastructure error."""


def failing_component(error: str, cfg: Any) -> str:
    """Which part failed, from where the engine caught the error (``backend:``, ``reset:``, ``step:``)."""
    if error.startswith("backend:"):
        backend = cfg.rollout.backend
        where = f" at {backend.base_url}" if getattr(backend, "base_url", None) else ""
        return f"the inference backend (rollout.backend.name={backend.name}{where})"
    return f"the environment's infrastructure (env.id={cfg.env.id}, sandbox.backend={cfg.sandbox.backend})"


class InfraBreaker:
    """Counts each step's infrastructure failures; ``check`` raises when the run must stop."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.bad_steps = 0  # consecutive steps above the sustained threshold

    def check(self, step: int, trajectories: list[Trajectory]) -> None:
        t = self.cfg.trainer
        failed = [tr for tr in trajectories if tr.stop_reason == INFRA_ERROR]
        if not trajectories:
            return
        frac = len(failed) / len(trajectories)
        self.bad_steps = self.bad_steps + 1 if frac > t.sustained_infra_error_frac else 0
        if frac >= t.max_infra_error_frac:
            rule = f"trainer.max_infra_error_frac={t.max_infra_error_frac}"
        elif t.infra_error_patience and self.bad_steps >= t.infra_error_patience:
            rule = (
                f"more than trainer.sustained_infra_error_frac={t.sustained_infra_error_frac} for "
                f"trainer.infra_error_patience={t.infra_error_patience} steps in a row"
            )
        else:
            return
        error = str(failed[0].info.get("error") or "no error recorded")
        raise InfraErrorRateError(
            f"step {step + 1}: {len(failed)} of {len(trajectories)} episodes ended in an infrastructure error ({rule}); "
            f"{failing_component(error, self.cfg)} failed first with: {error}"
        )

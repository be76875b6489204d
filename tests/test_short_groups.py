"""A group that lost episodes to env / infrastructure errors trains smaller, and the step says so."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from agent_rl.core.errors import InfraError
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from agent_rl.rollout.groups import short_groups
from envs.spaces import AnyText, Messages
from tests.builders import trajectory
from tests.test_trainer import trainer

ENV_ID = "test/FlakyOneTurn-v0"


class FlakyOneTurnEnv(gym.Env):
    """One turn, reward 1; the first ``failures`` step calls (of every instance) raise ``InfraError``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    failures = 0

    def __init__(self):
        self.observation_space, self.action_space = Messages(), AnyText(max_length=4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [{"role": "user", "content": f"task {seed}"}], {"task_id": f"t{seed}"}

    def step(self, action):
        if FlakyOneTurnEnv.failures > 0:
            FlakyOneTurnEnv.failures -= 1
            raise InfraError("sandbox daemon gone")
        return [{"role": "user", "content": "ok"}], 1.0, True, False, {}


def episode(group: str, i: int, stop: StopReason = StopReason.DONE) -> Trajectory:
    failed = stop == StopReason.INFRA_ERROR
    return trajectory(f"{group}{i}", None if failed else 1.0, ids=[1], mask=[1], task="t", group=group, stop=stop)


def test_short_groups_are_those_under_the_group_size():
    full = TrajectoryGroup("t", "a", [episode("a", i) for i in range(3)])
    short = TrajectoryGroup("t", "b", [episode("b", i) for i in range(2)])
    grown = TrajectoryGroup("t", "c", [episode("c", i) for i in range(5)])  # forked branches
    assert short_groups([full, short, grown], group_size=3) == [short]
    assert short_groups([full, grown], group_size=3) == []


def test_a_step_that_trains_a_short_group_reports_it(tmp_path, tiny_model_dir):
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=FlakyOneTurnEnv, disable_env_checker=True)
    t = trainer(tmp_path, tiny_model_dir, f"env.id={ENV_ID}", "env.options={}", "rollout.max_turns=1")
    logs: list[str] = []
    t.log = logs.append
    FlakyOneTurnEnv.failures = 1
    metrics = t.step(0)  # 2 groups of 2: one episode fails, its group keeps 1
    assert metrics["rollout/stop_infra_error"] == 1.0
    assert metrics["train/short_groups"] == 1.0
    assert logs == [
        "step 1: 1 of 2 groups train with fewer than rollout.group_size=2 episodes (smallest: 1); "
        "their env / infra error episodes were dropped"
    ]
    logs.clear()
    metrics = t.step(1)  # nothing fails: every group full, nothing to say
    assert metrics["train/short_groups"] == 0.0 and logs == []

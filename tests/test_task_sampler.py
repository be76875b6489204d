from __future__ import annotations

from agent_rl.algorithms import FILTERS
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from agent_rl.train.task_sampler import TaskSampler


def group(task_id: str, rewards: list[float]) -> TrajectoryGroup:
    ts = [
        Trajectory(task_id, "g", f"e{i}", [1, 2], [0, 1], [0.0, 0.0], [], r, StopReason.DONE)
        for i, r in enumerate(rewards)
    ]
    return TrajectoryGroup(task_id, "g", ts)


def test_fresh_tasks_without_pool_are_deterministic():
    a, b = TaskSampler(0, 0, []), TaskSampler(0, 0, [])
    assert a.draw(3, 0, 4) == b.draw(3, 0, 4) and len(set(a.draw(3, 0, 4))) == 4
    assert a.draw(3, 0, 4) != a.draw(4, 0, 4)


def test_pass_rate_filter_retires_tasks_from_the_pool():
    entry = FILTERS.get("pass_rate_filter")
    cfg, state = entry.config(), entry.make_state()
    sampler = TaskSampler(0, 3, [(entry, cfg, state)])
    easy, hard = sampler.pool_seeds[0], sampler.pool_seeds[1]
    sampler.observe(easy, "easy")
    sampler.observe(hard, "hard")
    entry.fn([group("easy", [1.0] * 4), group("hard", [0.0, 1.0, 0.0, 0.0])], state, cfg)
    assert sampler.weights().tolist() == [0.0, 1.0, 1.0]  # easy retired, hard and the unseen one stay
    for step in range(20):
        assert easy not in sampler.draw(step, 0, 2)  # two distinct draws from the two remaining tasks


def test_prioritized_weights_follow_failure_rate():
    entry = FILTERS.get("prioritized")
    cfg, state = entry.config(), entry.make_state()
    sampler = TaskSampler(0, 2, [(entry, cfg, state)])
    sampler.observe(sampler.pool_seeds[0], "a")
    sampler.observe(sampler.pool_seeds[1], "b")
    entry.fn([group("a", [1.0, 1.0, 1.0, 0.0]), group("b", [0.0, 0.0, 0.0, 1.0])], state, cfg)
    w = sampler.weights()
    # w_i = max(1 - s_i, min_weight): a solved 3/4 -> 0.25, b solved 1/4 -> 0.75
    assert abs(w[0] - max(0.25, cfg.min_weight)) < 1e-12 and abs(w[1] - 0.75) < 1e-12
    counts = [0, 0]
    for step in range(400):
        counts[sampler.pool_seeds.index(sampler.draw(step, 0, 1)[0])] += 1
    assert 0.65 < counts[1] / 400 < 0.85  # expected 0.75 / (0.25 + 0.75)


def test_state_round_trip():
    s = TaskSampler(0, 2, [])
    s.observe(s.pool_seeds[0], "x")
    t = TaskSampler(0, 2, [])
    t.load_state_dict(s.state_dict())
    assert t.task_ids == s.task_ids

"""Group filters and samplers: hand examples, refills, state round trips, inputs never mutated."""

from __future__ import annotations

import copy

import pytest
import torch

from agent_rl.algorithms import FILTERS
from agent_rl.algorithms.filters.length import interruption_engine_options
from agent_rl.algorithms.filters.sampling import replay_correction
from agent_rl.algorithms.filters.task_stats import curriculum_weights, prioritized_weights
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from tests.builders import trajectory


def traj(
    reward: float | None, generated: int = 2, stop: StopReason = StopReason.DONE, task: str = "t", **info
) -> Trajectory:
    """A trajectory with a 2-token prompt followed by ``generated`` policy tokens."""
    return trajectory(
        f"{task}-{reward}-{generated}",
        reward,
        mask=[0, 0] + [1] * generated,
        task=task,
        group=f"{task}-g",
        stop=stop,
        info=info,
    )


def group(
    task: str, rewards: list[float | None], lengths: list[int] | None = None, stops: list[StopReason] | None = None
) -> TrajectoryGroup:
    lengths = lengths or [2] * len(rewards)
    stops = stops or [StopReason.DONE] * len(rewards)
    return TrajectoryGroup(
        task, f"{task}-g", [traj(r, n, s, task) for r, n, s in zip(rewards, lengths, stops, strict=True)]
    )


def apply(key: str, groups: list[TrajectoryGroup], state=None, **cfg):
    """Run a filter and check that its input groups were not modified."""
    entry = FILTERS.get(key)
    before = copy.deepcopy(groups)
    out = entry.fn(groups, state, entry.config(**cfg))
    assert [[t.to_json() for t in g.trajectories_G] for g in groups] == [
        [t.to_json() for t in g.trajectories_G] for g in before
    ]
    return out


def rewards_of(result) -> list[list[float | None]]:
    return [g.rewards_G for g in result.groups]


def test_dynamic_sampling_drops_all_equal_groups_and_asks_for_refills():
    groups = [
        group("a", [1, 0]),
        group("b", [1, 1]),
        group("c", [0, 0, 0]),
        group("d", [1, None, 0]),
        group("e", [1, None]),
    ]
    out = apply("dynamic_sampling", groups)
    # kept: a (1 vs 0) and d (1 vs 0, None ignored); dropped: b, c all equal, e has one valid reward
    assert [g.task_id for g in out.groups] == ["a", "d"]
    assert out.num_more == 3
    assert out.metrics == {"filter/dynamic_sampling_dropped": 3.0, "filter/dynamic_sampling_kept": 2.0}


def test_pass_rate_filter_retires_easy_prompts_for_later_epochs():
    entry = FILTERS.get("pass_rate_filter")
    state = entry.make_state()
    # epoch 1: a passes 9/10 = 0.9 >= 0.9 -> retired, still trained on now; b passes 1/2
    out = apply("pass_rate_filter", [group("a", [1] * 9 + [0]), group("b", [1, 0])], state)
    assert [g.task_id for g in out.groups] == ["a", "b"] and out.num_more == 0
    assert state.retired == {"a"}
    # epoch 2: a comes back and is dropped, one refill asked; b stays
    saved = state.state_dict()
    out = apply("pass_rate_filter", [group("a", [0, 0]), group("b", [1, 0])], state)
    assert [g.task_id for g in out.groups] == ["b"] and out.num_more == 1
    restored = entry.make_state()
    restored.load_state_dict(saved)
    assert restored.retired == {"a"} and restored.success_rate("a", 0.0) == pytest.approx(0.9)


def test_overlong_filter_masks_or_drops_truncated_samples():
    truncated = StopReason.MAX_TOKENS
    groups = [group("a", [1, 0], stops=[StopReason.DONE, truncated]), group("b", [0], stops=[truncated])]
    out = apply("overlong_filter", groups)
    # mask mode: the truncated row stays in the group (its reward enters the baseline) with no loss token
    assert rewards_of(out) == [[1, 0], [0]]
    assert out.groups[0].trajectories_G[1].loss_mask_T == [0, 0, 0, 0]
    assert out.groups[0].trajectories_G[0].loss_mask_T == [0, 0, 1, 1]
    dropped = apply("overlong_filter", groups, mode="drop")
    assert rewards_of(dropped) == [[1]]  # group b is left empty and dropped
    assert dropped.metrics["filter/overlong_truncated"] == 2.0


def test_overlong_soft_penalty_hand_example():
    # L_max 20, L_cache 5: |y| <= 15 -> 0; 18 -> (15 - 18)/5 = -0.6; 20 -> -1; 21 -> -1
    g = group("a", [1.0, 1.0, 1.0, 0.5, None], lengths=[15, 18, 20, 21, 30])
    out = apply("overlong_soft_penalty", [g], max_length=20, cache_length=5)
    assert rewards_of(out) == [[1.0, pytest.approx(0.4), pytest.approx(0.0), pytest.approx(-0.5), None]]
    half = apply("overlong_soft_penalty", [g], max_length=20, cache_length=5, penalty_factor=0.5)
    assert half.groups[0].rewards_G[1] == pytest.approx(0.7)  # 1 - 0.5*0.6
    assert out.metrics["filter/overlong_penalized"] == 4.0


def test_forced_interruption_truncates_the_loss_after_the_budgets():
    # think 4 + answer 2 = 6 generated tokens are trained on; the 8-token row loses its last 2
    g = TrajectoryGroup("a", "a-g", [traj(1.0, 8, forced_interruption=True), traj(0.0, 5)])
    out = apply("forced_interruption", [g], think_budget_tokens=4, answer_budget_tokens=2)
    first, second = out.groups[0].trajectories_G
    assert first.loss_mask_T == [0, 0, 1, 1, 1, 1, 1, 1, 0, 0] and first.info["forced_truncated"] is True
    assert second.loss_mask_T == [0, 0, 1, 1, 1, 1, 1]
    assert out.metrics == {"filter/forced_interrupted": 1.0, "filter/forced_truncated": 1.0}
    cfg = FILTERS.get("forced_interruption").config(think_budget_tokens=4)
    options = interruption_engine_options(cfg)
    assert options["think_budget_tokens"] == cfg.think_budget_tokens
    assert options["answer_budget_tokens"] == cfg.answer_budget_tokens and options["interrupt_message"] == cfg.message


def test_popo_replay_replaces_ineffective_groups_from_the_buffer():
    entry = FILTERS.get("popo_replay")
    state = entry.make_state()
    # step 1: a is informative (enters the buffer); b is ineffective and the buffer had nothing -> dropped
    out = apply("popo_replay", [group("a", [1, 0]), group("b", [1, 1])], state)
    assert [g.task_id for g in out.groups] == ["a"] and out.num_more == 0
    # step 2: c is ineffective -> replaced by a copy of a, marked with its age 1
    saved = state.state_dict()
    out = apply("popo_replay", [group("c", [0, 0])], state)
    assert [g.task_id for g in out.groups] == ["a"] and out.groups[0].group_id == "a-g/replay1@2"
    assert all(t.info["popo_replay"] is True and t.info["popo_age"] == 1 for t in out.groups[0].trajectories_G)
    # step 3: a was replayed max_replays = 1 times -> d is dropped (and refilled when asked)
    out = apply("popo_replay", [group("d", [0, 0])], state, refill_unreplaced=True)
    assert out.groups == [] and out.num_more == 1
    # the saved state (before step 2) replays a again; with max_age_steps 1 a is too old at step 3
    restored = entry.make_state()
    restored.load_state_dict(saved)
    assert [g.task_id for g in apply("popo_replay", [group("e", [1, 1])], restored).groups] == ["a"]
    restored.load_state_dict(saved)
    restored.step += 1
    assert apply("popo_replay", [group("e", [1, 1])], restored, max_age_steps=1).groups == []


def test_popo_replay_correction_factor():
    # pi_old / mu = (1.5, e^3 -> capped at 2); off the mask 1
    old = torch.tensor([[0.0, torch.log(torch.tensor(1.5)), 3.0]])
    mask = torch.tensor([[0.0, 1, 1]])
    w = replay_correction(old, torch.zeros(1, 3), mask, cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.5, 2.0]]))


def test_curriculum_moves_from_easy_to_all_tasks():
    entry = FILTERS.get("curriculum")
    state = entry.make_state()
    cfg = entry.config(start_min_success=0.5, anneal_steps=10)
    out = apply(
        "curriculum",
        [group("easy", [1, 0, 1, 0]), group("hard", [0, 0, 0, 0])],
        state,
        start_min_success=0.5,
        anneal_steps=10,
    )
    assert len(out.groups) == 2  # keeps every group
    # after 1 step the bar is 0.5 * (1 - 1/10) = 0.45: easy (0.5) and unseen (prior 0.5) are drawn, hard (0) is not
    assert out.metrics["filter/curriculum_min_success"] == pytest.approx(0.45)
    assert curriculum_weights(state, ["easy", "hard", "new"], cfg) == [1.0, 0.0, 1.0]
    state.calls = 10  # after anneal_steps the bar is 0: every task
    assert curriculum_weights(state, ["easy", "hard", "new"], cfg) == [1.0, 1.0, 1.0]


def test_prioritized_weights_are_one_minus_success_rate():
    entry = FILTERS.get("prioritized")
    state = entry.make_state()
    apply("prioritized", [group("a", [1, 1, 1, 0]), group("b", [0, 0])], state)
    apply("prioritized", [group("b", [1, None])], state)  # None rewards are not counted
    # a: 3/4 -> 0.25; b: 1/3 -> 2/3; unseen: 1
    assert prioritized_weights(state, ["a", "b", "new"], entry.config()) == pytest.approx([0.25, 2 / 3, 1.0])
    assert prioritized_weights(state, ["a"], entry.config(min_weight=0.5)) == [0.5]
    restored = entry.make_state()
    restored.load_state_dict(state.state_dict())
    assert restored.success_rate("b", 0.0) == pytest.approx(1 / 3)


def test_length_penalty_hand_example():
    # lengths 10, 20, 30: lambda = 0.5 - (len - 10)/20 = (0.5, 0, -0.5)
    # correct rows get lambda, the incorrect one min(0, lambda): rewards (1, 1, 0) -> (1.5, 1.0, -0.5)
    out = apply("length_penalty", [group("a", [1.0, 1.0, 0.0, None], lengths=[10, 20, 30, 99])])
    assert rewards_of(out) == [[1.5, 1.0, -0.5, None]]  # the None row neither changes nor counts for min/max
    # an incorrect short answer is not rewarded: lambda 0.5 -> min(0, 0.5) = 0
    assert rewards_of(apply("length_penalty", [group("b", [0.0, 1.0], lengths=[10, 30])])) == [[0.0, 0.5]]
    # equal lengths: no change
    assert rewards_of(apply("length_penalty", [group("c", [1.0, 0.0], lengths=[7, 7])])) == [[1.0, 0.0]]


# the config fields a filter requires (no default): a directory that exists stands in for a model
REQUIRED = {"e_grm": {"scorer_path": "."}, "omni_opd": {"teacher_path": "."}}


@pytest.mark.parametrize("key", FILTERS.names())
def test_every_filter_runs_on_empty_and_mixed_input(key):
    entry = FILTERS.get(key)
    state = entry.make_state()
    assert apply(key, [], state, **REQUIRED.get(key, {})).groups == []
    groups = [group("a", [1, 0, None], lengths=[3, 5, 1]), group("b", [1, 1])]
    try:
        out = apply(key, groups, entry.make_state(), **REQUIRED.get(key, {}))
    except ValueError as e:  # a filter that acts on the run itself (its state has bind) says it has none
        assert hasattr(entry.state, "bind") and "bind(run, cfg)" in str(e)
        return
    assert out.num_more >= 0 and all(isinstance(v, float) for v in out.metrics.values())
    assert all(g.trajectories_G for g in out.groups)


@pytest.mark.parametrize("key", [e.name for e in FILTERS.entries() if e.state is not None])
def test_stateful_filter_without_state_raises(key):
    with pytest.raises(ValueError, match="state"):
        FILTERS.get(key).fn([group("a", [1, 0])], None, FILTERS.get(key).config(**REQUIRED.get(key, {})))


def test_filter_metrics_over_refill_rounds_count_mean_and_level():
    """Two rounds of one filter (4 groups in, then 2): counts add, means are weighted by the groups
    each call received, levels keep the latest value; a metric only one round reports is kept."""
    from agent_rl.algorithms.registry import FilterMetrics, FilterResult

    m = FilterMetrics()
    m.add(FilterResult([], metrics={"x/dropped": 3.0, "x/share": 0.5, "x/buffer": 5.0, "x/first": 1.0},
                       means=frozenset({"x/share"}), levels=frozenset({"x/buffer"})), groups_in=4)  # fmt: skip
    m.add(FilterResult([], metrics={"x/dropped": 2.0, "x/share": 1.0, "x/buffer": 7.0},
                       means=frozenset({"x/share"}), levels=frozenset({"x/buffer"})), groups_in=2)  # fmt: skip
    assert m.values == {
        "x/dropped": 5.0,
        "x/share": pytest.approx((0.5 * 4 + 1.0 * 2) / 6),
        "x/buffer": 7.0,
        "x/first": 1.0,
    }
    empty = FilterMetrics()  # a mean from calls that received no groups: the latest value, never 0 / 0
    for v in (0.25, 0.75):
        empty.add(FilterResult([], metrics={"x/share": v}, means=frozenset({"x/share"})), groups_in=0)
    assert empty.values == {"x/share": 0.75}


def test_dynamic_sampling_counts_add_up_over_a_refill():
    from agent_rl.algorithms.registry import FilterMetrics

    m = FilterMetrics()
    first = [group("a", [1.0, 1.0]), group("b", [0.0, 1.0]), group("c", [0.0, 0.0])]
    m.add(apply("dynamic_sampling", first), len(first))
    refill = [group("d", [1.0, 0.0]), group("e", [1.0, 1.0])]
    m.add(apply("dynamic_sampling", refill), len(refill))
    assert m.values == {"filter/dynamic_sampling_dropped": 3.0, "filter/dynamic_sampling_kept": 2.0}

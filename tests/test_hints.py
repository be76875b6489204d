"""Hints where RL cannot learn: said once, only when the pattern holds over the first steps."""

from __future__ import annotations

import json

from agent_rl.core.types import StopReason, Trajectory, Turn
from agent_rl.train.hints import (
    CAUSES,
    SFT_RECORD,
    LearningHints,
    causes,
    constant_reward_groups,
    invalid_actions,
    sft_record,
)
from tests.builders import trajectory


def _traj(group: str, reward: float | None, valid: list[bool]) -> Trajectory:
    turns = [Turn(0, 1, 1, 1, action_valid=v) for v in valid]
    stop = StopReason.DONE if reward is not None else StopReason.INFRA_ERROR
    return trajectory(
        f"{group}-{reward}-{len(valid)}", reward, ids=[1], mask=[1], turns=turns, task="t", group=group, stop=stop
    )


def _step(rewards_by_group: dict[str, list[float | None]], valid: list[bool] | None = None) -> list[Trajectory]:
    return [_traj(g, r, valid or [True]) for g, rs in rewards_by_group.items() for r in rs]


def test_constant_reward_counts():
    ts = _step({"a": [0.0, 0.0], "b": [1.0, 1.0, None], "c": [0.0, 1.0], "d": [0.5]})
    # a, b constant (b's failed episode does not count); c varies; d has one scored sample
    assert constant_reward_groups(ts) == (2, 3, {0.0, 1.0})
    ts = [_traj("a", 0.0, [False, False, True]), _traj("a", 0.0, [False])]
    assert invalid_actions(ts) == (3, 4)


def test_constant_reward_hint_once_after_the_first_steps():
    said: list[str] = []
    hints = LearningHints(total_steps=10, log=said.append)
    zero = {"a": [0.0, 0.0], "b": [0.0, 0.0]}
    assert hints.observe(0, _step(zero)) == []
    assert hints.observe(1, _step(zero)) == []
    [h] = hints.observe(2, _step(zero))
    assert h == (
        "hint: RL cannot learn here: in the first 3 step(s) every group's samples got the same reward (reward 0), "
        f"so every advantage is 0. {CAUSES}"
    )
    assert said == [h]
    assert hints.observe(3, _step(zero)) == [] and said == [h]  # said once


def test_no_hint_when_any_group_varies_or_any_step_learns():
    hints = LearningHints(total_steps=10)
    assert hints.observe(0, _step({"a": [0.0, 0.0]})) == []
    assert hints.observe(1, _step({"a": [0.0, 0.0], "b": [0.0, 1.0]})) == []  # one group has a signal
    assert hints.observe(2, _step({"a": [0.0, 0.0]})) == []  # the streak was broken
    assert hints.observe(5, _step({"a": [0.0, 0.0]})) == []  # only the first steps count


def test_invalid_actions_hint_and_short_runs():
    hints = LearningHints(total_steps=2)  # the window shrinks to the run
    bad = _step({"a": [0.0, 1.0]}, valid=[False] * 19 + [True])  # 38 of 40 invalid, rewards vary
    assert hints.observe(0, bad) == []
    [h] = hints.observe(1, bad)
    assert h.startswith("hint: RL cannot learn here: in the first 2 step(s) 38 of 40 actions were invalid")
    assert "agent-rl sft" in h and "tool_format" in h and "rollout.temperature" in h
    hints = LearningHints(total_steps=1)
    ok = _step({"a": [0.0, 1.0]}, valid=[False] * 8 + [True] * 2)  # 16 of 20: below 90 %
    assert hints.observe(0, ok) == []


def test_both_patterns_make_one_hint():
    hints = LearningHints(total_steps=1)
    [h] = hints.observe(0, _step({"a": [0.0, 0.0]}, valid=[False]))
    assert h == (
        "hint: RL cannot learn here: in the first 1 step(s) every group's samples got the same reward (reward 0), "
        f"so every advantage is 0; and 2 of 2 actions were invalid (not parsed or rejected by the env). {CAUSES}"
    )


def test_a_model_sft_wrote_is_not_told_to_warm_start(tmp_path):
    (tmp_path / SFT_RECORD).write_text(json.dumps({"val_success": 0.125, "run_dir": "runs/q-sft-1", "base": "tiny"}))
    record = sft_record(str(tmp_path))
    assert sft_record(str(tmp_path / "nowhere")) is None
    [h] = LearningHints(total_steps=1, sft=record).observe(0, _step({"a": [0.0, 0.0]}))
    assert "warm-start it first" not in h and "warm-start it first" in CAUSES
    assert h.endswith(
        "usual causes: the model, warm-started by agent-rl sft (held-out success 0.125, run runs/q-sft-1), still "
        "cannot act: more sft.demos or sft.max_steps; it writes tool calls in a format the env does not parse "
        "(env.options.tool_format, the model family's template); rollout.temperature too low for the samples of a "
        "group to differ"
    )
    assert "(not evaluated, run ?)" in causes({"val_success": None})

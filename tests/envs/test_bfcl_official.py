"""``scoring="official"`` gives BFCL's own verdict: bfcl_eval's checkers beside the envs agree on
every candidate of a sample that covers every category; ``scoring="project"`` keeps the rules before."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("bfcl_eval")

from bfcl_helpers import replay

from envs.bfcl import agreement
from envs.bfcl.calls import BfclCallsEnv
from envs.bfcl.data import (
    CALL_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    call_tasks,
    multi_turn_tasks,
)
from envs.bfcl.multi_turn import BfclMultiTurnEnv
from tools.base import ToolCall
from tools.formats import get_format

#: Tasks where the project's rules and BFCL's differed (found by `python -m envs.bfcl.agreement`).
INTS_FOR_FLOATS = (
    "simple_python_13",
    "simple_python_82",
    "simple_python_87",
    "simple_python_103",
    "parallel_multiple_67",
    "live_simple_116-72-0",
)  # [1, 2] where the doc and the answer have floats
EARLY_HELD_OUT = ("multi_turn_miss_func_49", "multi_turn_miss_func_0")


def test_official_scoring_agrees_with_bfcl_eval_on_every_category():
    """Ground truth and perturbed candidates (wrong name, missing / unexpected parameter, changed
    values, ints for floats, plain text, malformed calls, dropped / repeated calls, turns ended
    by plain text, a held-out function called early) on 4 tasks of each of the 14 categories."""
    out = agreement.measure(
        per_category=4, scoring="official", extra_single=INTS_FOR_FLOATS, extra_multi=EARLY_HELD_OUT
    )
    assert out["disagreements"] == []
    (single, single_total), (multi, multi_total) = out["single"], out["multi"]
    assert single == single_total > 300 and multi == multi_total > 100
    assert {t.category for t in agreement.sample(call_tasks(), 4)} == set(CALL_CATEGORIES)
    assert {t.category for t in agreement.sample(multi_turn_tasks(), 4)} == set(MULTI_TURN_CATEGORIES)


def test_project_scoring_keeps_the_rules_before():
    out = agreement.measure(per_category=1, scoring="project", extra_single=INTS_FOR_FLOATS, extra_multi=EARLY_HELD_OUT)
    labels = {label for _, label, _, _ in out["disagreements"]}
    assert {"text", "ints for floats", "truth, turns ended by plain text"} <= labels
    assert any(label.endswith("called before its turn") for label in labels)


def _one(env, task_id: str, action: str) -> float:
    env.reset(options={"task": task_id})
    return env.step(action)[1]


def test_irrelevance_passes_any_output_without_a_call():
    task = next(t for t in call_tasks() if t.category == "irrelevance")
    official, project = BfclCallsEnv(split="all"), BfclCallsEnv(split="all", scoring="project")
    for text in ("I cannot help with that.", "<answer>No function fits.</answer>", "<tool_call>{oops</tool_call>"):
        assert _one(official, task.task_id, text) == 1.0
    assert _one(project, task.task_id, "I cannot help with that.") == 0.0
    call = get_format("hermes").render_calls([ToolCall(task.functions[0]["name"], {})])
    assert _one(official, task.task_id, call) == _one(project, task.task_id, call) == 0.0


@pytest.mark.parametrize("task_id", INTS_FOR_FLOATS)
def test_ints_in_a_list_of_floats_fail_as_in_bfcl(task_id):
    task = next(t for t in call_tasks() if t.task_id == task_id)
    ints = dict(agreement.single_turn_candidates(task))["ints for floats"]
    action = get_format("hermes").render_calls([ToolCall(n, a) for n, a in ints])
    assert agreement.bfcl_single(task, ints) is False
    assert _one(BfclCallsEnv(split="all"), task_id, action) == 0.0
    assert _one(BfclCallsEnv(split="all", scoring="project"), task_id, action) == 1.0


def test_miss_func_runs_a_held_out_function_called_early_as_bfcl_does():
    """multi_turn_miss_func_49's ground truth calls `tail` in turn 1, two turns before it is
    offered: BFCL runs it, so under official scoring the ground truth passes."""
    play = lambda env: replay(env, "multi_turn_miss_func_49")
    assert play(BfclMultiTurnEnv(split="all")) == 1.0
    assert play(BfclMultiTurnEnv(split="all", scoring="project")) == 0.0


def test_scoring_is_checked():
    for env in (BfclCallsEnv, BfclMultiTurnEnv):
        with pytest.raises(ValueError, match="scoring: unknown 'strict'; known: official, project"):
            env(split="all", scoring="strict")
    assert json.dumps(agreement.multi_turn_candidates(multi_turn_tasks()[0])[0][2]) == '"answer"'

"""scrl: the env's verified sub-problems, progress-aware rewards, per-position normalisation on answer
spans, and a decomposed group through the task queue in a real run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agent_rl.algorithms.registry import AdvantageInputs
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from agent_rl.methods.scrl import (
    ScrlConfig,
    ScrlFilterConfig,
    ScrlState,
    pick_subproblems,
    prefix_rewards,
    scored,
    scrl_filter,
)
from agent_rl.methods.scrl import scrl as scrl_advantage
from agent_rl.train.task_queue import TaskQueue
from envs.arithmetic.env import ArithmeticEnv
from tests.builders import trajectory


def test_arithmetic_sub_problems_are_its_operations_in_evaluation_order():
    subs = ArithmeticEnv.subproblems({"expression": "12+37*91-5"})
    assert subs == [
        {"question": "What is 37*91?", "answer": "3367"},
        {"question": "What is 12+37*91?", "answer": "3379"},
        {"question": "What is 12+37*91-5?", "answer": "3374"},
    ]
    assert pick_subproblems([{"q": i} for i in range(7)], 4) == [{"q": 0}, {"q": 2}, {"q": 4}, {"q": 6}]
    assert prefix_rewards([True, False, True, True]) == [1.0, 0.0, 0.0, 0.0]  # the seed's (1,1,0,1) -> (1,1,0,0) shape


def row(name: str, reward: float, n: int = 8, **info) -> Trajectory:
    return trajectory(name, reward, mask=[0, 0] + [1] * (n - 2), stop=StopReason.DONE, info=info)


def test_scoring_parses_the_sub_answers_and_the_env_verdict():
    t = row("a", 0.0, origin=None, options={"origin": {"method": "scrl", "answers": ["3367", "3379"]}})
    out = scored(t, "<step 1>3367</step 1> then <step 2> 3,379 </step 2> <answer>1</answer>", [4, 6], 0.5)
    assert out.info["scrl"] == {"prefix": [1.0, 1.0, 0.0], "ends": [4, 6]} and "scrl" not in t.info
    out = scored(t, "<step 1>3366</step 1><step 2>3379</step 2>", [4, None], 0.5)
    assert out.info["scrl"]["prefix"] == [0.0, 0.0, 0.0]


def test_per_position_normalisation_on_answer_spans_by_hand():
    # group 0: plain rows (grpo); group 1: decomposed rows, K = 2, answer 1 ends at token 5
    plain = [row("p0", 1.0), row("p1", 0.0)]
    dec = [
        row("d0", 0.0, scrl={"prefix": [1.0, 0.0], "ends": [5]}),
        row("d1", 0.0, scrl={"prefix": [0.0, 0.0], "ends": [None]}),
        row("d2", 1.0, scrl={"prefix": [1.0, 1.0], "ends": [4]}),
    ]
    rows = plain + dec
    x = AdvantageInputs(
        rewards_B=torch.tensor([t.reward for t in rows]),
        loss_mask_BT=torch.tensor([t.loss_mask_T for t in rows], dtype=torch.float32),
        group_index_B=torch.tensor([0, 0, 1, 1, 1]),
        groups=[TrajectoryGroup("task", "g0", plain), TrajectoryGroup("task", "g1", dec)],
    )
    out = scrl_advantage(x, ScrlConfig()).advantages_BT
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert out[0].tolist() == pytest.approx([0, 0] + [a] * 6, rel=1e-6) and out[1].tolist() == pytest.approx(
        [0, 0] + [-a] * 6, rel=1e-6
    )
    # position 1: {1, 0, 1}: mean 2/3, std sqrt(1/3); position 2: {0, 0, 1}: mean 1/3, std sqrt(1/3)
    s = math.sqrt(1 / 3) + 1e-6
    hi1, lo1, lo2, hi2 = (1 / 3) / s, (-2 / 3) / s, (-1 / 3) / s, (2 / 3) / s
    assert out[2].tolist() == pytest.approx([0, 0, hi1, hi1, hi1, lo2, lo2, lo2], rel=1e-5)  # answer 1 ends at 5
    assert out[3].tolist() == pytest.approx([0, 0] + [lo1] * 6, rel=1e-5)  # never answered 1: all its span
    assert out[4].tolist() == pytest.approx([0, 0, hi1, hi1, hi2, hi2, hi2, hi2], rel=1e-5)


def test_an_all_fail_group_is_queued_decomposed():
    queue, state = TaskQueue(), ScrlState()
    env = SimpleNamespace(unwrapped=SimpleNamespace(subproblems=ArithmeticEnv.subproblems), close=lambda: None)
    state.run = SimpleNamespace(enqueue=lambda gs: [queue.put(g) for g in gs] and len(gs), make_env=lambda: env)
    info = {"seed": 5, "options": {"split": "train"}, "task": {"expression": "37*91-12"}}
    fail = TrajectoryGroup("task", "g0", [row("a", 0.0, **info), row("b", 0.0, **info)])
    mixed = TrajectoryGroup("task", "g1", [row("c", 1.0, **info), row("d", 0.0, **info)])
    out = scrl_filter([fail, mixed], state, ScrlFilterConfig())
    assert out.groups == [fail, mixed] and out.num_more == 1
    (specs,) = queue.take(0, 1, 1)
    assert len(specs) == 2 and specs[0].seed == 5
    assert specs[0].options["origin"] == {"method": "scrl", "group": "g0", "answers": ["3367"]}
    assert "1. What is 37*91?\n2. What is 37*91-12?" in specs[0].options["extra_messages"][0]["content"]


def test_a_run_rolls_the_decomposed_group_and_scores_it(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    t = trainer(
        tmp_path,
        tiny_model_dir,
        "algorithm.advantage.name=scrl",
        "algorithm.filters=[{name: scrl}]",
        "trainer.prompts_per_step=1",
        "trainer.steps=1",
        "env.options.difficulty=3",
    )
    version = t.learner.version
    metrics = t.step(0)
    # the untrained model fails its 3-operand task: a decomposed group (2 sub-problems) in the refill round
    assert metrics["scrl/queued"] == 1.0 and metrics["scrl/decomposed_rows"] == 2.0 and t.learner.version == version + 1

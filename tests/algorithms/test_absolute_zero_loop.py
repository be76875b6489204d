"""absolute_zero end to end: the task sampler issues proposers and buffered solvers, validated
proposals are solved in the refill round and their proposers get r_propose; held groups survive a
checkpoint; refill_rounds=0 is a one-line config error."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from agent_rl.methods.absolute_zero import AbsoluteZeroFilterConfig, AbsoluteZeroState, issue, propose_reward
from agent_rl.methods.absolute_zero import absolute_zero_filter as az_filter
from agent_rl.train.task_queue import TaskQueue
from tests.builders import trajectory

AZ = [
    "env.id=agent_rl/CodeReason-v0",
    "env.options={}",
    "sandbox.backend=bwrap",
    "algorithm.advantage.name=absolute_zero",
    "algorithm.filters=[{name: absolute_zero, n_solve: 4, references: 1}]",
    "rollout.max_total_tokens=4096",
    "rollout.max_new_tokens=200",
    "learner.micro_batch_size=8",
]


def adder(messages: list[dict], rng: random.Random) -> str:
    """A scripted self-player on programs ``x + K``: proposes them, and solves each right half the time."""
    text, right = messages[-1]["content"], rng.random() < 0.5
    if "Reference tasks" in text:
        return f"<answer>```python\ndef f(x):\n    return x + {rng.randint(1, 9)}\n```\n```input\n{rng.randint(1, 9)}\n```</answer>"
    if "Here is a program" in text:  # inputs every seed program takes (lists; two ints for f(a, b))
        inputs = [f"{i}, {i + 1}" if "def f(a, b)" in text else f"[{i}, {i + 1}, {2 * i}]" for i in (1, 2, 3, 4)]
        return "<answer>```message\nguess\n```\n" + "".join(f"```input\n{i}\n```\n" for i in inputs) + "</answer>"
    k = int(m.group(1)) if (m := re.search(r"return x \+ (\d+)", text)) else 0
    if "What does f return" in text:
        x = int(re.search(r"```input\n(.+)\n```", text).group(1))
        return f"<answer>{x + k + (0 if right else 1)}</answer>"
    if "Give arguments" in text:
        o = int(re.search(r"```output\n(.+)\n```", text).group(1))
        return f"<answer>{o - k + (0 if right else 1)}</answer>"
    if not (m := re.search(r"f\((\d+)\) == (\d+)", text)):  # not an adder: a well-formed wrong guess
        return "<answer>```python\ndef f(*a):\n    return 0\n```</answer>"
    i, o = map(int, m.groups())
    return f"<answer>```python\ndef f(x):\n    return x + {o - i + (0 if right else 1)}\n```</answer>"


def row(name: str, reward: float, role: str, **info) -> Trajectory:
    options = {"split": "train", "origin": {"method": "absolute_zero", "role": role, "type": "deduction"}}
    return trajectory(name, reward, ids=[1, 2, 3], mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.5], stop=StopReason.DONE,
                      info={"seed": 3, "options": options, **info})  # fmt: skip


def test_the_sampler_issues_proposers_then_buffered_solvers():
    state, cfg = AbsoluteZeroState(), AbsoluteZeroFilterConfig(references=2)
    assert issue(state, "unseen-seed-0", cfg) == {}  # an env without self_play_tasks draws its own tasks
    state.issues = True
    first = [issue(state, f"unseen-seed-{s}", cfg)["options"] for s in range(12)]
    # an empty buffer: every prompt proposes, its references left to the env (the seed triplets)
    assert all(o["task"]["role"] == "propose" and o["task"]["references"] == [] for o in first)
    assert all(o["origin"] == {"method": "absolute_zero", "role": "propose", "type": o["task"]["type"]} for o in first)
    triplets = [
        {
            "role": "solve",
            "type": "deduction",
            "program": f"def f(x):\n    return x + {k}",
            "input": "1",
            "output": str(1 + k),
        }
        for k in range(3)
    ]
    state.buffer["deduction"] = triplets
    later = [issue(state, f"unseen-seed-{s}", cfg)["options"] for s in range(200)]
    ded = [o["task"] for o in later if o["origin"]["type"] == "deduction"]
    solve = [t for t in ded if t["role"] == "solve"]
    assert solve and all(t in triplets for t in solve)
    assert all(
        len(t["references"]) == 2 and all(r in triplets for r in t["references"]) for t in ded if t["role"] == "propose"
    )
    induction = [o["task"] for o in later if o["origin"]["type"] == "induction"]
    assert induction and all(
        t["role"] == "propose" and t["program"] in [x["program"] for x in triplets] for t in induction
    )
    assert issue(state, "unseen-seed-5", cfg) == issue(state, "unseen-seed-5", cfg)  # derived from the task, not global


def test_held_proposers_and_the_buffer_survive_a_checkpoint(tmp_path):
    import torch

    queue, cfg = TaskQueue(), AbsoluteZeroFilterConfig(n_solve=2)
    run = SimpleNamespace(enqueue=lambda gs: [queue.put(g) for g in gs] and len(gs))
    state = AbsoluteZeroState()
    state.run = run
    task = {"role": "solve", "type": "deduction", "program": "def f(x):\n    return x", "input": "1", "output": "1"}
    az_filter([TrajectoryGroup("task", "g0", [row("p1", 0.0, "propose", proposed_task=task)])], state, cfg)
    torch.save(state.state_dict(), tmp_path / "trainer.pt")  # as learner/checkpoint.py writes the states
    saved = torch.load(tmp_path / "trainer.pt", weights_only=False)
    resumed = AbsoluteZeroState()
    resumed.load_state_dict(saved)
    resumed.run = run
    assert resumed.held == state.held and resumed.buffer["deduction"] == [task] and resumed.proposals == 1
    (specs,) = queue.take(1, 0, 1)
    solvers = [
        Trajectory(
            "task",
            specs[0].group_id,
            f"s{i}",
            [1, 2],
            [0, 1],
            [0.0, -0.1],
            [],
            r,
            StopReason.DONE,
            info={"options": specs[i].options},
        )
        for i, r in enumerate([1.0, -0.5])
    ]
    released = az_filter([TrajectoryGroup("task", specs[0].group_id, solvers)], resumed, cfg).groups[0]
    assert [t.reward for t in released.trajectories_G] == [0.5]  # 1 - 1/2


def test_refill_rounds_zero_is_a_config_error(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    with pytest.raises(
        ValueError, match=r"^filter 'absolute_zero' needs trainer.refill_rounds >= 1 .*set trainer.refill_rounds=1$"
    ):
        trainer(tmp_path, tiny_model_dir, *AZ, "trainer.refill_rounds=0")


def test_a_run_rewards_proposers_with_r_propose_of_their_solvers(tmp_path, tiny_model_dir):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from tests.envs.test_code_exec import require_bwrap
    from tests.test_trainer import trainer

    require_bwrap()
    t = trainer(tmp_path, tiny_model_dir, *AZ, "trainer.steps=2")
    t.engine.backend = ScriptedBackend(adder, t.components.tokenizer, seed=0)
    _, groups, metrics = t._collect(0)
    rows = [r for g in groups for r in g.trajectories_G]
    proposers = [r for r in rows if "proposed_task" in r.info]
    # both drawn prompts propose (the buffer is empty): 2 groups x 2 samples, all valid
    assert len(proposers) == 4 and metrics["az/proposals"] == 4.0
    assert sum(len(v) for v in t.states["filter0"].buffer.values()) == 4  # the buffer holds every valid proposal
    for p in proposers:
        solvers = [r.reward for r in rows if r.info["options"].get("origin", {}).get("proposal") == p.episode_id]
        assert len(solvers) == 4 and set(solvers) <= {1.0, -0.5}
        assert p.reward == propose_reward(solvers)
    assert any(0.0 < p.reward < 1.0 for p in proposers)  # a learnable task: 1 - r_solve_bar
    metrics = t.step(1)  # the TRR++ update, by (role, type) bucket; the buffer now issues solvers too
    buckets = {k: v for k, v in metrics.items() if k.startswith("az/rows_")}
    assert buckets and all(k.split("_")[1] in ("propose", "solve") for k in buckets)

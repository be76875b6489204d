"""CodeReason-v0 (Absolute Zero's code reasoning): proposals validated in the sandbox (refused with
the reason), the three solve checks, the format penalties, infrastructure failures unscored."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest

import envs  # noqa: F401 - registers the environments
from agent_rl.core.errors import InfraError
from envs.code_reason.execution import safety_problem
from tests.envs.test_code_exec import require_bwrap

TRIPLET = {"program": "def f(a, b):\n    return a * b + 1\n", "input": "3, 4", "output": "13"}
INDUCTION = {
    "role": "solve",
    "type": "induction",
    "program": "def f(s):\n    return s[::-1]\n",
    "message": "m",
    "inputs": ["'ab'", "'xyz'", "'q'"],
    "outputs": ["'ba'", "'zyx'", "'q'"],
    "visible": 2,
}


def make(**kwargs):
    return gym.make("agent_rl/CodeReason-v0", **kwargs).unwrapped


def play(env, task: dict, answer: str) -> tuple[float, dict]:
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    assert terminated
    return reward, info


def proposal(program: str, inputs: str) -> str:
    return f"```python\n{program}\n```\n```input\n{inputs}\n```"


@pytest.fixture(scope="module")
def env():
    require_bwrap()
    e = make(sandbox_backend="bwrap")
    yield e
    e.close()


PROPOSE = {"role": "propose", "type": "deduction", "references": []}


def test_a_valid_proposal_becomes_a_solve_task(env):
    reward, info = play(env, PROPOSE, proposal("def f(x):\n    return x * 2", "21"))
    assert reward == 0.0 and info["valid_proposal"] is True
    assert info["proposed_task"] == {
        "role": "solve",
        "type": "deduction",
        "program": "def f(x):\n    return x * 2",
        "input": "21",
        "output": "42",
    }


@pytest.mark.parametrize(
    ("program", "inputs", "reason"),
    [
        (
            "def f(x):\n    return hash(x)",
            "'abc'",
            "nondeterministic: two runs gave ",
        ),  # str hashes differ per interpreter
        ("def f(x):\n    return x +", "1", "syntax error: "),
        ("import os\ndef f(x):\n    return os.getcwd()", "1", "forbidden module: os"),
        ("def f(x):\n    return 1 / x", "0", "the program failed: ZeroDivisionError: division by zero"),
    ],
)
def test_invalid_proposals_are_refused_with_the_reason(env, program, inputs, reason):
    reward, info = play(env, PROPOSE, proposal(program, inputs))
    assert reward == -0.5 and info["valid_proposal"] is False and info["reason"].startswith(reason)
    assert "proposed_task" not in info


def test_an_induction_proposal_runs_its_program_on_each_input(env):
    task = {"role": "propose", "type": "induction", "program": "def f(s):\n    return s[::-1]\n", "references": []}
    reward, info = play(
        env, task, "```message\nreversal\n```\n```input\n'ab'\n```\n```input\n'xyz'\n```\n```input\n'q'\n```"
    )
    assert reward == 0.0 and info["proposed_task"] == {**INDUCTION, "message": "reversal"}


@pytest.mark.parametrize(
    ("task", "answer", "reward"),
    [
        ({"role": "solve", "type": "deduction", **TRIPLET}, "13", 1.0),
        ({"role": "solve", "type": "deduction", **TRIPLET}, "13.0", 1.0),  # value equality, as Python's ==
        ({"role": "solve", "type": "deduction", **TRIPLET}, "12", -0.5),
        ({"role": "solve", "type": "abduction", **TRIPLET}, "4, 3", 1.0),  # any input with f(i) == o
        ({"role": "solve", "type": "abduction", **TRIPLET}, "1, 1", -0.5),
        (INDUCTION, "```python\ndef f(s):\n    return ''.join(reversed(s))\n```", 1.0),
        (
            INDUCTION,
            "```python\ndef f(s):\n    return s[::-1] if len(s) > 1 else 'x'\n```",
            -0.5,
        ),  # the held-out 'q' fails
    ],
)
def test_the_three_solve_checks(env, task, answer, reward):
    assert play(env, task, answer)[0] == reward


@pytest.mark.parametrize(
    ("task", "answer", "why"),
    [
        ({"role": "solve", "type": "deduction", **TRIPLET}, "thirteen", "the answer is not a Python literal"),
        ({"role": "solve", "type": "abduction", **TRIPLET}, "a b", "the answer is not a list of literal arguments"),
        (INDUCTION, "def f(s) return", "syntax error: "),
        (
            PROPOSE,
            "```python\ndef f(x):\n    return x\n```",
            "a proposal needs one ```python block and one ```input block",
        ),
        (PROPOSE, proposal("def f(x):\n    return x", "x y"), "an input is not a list of literal arguments"),
    ],
)
def test_format_errors_cost_one(task, answer, why):
    env = make(sandbox_backend="bwrap")  # none of these reaches the sandbox
    reward, info = play(env, task, answer)
    assert reward == -1.0 and info["format_error"] is True and info["reason"].startswith(why)


def test_no_answer_is_an_error_observation_and_a_format_error_on_the_last_turn():
    env = make(max_turns=2)
    env.reset(options={"task": PROPOSE})
    obs, reward, terminated, truncated, info = env.step("I think f doubles x.")
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, False, False)
    assert obs[0]["content"].startswith("error: no <answer>")
    _, reward, terminated, truncated, info = env.step("still no answer")
    assert (reward, terminated, truncated, info["format_error"]) == (-1.0, False, True, True)


def test_seeded_resets_mix_roles_and_types_deterministically():
    env = make()
    tasks = [env.reset(seed=s)[1]["task"] for s in range(40)]
    assert tasks == [env.reset(seed=s)[1]["task"] for s in range(40)]
    assert {(t["role"], t["type"]) for t in tasks} == {
        ("propose", "deduction"),
        ("propose", "abduction"),
        ("propose", "induction"),
        ("solve", "deduction"),
        ("solve", "abduction"),
    }
    assert all(len(t["references"]) == 6 for t in tasks if t["role"] == "propose")  # the paper's K


def test_the_safety_check_by_hand():
    assert safety_problem("from os.path import join\ndef f(x):\n    return x") == "forbidden module: os"
    assert safety_problem("def f(x):\n    return open('/etc/passwd').read()") == "forbidden builtin: open"
    assert safety_problem("def f(x):\n    return x.__class__") == "forbidden attribute: __class__"
    assert safety_problem("def g(x):\n    return x") == "the program defines no function f"
    assert safety_problem("import math\ndef f(x):\n    return math.sqrt(x)") is None


def test_a_sandbox_failure_is_never_scored():
    from sandbox import ExecStatus

    env = make()

    async def exec_(**kwargs):
        return SimpleNamespace(status=ExecStatus.INFRA_ERROR, error="executor died", stderr="", stdout="")

    env.sandbox = lambda: SimpleNamespace(exec=exec_)
    env.reset(options={"task": PROPOSE})
    with pytest.raises(InfraError, match="executor died"):
        env.step("<answer>" + proposal("def f(x):\n    return x", "1") + "</answer>")


def test_a_forged_or_missing_report_is_the_programs_failure():
    import asyncio

    from envs.code_reason.execution import MARK, run_program

    def sandbox(stdout: str):
        async def exec_(**kwargs):
            return SimpleNamespace(status="ok", stdout=stdout, stderr="")

        return exec_

    forged = asyncio.run(run_program(sandbox(f"{MARK} {{not json\n"), "def f(x):\n    return x", ["1", "2"], 1.0))
    assert forged.outputs == [None, None] and forged.first_error() == "the program tampered with the runner's report"
    killed = asyncio.run(run_program(sandbox(""), "def f(x):\n    return x", ["1"], 1.0))
    assert killed.outputs == [None] and killed.first_error() == "the program did not finish [ok]"
    fine = asyncio.run(
        run_program(
            sandbox(f'{MARK} [{{"output": "1"}}, {{"error": "E: x"}}]\n'), "def f(x):\n    return x", ["1", "2"], 1.0
        )
    )
    assert fine.outputs == ["1", None] and fine.errors == [None, "E: x"]

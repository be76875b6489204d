"""CodeExec-v0: HumanEval in the sandbox. Canonical solutions pass, stubs and hacks score 0."""

from __future__ import annotations

import asyncio
import os
import random
import time

import gymnasium as gym
import pytest

import envs  # noqa: F401 - registers the environments
from envs.code_exec.env import CodeExecEnv
from envs.code_exec.harness import grade, instrument
from envs.code_exec.policies import (
    HACKS,
    canonical,
    canonical_fenced,
    do_nothing,
    stub,
    submit_text,
)
from envs.code_exec.tasks import all_tasks, by_id, tasks
from tools.python import SandboxInfraError


def require_bwrap() -> None:
    from sandbox.bwrap import probe

    ok, why = probe()
    if not ok:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"bwrap does not work in CI: {why}", pytrace=False)
        pytest.skip(f"bwrap does not work here: {why}")


ISOLATED = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]


@pytest.fixture(params=ISOLATED)
def backend(request) -> str:
    if request.param == "bwrap":
        require_bwrap()
    return request.param


def run_episodes(backend: str, policy, task_ids: list[str], concurrency: int = 32, **options) -> list[tuple]:
    """One episode per task through ``areset`` / ``astep``; returns (reward, terminated, info) each.
    ``policy`` is one policy for all, or a list with one per task."""
    policies = policy if isinstance(policy, list) else [policy] * len(task_ids)

    async def episode(env: CodeExecEnv, task_id: str, rng: random.Random, policy):
        obs, info = await env.areset(seed=0, options={"task": task_id})
        messages = list(obs)
        for _ in range(env.max_turns):
            action = policy(messages, rng)
            obs, reward, terminated, truncated, info = await env.astep(action)
            messages += [{"role": "assistant", "content": action}, *obs]
            if terminated or truncated:
                return reward, terminated, info
        raise AssertionError("the episode did not end within max_turns")

    async def main():
        sem = asyncio.Semaphore(concurrency)

        async def one(i, task_id):
            async with sem:
                env = CodeExecEnv(sandbox_backend=backend, **options)
                try:
                    return await episode(env, task_id, random.Random(i), policies[i])
                finally:
                    env.close()

        return await asyncio.gather(*(one(i, t) for i, t in enumerate(task_ids)))

    return asyncio.run(main())


@pytest.mark.docker
def test_all_canonical_solutions_pass_and_all_stubs_fail_in_docker():
    ids = [t.task_id for t in all_tasks()]
    assert len(ids) == 164
    t0 = time.perf_counter()
    passed = run_episodes("docker", canonical, ids)
    t1 = time.perf_counter()
    stubs = run_episodes("docker", stub, ids)
    print(f"docker: 164 canonical in {t1 - t0:.1f} s, 164 stubs in {time.perf_counter() - t1:.1f} s")
    assert [i for i, (r, _, info) in zip(ids, passed) if r != 1.0] == []
    assert all(info["passed"] and info["asserts_passed"] == info["asserts_total"] for _, _, info in passed)
    assert [i for i, (r, _, info) in zip(ids, stubs) if r != 0.0 or info["passed"]] == []


def test_canonical_solutions_pass_and_stubs_fail_in_bwrap():
    require_bwrap()
    ids = [t.task_id for t in all_tasks()][::6]  # every 6th task: docker runs all 164
    assert [r for r, _, _ in run_episodes("bwrap", canonical, ids)] == [1.0] * len(ids)
    assert [r for r, _, _ in run_episodes("bwrap", stub, ids)] == [0.0] * len(ids)


HACK_TASKS = ["HumanEval/0", "HumanEval/53", "HumanEval/2"]


def test_reward_hacking_scores_zero(backend):
    """Every attempt in HACKS, on three tasks: 0 in binary mode, and with partial credit no more
    than the prompt-only stub (nothing, on these tasks)."""
    from envs.code_exec.policies import task_of

    # binary reward on three tasks; partial credit on the first (the stub earns 0 there too)
    for partial, task_ids in ((False, HACK_TASKS), (True, HACK_TASKS[:1])):
        cases = [(name, task_id) for name in sorted(HACKS) for task_id in task_ids]
        policies = [lambda m, rng, name=name: submit_text(HACKS[name](task_of(m))) for name, _ in cases]
        ids = [task_id for _, task_id in cases]
        results = run_episodes(backend, policies, ids, test_timeout_s=1.5, partial_credit=partial)
        assert {case: r for case, (r, _, _) in zip(cases, results)} == {case: 0.0 for case in cases}
        assert all(info["submitted"] and not info["passed"] for _, _, info in results)
    ((stub_reward, _, _),) = run_episodes(backend, stub, HACK_TASKS[:1], partial_credit=True)
    assert stub_reward == 0.0


def test_partial_credit_counts_assert_statements():
    # HumanEval/53 (add): 5 single asserts, then one assert in a loop of 100 random pairs
    code = "def add(x: int, y: int):\n    return x + y if x < 3 else 0\n"
    #   (0,1) ok  (1,0) ok  (2,3) ok  (5,7) fails  (7,5) fails  loop: fails for some pair -> 3 of 6
    assert instrument(by_id()["HumanEval/53"].test)[1] == 6
    ((r_partial, _, info),) = run_episodes(
        "auto", lambda m, rng: submit_text(code), ["HumanEval/53"], partial_credit=True
    )
    assert (info["asserts_passed"], info["asserts_total"], r_partial) == (3, 6, 0.5)
    ((r_binary, _, _),) = run_episodes("auto", lambda m, rng: submit_text(code), ["HumanEval/53"])
    assert r_binary == 0.0


def test_multi_turn_python_tool_then_fenced_submission():
    ((reward, terminated, info),) = run_episodes("auto", canonical_fenced, ["HumanEval/12"])
    assert (reward, terminated, info["passed"]) == (1.0, True, True)
    env = gym.make("agent_rl/CodeExec-v0")
    try:
        obs, info0 = env.reset(options={"task": "HumanEval/12"})
        assert [t["function"]["name"] for t in info0["tools"]] == ["python", "submit"]
        messages = list(obs)
        action = canonical_fenced(messages)
        obs, reward, terminated, truncated, info1 = env.step(action)
        assert obs[0]["role"] == "tool" and obs[0]["content"] == "defined longest"
        assert (reward, terminated, truncated, info1["action_valid"]) == (0.0, False, False, True)
        assert info1["state_key"] != info0["state_key"]
    finally:
        env.close()


def test_do_nothing_scores_zero_and_is_truncated():
    ((reward, terminated, info),) = run_episodes("auto", do_nothing, ["HumanEval/0"])
    assert (reward, terminated, info["submitted"], info["action_valid"]) == (0.0, False, False, False)


def test_splits_are_disjoint_deterministic_and_enumerable():
    train, val, test = ({t.task_id for t in tasks(s)} for s in ("train", "val", "test"))
    assert not train & test and not train & val and not val & test
    assert len(train | val | test) == len(tasks("all")) == 164
    assert (len(train), len(val), len(test)) == (116, 10, 38)
    env = CodeExecEnv(split="test")
    seen = {env.reset(seed=10_000 + i)[1]["task_id"] for i in range(38)}
    assert seen == test  # consecutive seeds enumerate the split
    with pytest.raises(ValueError, match="unknown split 'dev'; known: train, val, test, all"):
        CodeExecEnv(split="dev")
    env.close()


@pytest.mark.docker
def test_infrastructure_failure_raises_not_zero():
    from sandbox import make_sandbox

    broken = make_sandbox(backend="docker", image="agent-rl-no-such-image:0", pool_size=1)  # cannot start
    task = by_id()["HumanEval/0"]
    with pytest.raises(SandboxInfraError, match="no-such-image"):
        asyncio.run(grade(broken, task, task.reference))


def test_the_nonce_thief_wins_only_against_a_dumpable_grader(backend, monkeypatch):
    """The steal_nonce hack is real: without ``harden()`` it reads the nonce and the asserts from
    the grader's memory and passes; with it, it scores 0 (as in test_reward_hacking_scores_zero)."""
    from pathlib import Path

    import envs.code_exec.harness as harness
    from sandbox import make_sandbox

    yama = Path("/proc/sys/kernel/yama/ptrace_scope")
    if yama.exists() and yama.read_text().strip() != "0":
        pytest.skip("Yama restricts ptrace here: /proc/<grader>/mem is closed even to a dumpable grader")
    task = by_id()["HumanEval/0"]
    hack = HACKS["steal_nonce"](task)
    hardened = asyncio.run(grade(make_sandbox(backend=backend), task, hack, timeout_s=5.0))
    monkeypatch.setattr(harness, "RUNNER", harness.RUNNER.replace("ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)", "pass"))
    dumpable = asyncio.run(grade(make_sandbox(backend=backend), task, hack, timeout_s=5.0))
    assert (hardened.passed, dumpable.passed) == (False, True)


def test_files_do_not_leak_from_one_episode_to_the_next():
    env = CodeExecEnv()
    write = (
        '<tool_call>{"name": "python", "arguments": {"code": "open(\'note.txt\', \'w\').write(\'hi\')"}}</tool_call>'
    )
    read = '<tool_call>{"name": "python", "arguments": {"code": "import os; print(os.path.exists(\'note.txt\'))"}}</tool_call>'
    try:
        env.reset(seed=0)
        env.step(write)
        assert env.step(read)[0][0]["content"] == "True"  # files persist within an episode
        env.reset(seed=0)
        assert env.step(read)[0][0]["content"] == "False"  # and not into the next one
    finally:
        env.close()


SABOTAGE = {  # lines a policy could prepend to take its failing episode out of training
    "sigint_to_executor": "import os, signal\nos.kill(1, signal.SIGINT)\n",
    "symlink_target_not_utf8": "import os\nos.symlink(b'\\xff\\xfe-target', b'badlink')\n",
    "lowers_executor_cpu_limit": "import resource\ntry:\n    resource.prlimit(1, resource.RLIMIT_CPU, (0, 0))\n"
    "except OSError:\n    pass\n",
}


@pytest.mark.parametrize("name", sorted(SABOTAGE))
def test_a_wrong_solution_that_sabotages_the_sandbox_scores_zero(backend, name):
    """Prepended to a wrong solution, none of these turns the grade into an InfraError: it is 0."""
    from sandbox import make_sandbox

    task = by_id()["HumanEval/0"]
    wrong = SABOTAGE[name] + f"def {task.entry_point}(*args, **kwargs):\n    return None\n"
    sb = make_sandbox(backend=backend, timeout_s=5.0, memory_mb=256)
    try:
        result = asyncio.run(grade(sb, task, wrong, timeout_s=5.0))
        assert not result.passed
        assert asyncio.run(grade(sb, task, task.reference, timeout_s=5.0)).passed
    finally:
        asyncio.run(sb.close())

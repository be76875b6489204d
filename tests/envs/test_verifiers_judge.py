"""A verifiers taskset scored by an LLM judge (examples/verifiers_judged) through `agent-rl eval`: the
judge is this project's own OpenAI-compatible server (`agent-rl serve`'s app over a scripted policy,
on loopback), named by env.options.judge_base_url and judge_model, and the reward is its verdict.
A judge that is needed and not named, half named, named for a taskset without one, or at the
policy's own address: one line each."""

from __future__ import annotations

import json
import re
import sys

import gymnasium as gym
import pytest

import envs  # noqa: F401 - registers agent_rl/Verifiers-v0
from agent_rl.proxy.app import create_app
from agent_rl.proxy.serve import service_over
from agent_rl.rollout.backends.scripted import ScriptedBackend
from agent_rl.rollout.backends.server import build_state, serve_in_thread
from envs.verifiers.judges import _cache_file, _key, judge_overrides, taskset_judges
from envs.verifiers.program import VerifiersError, run, venv_python
from tests import cli_runner
from tests.conftest import ROOT, cli_env

CONFIG = "examples/verifiers_judged/config.yaml"
# the taskset's questions (examples/verifiers_judged/verifiers_judged/taskset.py), by task index
QUESTIONS = ["Name a fruit that is yellow.", "Name an animal that lives in the sea."]


def _eval(tmp_path, *overrides: str, env: dict[str, str] | None = None):
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    argv = [sys.executable, "-m", "agent_rl.cli", "eval", CONFIG, *overrides]
    return cli_runner.run(argv, tmp_path, cli_env() | (env or {}), timeout=600)


def test_verifiers_judge_named_in_the_options_scores_the_episodes(tmp_path, tiny_model_dir, tiny_tokenizer):
    shown = []

    def judge(messages: list[dict], rng) -> str:  # the verdict follows the question, whatever the response
        shown.append(messages[-1]["content"])
        return "yes" if f"Question: {QUESTIONS[0]}\n" in messages[-1]["content"] else "no"

    state = build_state(str(tiny_model_dir), served_name="judge-model", backend=ScriptedBackend(judge, tiny_tokenizer))
    # the judge's server wants a key: the one in the variable env.options.judge_api_key_var names
    with serve_in_thread(create_app(service_over(state), state, api_key="judge-key-7")) as url:
        done = _eval(
            tmp_path, f"model.path={tiny_model_dir}", "env.options.num_tasks=2",
            "eval.policy=examples.verifiers_judged.policies:banana", f"env.options.judge_base_url={url}",
            "env.options.judge_model=judge-model", "env.options.judge_api_key_var=TEST_JUDGE_KEY",
            env={"TEST_JUDGE_KEY": "judge-key-7"},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "mean@1 0.500" in done.stdout and "(tasks=2, n=2, errors=0)" in done.stdout, done.stdout
    [run_dir] = (tmp_path / "runs").glob("verifiers_judged-eval-*")
    rows = [json.loads(x) for x in (run_dir / "trajectories" / "eval.jsonl").read_text().splitlines()]
    # eval seeds 10000 and 10001: tasks 0 and 1, the same answer, the judge's two verdicts
    assert [(r["task_id"], r["reward"]) for r in rows] == [("verifiers-judged/0", 1.0), ("verifiers-judged/1", 0.0)]
    # one judge call per episode, at the named endpoint, model and key (another name would get a 404, another
    # key a 401), showing the task's question and the policy's answer
    assert sorted(shown) == [
        f"Question: {q}\nResponse: A banana.\nDoes the response answer the question? Reply yes or no."
        for q in QUESTIONS
    ]


PLUGGED = """import verifiers.v1 as vf


class PluggedData(vf.TaskData):
    answer: str


class PluggedTaskConfig(vf.TaskConfig):
    judges: vf.Judges = [vf.ReferenceJudgeConfig()]


class PluggedTask(vf.Task[PluggedData, vf.State, PluggedTaskConfig]):
    pass


class PluggedConfig(vf.TasksetConfig):
    task: PluggedTaskConfig = PluggedTaskConfig()


class PluggedTaskset(vf.Taskset[PluggedTask, PluggedConfig]):
    def load(self):
        yield PluggedTask(PluggedData(prompt="Name a fruit that is yellow.", answer="a banana"), self.config.task)


__all__ = ["PluggedTaskset"]
"""


def _served(tiny_model_dir, tiny_tokenizer, name: str, policy):
    state = build_state(str(tiny_model_dir), served_name=name, backend=ScriptedBackend(policy, tiny_tokenizer))
    return serve_in_thread(create_app(service_over(state), state))


def test_verifiers_plugged_judges_get_the_named_endpoint_too(tmp_path, tiny_model_dir, tiny_tokenizer):
    """verifiers' own reference judge, pre-plugged in the taskset's ``task.judges``, one episode through
    the program: the policy and the judge are two servers on loopback."""
    (tmp_path / "verifiers_plugged").mkdir()
    (tmp_path / "verifiers_plugged" / "__init__.py").write_text(PLUGGED)
    shown = []

    def judge(messages: list[dict], rng) -> str:
        shown.append(messages[-1]["content"])
        return "yes"

    with (
        _served(tiny_model_dir, tiny_tokenizer, "policy", lambda messages, rng: "A banana.") as policy_url,
        _served(tiny_model_dir, tiny_tokenizer, "judge-model", judge) as judge_url,
    ):
        overrides = judge_overrides("verifiers-plugged", str(tmp_path), judge_url, "judge-model", None)
        assert [(j["id"], j["base_url"], j["model"]) for j in overrides["task"]["judges"]] == [
            ("reference", judge_url, "judge-model")
        ]
        task = {"taskset": "verifiers-plugged", "path": str(tmp_path), "idx": 0, "harness": "null", "judge": overrides}
        assert run(policy_url, {"model": "policy", "task": task}) == {"reward": 1.0, "rewards": {"reference": 1.0}}
    [prompt] = shown  # the judge's one call shows the reference answer and the policy's reply
    assert "Reference answer:\n```\na banana\n```" in prompt and "Response:\n```\nA banana.\n```" in prompt


def test_verifiers_a_judge_needed_and_not_named_refuses_the_run_at_start(tmp_path, tiny_model_dir):
    done = _eval(
        tmp_path, f"model.path={tiny_model_dir}", "env.options.judge_base_url=null", "env.options.judge_model=null"
    )
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr == (
        "error: env.options.judge_base_url: the verifiers taskset 'verifiers-judged' scores with an LLM judge "
        "(task.judge); set env.options.judge_base_url and env.options.judge_model to the judge's own "
        "OpenAI-compatible endpoint (never the policy being trained)\n"
    )
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("verifiers_judged-*"))


def test_verifiers_judge_options_that_cannot_work_are_one_line():
    judged = {"taskset": "verifiers-judged", "path": "examples/verifiers_judged"}
    for options, line in [
        ({"judge_base_url": "http://127.0.0.1:8020/v1"}, "env.options.judge_model: not set, but "
         "env.options.judge_base_url is; a judge needs both"),
        ({"taskset": "verifiers-sum", "path": "examples/verifiers_sum", "judge_base_url": "http://127.0.0.1:8020/v1",
          "judge_model": "judge"}, "env.options.judge_base_url: the verifiers taskset 'verifiers-sum' declares no "
         "LLM judge (no vf.JudgeConfig in its config); leave judge_base_url and judge_model unset"),
    ]:  # fmt: skip
        with pytest.raises(ValueError) as e:
            gym.make("agent_rl/Verifiers-v0", **(judged | options))
        assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)
    # the overrides every run merges into the taskset's config: each judge it declares, at the named endpoint
    assert judge_overrides("verifiers-judged", "examples/verifiers_judged", "http://127.0.0.1:8020/v1", "judge",
                           "JUDGE_KEY") == {"task": {"judge": {"base_url": "http://127.0.0.1:8020/v1", "model": "judge",
                                                               "api_key_var": "JUDGE_KEY"}}}  # fmt: skip


def test_verifiers_a_judge_at_the_policys_own_address_is_refused():
    judge = {"task": {"judge": {"base_url": "http://127.0.0.1:8123/v1", "model": "policy"}}}
    task = {"model": "policy", "task": {"taskset": "verifiers-judged", "path": "examples/verifiers_judged", "idx": 0,
                                        "harness": "null", "judge": judge}}  # fmt: skip
    with pytest.raises(VerifiersError) as e:
        run("http://127.0.0.1:8123/e/0a1b/v1", task)  # the capture proxy's session of the episode
    assert str(e.value) == (
        "env.options.judge_base_url: http://127.0.0.1:8123/v1 is the policy's own endpoint (the capture proxy at "
        "http://127.0.0.1:8123); a judge needs its own server"
    )
    assert re.fullmatch(r"[^\n]+", str(e.value))


def test_verifiers_a_tasksets_judges_are_read_once_until_it_changes(tmp_path):
    python = venv_python()
    (tmp_path / "verifiers_mine").mkdir()
    source = tmp_path / "verifiers_mine" / "__init__.py"
    source.write_text("import verifiers.v1 as vf\n")
    key = _key(python, "verifiers-mine", tmp_path)
    assert _key(python, "verifiers-mine", tmp_path) == key and _key(python, "verifiers-other", tmp_path) != key
    cached = _cache_file(python, "verifiers-mine", tmp_path)
    assert _cache_file(python, "verifiers-other", tmp_path) != cached
    cached.parent.mkdir(exist_ok=True)
    cached.write_text(json.dumps({"key": key, "judges": {"task.judge": {"model": "read from the cache"}}}))
    try:  # what was found before is read back, without importing the taskset again
        assert taskset_judges("verifiers-mine", str(tmp_path)) == {"task.judge": {"model": "read from the cache"}}
        source.write_text(PLUGGED)  # a changed package is read again ...
        assert _key(python, "verifiers-mine", tmp_path) != key
        found = taskset_judges("verifiers-mine", str(tmp_path))
        assert list(found) == ["task.judges"]
        # ... and its answer replaces the entry in the same file: nothing piles up
        assert json.loads(cached.read_text()) == {"key": _key(python, "verifiers-mine", tmp_path), "judges": found}
    finally:
        cached.unlink()

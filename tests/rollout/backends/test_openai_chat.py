"""The ``openai_chat`` backend (evaluation only) against a local /v1/chat/completions server: the
capture proxy itself, over a scripted policy that solves Arithmetic-v0 with the python tool."""

from __future__ import annotations

import re

import pytest

from agent_rl.config import load_config
from tests.conftest import ROOT
from tests.proxy.conftest import running_proxy


def solver(messages: list[dict], rng) -> str:
    """Call python on the question's expression; after its result, answer it."""
    if messages[-1]["role"] == "tool":
        return f"<answer>{messages[-1]['content'].strip()}</answer>"
    [expression] = re.findall(r"What is ([0-9+\-*]+)\?", messages[-1]["content"])
    return f'<tool_call>\n{{"name": "python", "arguments": {{"code": "print({expression})"}}}}\n</tool_call>'


@pytest.fixture(scope="module")
def chat_server(tiny_model_dir, tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend

    with running_proxy(tiny_model_dir, ScriptedBackend(solver, tiny_tokenizer), max_new_tokens=64) as (url, service):
        yield url, service


def test_eval_scores_a_chat_endpoint_on_an_env(chat_server, tiny_model_dir, tmp_path):
    """The env's calls go out as tool_calls, the python results come back by id, and the
    endpoint's calls reach the env in its own format: every task is solved in two turns."""
    from agent_rl.commands.eval import run_eval

    url, service = chat_server
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.path={tiny_model_dir}",
            "rollout.backend.name=openai_chat",
            f"rollout.backend.base_url={url}",
            "rollout.backend.api_key_env=null",
            "eval.episodes=6",
            f"run.dir={tmp_path}",
            "tracking.loggers=[]",
        ],
    )
    result, _ = run_eval(cfg, log=lambda *a, **k: None)
    assert (result.success, result.episodes, result.multi_turn) == (1.0, 6, 1.0)
    assert service.metrics["proxy/calls"] >= 12


def test_training_with_it_is_refused(tiny_model_dir):
    from agent_rl.rollout.backends import make_backend

    cfg = load_config(None, [f"model.path={tiny_model_dir}", "rollout.backend.name=openai_chat"])
    with pytest.raises(ValueError, match="openai_chat is evaluation-only"):
        make_backend(cfg.rollout.backend, cfg.model, model=object())


def test_the_documented_command_scores_a_local_endpoint(chat_server, tiny_model_dir, tmp_path):
    """docs/agent-programs.md's openai_chat command, as written, from a clean directory, with the
    page's placeholders (HOST, NAME) filled by this local endpoint and a small budget appended."""
    import json
    import shlex
    import sys

    from tests import cli_runner
    from tests.conftest import cli_env
    from tests.test_docs_commands import documented_commands

    url, service = chat_server
    [command] = [c for c in documented_commands("docs/agent-programs.md") if "openai_chat" in c]
    command = command.replace("https://HOST/v1", url).replace("=NAME", f"={service.model_names[0]}")
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "runs" / "models").mkdir(parents=True)
    (tmp_path / "runs" / "models" / "tiny").symlink_to(tiny_model_dir)  # the page's `init-model` output
    argv = [
        sys.executable,
        "-m",
        "agent_rl.cli",
        *shlex.split(command)[1:],
        "eval.episodes=4",
        "run.dir=runs/chat_eval",
    ]
    env = {**cli_env(), "OPENAI_API_KEY": "unused-by-a-local-server"}
    done = cli_runner.run(argv, tmp_path, env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "runs" / "chat_eval" / "eval.json").read_text())
    assert result["success"] == 1.0 and result["episodes"] == 4, result

"""Every command in README.md and docs/ is run by a test, as written, from a clean directory.

``documented_commands`` reads each page's fenced shell blocks (continuation lines joined, comments
dropped). ``DOC_TESTS`` names, for every page that holds a command, the test module that runs that
page's blocks; the ledger test fails on a page with commands that no test module runs, and on a
module that does not read its page. The pages no other module runs are run here, with budget
overrides appended to the long commands (the last value of a key wins).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_runner
from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[1]
# what a documented shell line starts with (.venv/bin/python: the project's own interpreter, from the root)
PROGRAMS = {"agent-rl", "python", ".venv/bin/python", "make", "ray"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "text"}

# page -> the test module that runs its commands as written
DOC_TESTS = {
    "README.md": "tests/test_docs_commands.py",
    "bench/results/credit_assignment/README.md": "tests/test_compare.py",
    "bench/results/credit_prereg_frozenlake/README.md": "tests/test_credit_bench.py",
    "bench/results/credit_prereg_hanoi/README.md": "tests/test_credit_bench.py",
    "bench/results/load/20261207/README.md": "tests/bench/test_load.py",
    "docs/adding-an-environment.md": "tests/test_adding_an_environment.py",
    "docs/agent-programs.md": "tests/proxy/test_agent_programs_doc.py",
    "docs/bfcl.md": "tests/test_bfcl_doc.py",
    "docs/code-exec.md": "tests/test_docs_commands.py",
    "docs/distillation.md": "tests/test_distillation_doc.py",
    "docs/distributed.md": "tests/test_docs_commands.py",
    "docs/ecosystem.md": "tests/envs/test_openenv_doc.py",
    "docs/model-families.md": "tests/test_docs_commands.py",
    "docs/preference.md": "tests/test_preference_doc.py",
    "docs/sandbox.md": "tests/test_docs_commands.py",
    "docs/swe.md": "tests/envs/test_swe_doc.py",
    "docs/text-games.md": "tests/test_text_games_doc.py",
    "docs/vllm.md": "tests/rollout/backends/test_vllm_serve.py",
}


def _program(line: str) -> str | None:
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value prefixes
        words = words[1:]
    return words[0] if words else None


def _shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks tagged as shell, or not tagged, in document order."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                if lang in SHELL_LANGS:
                    blocks.append("\n".join(body))
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def documented_commands(page: str) -> list[str]:
    """The shell commands of ``page``'s fenced blocks, one string each, comments removed."""
    commands = []
    for block in _shell_blocks((ROOT / page).read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            try:
                program = _program(line)
            except ValueError:  # not shell (an unbalanced quote in a code sample)
                continue
            if program in PROGRAMS:
                commands.append(shlex.join(shlex.split(line, comments=True)) if "#" in line else " ".join(line.split()))
    return commands


def _pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_every_page_with_commands_has_a_test_that_runs_them():
    missing = [p for p in _pages() if documented_commands(p) and p not in DOC_TESTS]
    assert not missing, f"commands in {missing} are run by no test: add a test and list it in DOC_TESTS"
    for page, module in DOC_TESTS.items():
        assert documented_commands(page), f"{page} holds no command any more: drop it from DOC_TESTS"
        assert Path(page).name in (ROOT / module).read_text(), f"{module} does not read {page}"


def _deprecated_keys(model=None, prefix: str = "") -> set[str]:
    """The config keys whose description starts with "deprecated" (they still work, with a note)."""
    from pydantic import BaseModel

    from agent_rl.config import Config

    keys = set()
    for name, field in (model or Config).model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= _deprecated_keys(field.annotation, f"{prefix}{name}.")
        elif (field.description or "").lower().startswith("deprecated"):
            keys.add(prefix + name)
    return keys


def test_no_documented_command_uses_a_deprecated_key():
    deprecated = _deprecated_keys()
    assert "tracking.tensorboard" in deprecated  # the walk reaches the nested sections
    used = [
        (page, word)
        for page in [*_pages(), *DOC_TESTS]
        for command in documented_commands(page)
        for word in shlex.split(command, comments=True)
        if word.split("=", 1)[0] in deprecated
    ]
    assert not used, f"documented commands use deprecated config keys (use what their description says): {used}"


def _run(command: str, cwd: Path, *extra: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """``command`` as written (``agent-rl`` and ``python`` through this interpreter, in a process forked
    from one that imported the project: tests/cli_runner.py), ``extra`` appended."""
    words = shlex.split(command, comments=True)
    env = {**cli_env(), "PYTHONPATH": str(ROOT)}
    while re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    done = cli_runner.run([*words, *extra], cwd, env, timeout)  # agent-rl, python: a child of a preloaded server
    assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def _scratch(tmp_path: Path) -> Path:
    """A clean directory with the repository's configs/ and bench/ where a user's checkout has them."""
    for name in ("configs", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def test_readme_commands_are_the_makefile_targets_ci_runs():
    """README's two commands: `make test` is what .ci/run calls; `make demo` runs `agent-rl
    quickstart`, which tests/test_cli.py::test_quickstart_tiny_budget runs with a tiny budget."""
    assert documented_commands("README.md") == ["make demo", "make test"]
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \$\(STAMP\)\n\t\$\(VENV\)/bin/agent-rl quickstart$", makefile, re.MULTILINE)
    assert "def test_quickstart_tiny_budget" in (ROOT / "tests" / "test_cli.py").read_text()


def test_model_families_commands(tmp_path):
    import json

    from agent_rl.models.loading import load_tokenizer

    (command,) = documented_commands("docs/model-families.md")
    _run(command, _scratch(tmp_path))
    out = tmp_path / "runs" / "models" / "tiny-llama3"
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert "<|eot_id|>" in load_tokenizer(str(out)).get_added_vocab()


@pytest.mark.docker
@pytest.mark.slow
def test_code_exec_commands(tmp_path):
    init, evaluate = documented_commands("docs/code-exec.md")
    cwd = _scratch(tmp_path)
    _run(init, cwd)
    done = _run(evaluate, cwd, "eval.episodes=6", "eval.k=2")  # the page's 164 x 8, cut to 6 x 2
    assert re.search(r"pass@2 1\.000", done.stdout), done.stdout[-2000:]


@pytest.mark.docker
def test_sandbox_commands(tmp_path):
    build, doctor, bench = documented_commands("docs/sandbox.md")
    assert shlex.split(build) == ["agent-rl", "sandbox", "build-image", "[--force]"]
    cwd = _scratch(tmp_path)
    _run("agent-rl sandbox build-image", cwd)  # "[--force]": the optional flag, left out
    assert "docker" in _run(doctor, cwd).stdout
    words = shlex.split(bench, comments=True)
    assert words == ["python", "bench/sandbox_latency.py"]
    # the bench's budget cut down; it exits 1 when a ratio misses its target on a loaded machine
    env = {**cli_env(), "PYTHONPATH": str(ROOT)}
    small = ["--rounds", "3", "--cold-rounds", "1", "--seconds", "0.5", "--callers", "2"]
    done = cli_runner.run([sys.executable, *words[1:], *small], cwd, env, timeout=600)
    assert done.returncode in (0, 1) and "docker exec" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.distributed
def test_distributed_ray_cluster_commands(tmp_path):
    """docs/distributed.md's cluster: a head node with 8 GPUs (here the head alone), then the driver."""
    head, worker, train = documented_commands("docs/distributed.md")
    assert head.startswith("ray start --head") and worker.startswith("ray start --address=HEAD_IP")
    cwd = _scratch(tmp_path)
    ray = str(Path(sys.executable).with_name("ray"))  # the environment's own ray command
    subprocess.run([ray, *shlex.split(head)[1:]], check=True, timeout=120)
    try:
        model = cwd / "runs" / "models" / "tiny"
        _run(f"agent-rl init-model tiny --out {model}", cwd)
        _run(
            train.replace("/shared/models/my-sft", str(model)),
            cwd,
            "trainer.steps=2",
            "distributed.ray.num_rollout_workers=1",
            # the page's cluster has GPUs; this machine's torch has no CUDA (the head only advertises them)
            "distributed.ray.gpus_per_worker=0",
        )
    finally:
        subprocess.run([ray, "stop", "--force"], timeout=120)

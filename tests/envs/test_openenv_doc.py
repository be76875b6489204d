"""docs/ecosystem.md, run as written from a user's directory (the repository's examples/ and the OpenEnv
venv beside it): the lock's own server and client, then `agent-rl eval` (oracle 1.000, wrong 0.000)
and a 2-step `agent-rl train` on both OpenEnv examples."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest

from envs.openenv.server import REQUIREMENTS
from envs.openenv.venv import ensure_venv, venvs_dir
from tests import cli_runner
from tests.conftest import ROOT, cli_env
from tests.envs.conftest import INIT_TINY

GUIDE = ROOT / "docs" / "ecosystem.md"


def commands(block: int = 0) -> list[str]:
    """The lines of the page's ``block``-th bash block (0: OpenEnv's, 1: verifiers')."""
    blocks = re.findall(r"^```bash\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 2
    return [line for line in blocks[block].splitlines() if line.strip()]


def make_venv(name: str, build: Callable[[], object]) -> None:
    """`make NAME-venv` where the Makefile's .venv exists (CI, `make setup`); elsewhere ``build``, the
    call the target makes."""
    if (ROOT / ".venv" / ".installed").is_file():
        done = subprocess.run(["make", f"{name}-venv"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    else:
        build()


def _run_lines(lines: list[str], tmp_path, models) -> list[str]:
    """``lines`` of the page's block run in ``tmp_path`` in order; what each printed (stdout + stderr). The
    ``agent-rl init-model`` line ran once for all of the page's tests: its ``models``, linked here."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "runs" / "venvs").mkdir(parents=True)
    (tmp_path / "runs" / "venvs" / "openenv").symlink_to(venvs_dir() / "openenv")
    server, outputs = None, []
    try:
        for line in lines:
            words = shlex.split(line.rstrip("& "))
            if line == INIT_TINY:
                (tmp_path / "runs" / "models").symlink_to(models, target_is_directory=True)
                outputs.append("")
            elif words == ["make", "openenv-venv"]:
                make_venv("openenv", lambda: ensure_venv("openenv", REQUIREMENTS))
            elif line.endswith("&"):  # the lock's server, openenv's own, in the background
                server = subprocess.Popen(words, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and server.poll() is None:
                    try:
                        if httpx.get("http://127.0.0.1:8011/health", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.2)
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
            elif words[0].startswith("runs/venvs/openenv"):
                done = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, done.stderr[-2000:]
                outputs.append(done.stdout + done.stderr)
            else:
                argv = [sys.executable, "-m", "agent_rl.cli", *words[1:]] if words[0] == "agent-rl" else words
                done = cli_runner.run(argv, tmp_path, cli_env(), timeout=400)
                assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
                outputs.append(done.stdout + done.stderr)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return outputs


def _check_example(name: str, oracle: str, wrong: str, train: str) -> None:
    assert "mean@1 1.000 [1.000, 1.000]  pass@1 1.000" in oracle and "(tasks=4, n=4, errors=0)" in oracle, name
    assert "mean@1 0.000 [0.000, 0.000]  pass@1 0.000" in wrong and "(tasks=4, n=4, errors=0)" in wrong, name
    assert "train done: 2 step(s)" in train and "hint: RL cannot learn here" in train, (name, train[-1500:])
    assert re.search(r"train step 2/2 \| reward 0\.000", train), train[-1500:]


SHARED = ("make openenv-venv", INIT_TINY)


@pytest.mark.slow
def test_openenv_ecosystem_commands_the_lock_served_by_uvicorn(tmp_path, ecosystem_models):
    """The page's commands but the vault's: openenv's server and EnvClient, then the lock by base_url."""
    lines = [line for line in commands() if "openenv_vault" not in line]
    assert len(lines) == 7 and lines[0] == SHARED[0] and lines[3] == SHARED[1]
    client, _, oracle, wrong, train = _run_lines(lines, tmp_path, ecosystem_models)
    assert client.startswith("reward 1.0\n")  # openenv's EnvClient against the lock's server
    _check_example("lock", oracle, wrong, train)


@pytest.mark.slow
def test_openenv_ecosystem_commands_the_vault_served_by_the_env(tmp_path, ecosystem_models):
    """The page's shared set-up and the vault's commands (its server started by the env, each time)."""
    vault = [line for line in commands() if "openenv_vault" in line]
    assert len(vault) == 3 and len(commands()) == 10
    _, oracle, wrong, train = _run_lines([*SHARED, *vault], tmp_path, ecosystem_models)
    _check_example("vault", oracle, wrong, train)

"""Virtual environments of their own, for ecosystems whose pins clash with this project's.

openenv 0.10.0 needs ``fastmcp`` 3.x, which needs ``mcp<2``; verifiers 0.4.0 pins ``mcp==2.0.0``; this
project needs ``mcp>=2.3``. pip cannot put either in the project's environment (ResolutionImpossible),
so each gets a venv built from a requirements file with every version pinned, on first use or by its
make target, under ``runs/venvs/<name>`` of the checkout (``AGENT_RL_VENVS`` moves it). The venv is
rebuilt when its requirements file changes (the stamp holds the file's hash); a lock keeps two
processes (two test workers) from building it at once.

uv builds it (a dependency of this project; ``uv venv``, then ``uv pip install --compile-bytecode``):
9 s for openenv's and 14 s for verifiers' with uv's cache warm, where pip took 28-30 s and 39-88 s on
this busy 2-core machine (pip's own cache kept no downloads). The bytecode is compiled at install because the
processes these venvs run may never write it (``PYTHONDONTWRITEBYTECODE``), and ``import verifiers.v1``
takes twice as long without it. The venvs hold no pip: ``uv pip install --python VENV/bin/python ...``
adds a package to one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def venvs_dir() -> Path:
    """Where the ecosystems' venvs live: ``AGENT_RL_VENVS``, else ``runs/venvs`` of the checkout."""
    return Path(os.environ.get("AGENT_RL_VENVS") or ROOT / "runs" / "venvs")


def uv_binary() -> str | None:
    """uv: the one installed beside this python (pip puts the ``uv`` package's binary there), else on ``PATH``."""
    here = Path(sysconfig.get_path("scripts")) / "uv"
    return str(here) if here.is_file() else shutil.which("uv")


def ensure_venv(name: str, requirements: Path, *, post_install: list[list[str]] = (), quiet: bool = True) -> Path:
    """The python of venv ``name`` built from ``requirements``; builds it when missing or stale.

    ``post_install``: commands run with that python after the install (``["-m", "x", ...]``; the venv's
    ``bin`` first on ``PATH``), e.g. warming a cache. A failed build raises ``ValueError`` with one line naming the make target, which
    builds with ``quiet=False`` (uv's whole output on the terminal)."""
    venv = venvs_dir() / name
    python = venv / "bin" / "python"
    want = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / ".installed"
    if stamp.is_file() and stamp.read_text() == want:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == want:  # another process built it meanwhile
            return python
        print(f"agent-rl: building the {name} environment in {venv} (once; under a minute)", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        uv = uv_binary()
        if uv is None:
            raise ValueError(f"cannot build the {name} environment: no uv beside {sys.executable} or on PATH; "
                             "pip install 'uv>=0.13.9,<0.14' (a dependency of agent-rl)")  # fmt: skip
        base = getattr(sys, "_base_executable", None) or sys.executable
        q = ["-q"] if quiet else []
        steps = [
            [uv, "venv", *q, "--python", base, str(venv)],
            [uv, "pip", "install", *q, "--python", str(python), "--compile-bytecode", "-r", str(requirements)],
        ]
        steps += [[str(python), *cmd] for cmd in post_install]
        # as if activated; COLUMNS: uv wraps its messages at the terminal's width (pytest's workers set 80)
        env = dict(os.environ, PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}", COLUMNS="100000")
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=quiet, text=True, stdin=subprocess.DEVNULL, env=env)
            if done.returncode != 0:
                why = failure_line((done.stderr or done.stdout or "") if quiet else "", done.returncode)
                raise ValueError(
                    f"cannot build the {name} environment in {venv}: `{Path(cmd[0]).name} {' '.join(cmd[1:3])} ...` "
                    f"failed: {why}; run `make {name}-venv` to see the whole output"
                )
        stamp.write_text(want)
    return python


def failure_line(output: str, code: int) -> str:
    """One line of why a build step failed: uv's ``error:`` (with the lines a narrow terminal wrapped it
    onto) and the first line of its first ``cause:``, else the last line (a Python traceback's exception),
    else the exit code."""
    lines = [x.strip() for x in output.splitlines() if x.strip() and "WARNING" not in x]
    start = next((i for i, x in enumerate(lines) if x.startswith("error:")), None)
    if start is None:
        return lines[-1] if lines else f"exit code {code}"
    error = [lines[start].removeprefix("error:").strip()]
    for x in lines[start + 1 :]:
        if x.startswith(("cause:", "hint:", "error:")):
            break
        error.append(x)
    cause = next((x.removeprefix("cause:").strip() for x in lines[start:] if x.startswith("cause:")), None)
    return f"{' '.join(error)}: {cause}" if cause else " ".join(error)

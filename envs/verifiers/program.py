"""A verifiers taskset as an agent program (``agent.program: envs.verifiers.program:run``).

Each episode is one ``vf-eval`` run of one task (``--select.include.idx``) in verifiers' own venv
(``runs/venvs/verifiers``, ``envs/verifiers/requirements.txt``, built on first use or by ``make
verifiers-venv``), with the harness's model calls sent to the capture proxy's session of that
episode (``base_url``), so the proxy records the exact ids the policy sampled. Set as verifiers'
users are warned to set it: the runtime is local (``subprocess``), nothing is pushed (``--no-push``),
the harness's uv is the venv's (pinned) and its script's packages were cached when the venv was
built (``envs/verifiers/warm_uv.py``). ``agent.reward: envs.verifiers.program:reward`` makes the
episode's reward the taskset's weighted reward (the sum of score x weight over its ``@vf.reward``s).

A taskset whose rubric calls an LLM judge gets the judge's endpoint from the env's options, never the
policy's (``envs/verifiers/judges.py``): each run merges the task's ``judge`` overrides into the
taskset's config (``--env.taskset @ judge.json``) and refuses a judge at the capture proxy's own address.

A taskset that raises, a trace with errors or a run that fails ends the episode in one line
(``VerifiersError``: an agent error, never trained on).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from envs.openenv.venv import ensure_venv

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
WARM = HERE / "warm_uv.py"
TIMEOUT_S = 600.0  # one vf-eval run, its start included (env.options.timeout_s)


class VerifiersError(RuntimeError):
    """The taskset or verifiers failed (not the policy): one line saying which task and why."""


def venv_python() -> Path:
    """The verifiers venv's python, built (and its uv cache warmed) on first use."""
    return ensure_venv("verifiers", REQUIREMENTS, post_install=[[str(WARM)]])


def _command(base_url: str, task: dict[str, Any], out: str) -> list[str]:
    t = task["task"]
    judge = []
    if t.get("judge"):  # the judges' endpoint, merged into the taskset's config
        (Path(out) / "judge.json").write_text(json.dumps(t["judge"]))
        judge = ["--env.taskset", "@", str(Path(out) / "judge.json")]
    return [
        str(venv_python().parent / "vf-eval"), t["taskset"],
        "--select.include.idx", str(t["idx"]), "-n", "1", "--max-concurrent", "1",
        "--model", task["model"], "--client.base-url", base_url, "--client.api-key-var", "AGENT_RL_PROXY_KEY",
        "--env.agent.runtime.type", "subprocess", "--env.agent.harness.id", t["harness"],
        "--no-push", "--no-rich", "-o", out, *judge,
    ]  # fmt: skip


def run(base_url: str, task: dict[str, Any]) -> dict[str, Any]:
    """One task of the taskset against the proxy at ``base_url``; its rewards (``{"reward", "rewards"}``)."""
    t = task["task"]
    _check_not_the_policy(t.get("judge") or {}, base_url)
    env = environ(t["path"]) | {"AGENT_RL_PROXY_KEY": "unused", "UV_PYTHON_DOWNLOADS": "never"}
    with tempfile.TemporaryDirectory(prefix="vf-") as out:
        done = _run_group(_command(base_url, task, out), env, timeout_s=float(t.get("timeout_s", TIMEOUT_S)))
        where = f"verifiers taskset '{t['taskset']}' task {t['idx']}"
        rows = [json.loads(x) for f in Path(out).glob("*/traces.jsonl") for x in f.read_text().splitlines() if x]
        if done.returncode != 0 or not rows:
            lines = [x for x in done.stderr.splitlines() if x.strip()]
            raise VerifiersError(f"{where}: vf-eval exited {done.returncode}: {lines[-1] if lines else 'no output'}")
    trace = rows[0]["traces"][0] if rows[0].get("traces") else None
    errors = (trace or {}).get("errors") or rows[0].get("errors")
    if trace is None or errors:
        raise VerifiersError(f"{where}: {_error_line(errors)}")
    return weighted_reward(trace.get("rewards") or {})


def environ(path: str) -> dict[str, str]:
    """This process's environment with the verifiers venv's ``bin`` first on ``PATH`` and the taskset's
    directory on ``PYTHONPATH`` (its package is imported from there)."""
    bin_dir = str(venv_python().parent)
    pythonpath = os.pathsep.join([str(Path(path).resolve()) if path else "", os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=pythonpath)


def _check_not_the_policy(judge: dict[str, Any], base_url: str) -> None:
    """A judge at the capture proxy's address (scheme, host and port) would be the policy judging itself."""
    policy = urlsplit(base_url)
    for url in _urls(judge):
        if urlsplit(url)[:2] == policy[:2]:
            raise VerifiersError(
                f"env.options.judge_base_url: {url} is the policy's own endpoint (the capture proxy at "
                f"{policy.scheme}://{policy.netloc}); a judge needs its own server"
            )


def _urls(node: Any) -> list[str]:
    """Every ``base_url`` in the judge overrides."""
    if isinstance(node, list):
        return [u for x in node for u in _urls(x)]
    if not isinstance(node, dict):
        return []
    own = [node["base_url"]] if isinstance(node.get("base_url"), str) else []
    return own + [u for k, v in node.items() if k != "base_url" for u in _urls(v)]


def weighted_reward(rewards: dict[str, Any]) -> dict[str, Any]:
    """A trace's ``rewards`` (name -> ``{"score", "weight"}``, None when not scored) as verifiers sums
    them: ``reward`` = sum of score x weight, and each score."""
    scored = {k: v for k, v in rewards.items() if v is not None}
    total = sum(float(v["score"]) * float(v.get("weight", 1.0)) for v in scored.values())
    return {"reward": total, "rewards": {k: v["score"] for k, v in scored.items()}}


def _run_group(cmd: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """``cmd`` in a process group of its own, all of it killed past ``timeout_s`` or when interrupted
    (vf-eval starts the harness's program and the toolsets' servers: nothing of it outlives the episode)."""
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise VerifiersError(f"vf-eval ran past {timeout_s:g} s (env.options.timeout_s) and was stopped") from None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _error_line(errors: Any) -> str:
    first = errors[0] if isinstance(errors, list) and errors else errors
    if isinstance(first, dict):
        return f"{first.get('type') or first.get('error_type') or 'error'}: {first.get('message') or first}"
    return str(first or "no trace")


def reward(task: dict[str, Any], answer: dict[str, Any]) -> float:
    """``agent.reward``: the taskset's weighted reward of the episode."""
    return float(answer["reward"])

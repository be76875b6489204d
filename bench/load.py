"""Load: many episodes at once, each ending as it must, and what they weigh (issue 58, item 3).

Two parts, each one ``agent-rl eval`` run of a scripted policy (``eval.policy``: the engine, the
env factory and the sandbox a training run uses, with a scripted backend in place of the model),
every episode in flight at once (``rollout.concurrency`` = the episodes):

- ``code``: ``--docker N`` episodes of ``agent_rl/CodeExec-v0`` (HumanEval) on the ``--backend``
  sandbox (docker). ``code_policy`` plays one of ``CODE_KINDS`` per task (the task's index picks
  it): the reference solution (once after a python call that runs past the tool's time limit),
  the prompt alone (returns None), code that raises, a grader killer, a loop past the tests' time
  limit, or no submission at all. ``CODE_EXPECTED`` says how each must end.
- ``twx``: ``--jvm N`` episodes of ``agent_rl/TextWorldExpress-v0`` (``configs/twx_coin.yaml``), one
  JVM each. ``twx_policy`` plays the gold path, ``look around`` or an unknown command (the game's
  tag picks which); ``TWX_EXPECTED`` says how each must end.

Each episode's stop reason, reward and (code) the grader's sandbox status must equal what its kind
expects, and no episode may be lost or end in an env or infrastructure error. Every ``--interval``
seconds the run's memory is sampled: the resident memory of its process tree (the eval process,
its JVMs, any sandbox process) and of the containers it owns (their memory cgroups: usage less
inactive file pages, as ``docker stats`` counts). Per episode: the peak total over the episodes.
After the run, nothing of it may remain: no process it started (JVMs included), no container.

    python bench/load.py [--docker 64] [--jvm 32] [--backend docker] [--interval 1] [--out DIR] [--model DIR]

Writes ``summary.json``, ``episodes.jsonl`` (one line per episode: its kind, what it expected, how
it ended) and ``<part>-samples.jsonl`` under ``--out`` (default ``bench/results/load/<time>``);
exit 1 when an episode ended otherwise than expected or something outlived the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script, or imported by the eval child (eval.policy)

from agent_rl.run.progress import script_progress  # noqa: E402 (after the path of a checkout)
from bench.soak import _parents as process_table  # noqa: E402
from bench.soak import descendants, stop  # noqa: E402
from envs.code_exec.policies import HACKS, submit_text, task_of  # noqa: E402
from envs.text_game_experts import gold_action, session, write  # noqa: E402
from envs.text_games import session_of  # noqa: E402
from tools.base import ToolCall  # noqa: E402
from tools.formats import get_format  # noqa: E402

# -- the scripted policies and what each kind of episode must end as -----------------------------
CODE_KINDS = ("solve", "slow_tool", "wrong", "raise", "kill_grader", "spin", "no_submit")
CODE_EXPECTED = {  # kind -> (stop reason, reward, the sandbox status of the grading run; None: never graded)
    "solve": ("done", 1.0, "ok"),
    "slow_tool": ("done", 1.0, "ok"),  # the python call ends as a timeout, the submission then passes
    "wrong": ("done", 0.0, "ok"),
    "raise": ("done", 0.0, "ok"),
    "kill_grader": ("done", 0.0, "killed"),
    "spin": ("done", 0.0, "ok"),  # the grader's own limit stops the tests ("timeout: the tests ran out of time")
    "no_submit": ("max_turns", 0.0, None),
}
TWX_KINDS = ("gold", "stall", "garbage")
TWX_EXPECTED = {"gold": ("done", 1.0, None), "stall": ("max_turns", 0.0, None), "garbage": ("max_turns", 0.0, None)}


HUMANEVAL = 164  # tasks of split "all"
FIRST_TASK = 10_000 % HUMANEVAL  # eval's seeds start at 10000 (agent_rl/train/evaluation.py::eval_specs)


def code_kind(task_id: str) -> str:
    """``HumanEval/i`` -> the kind of episode played on it: the kinds in turn, in the order eval's
    seeds enumerate the tasks (so any 7 episodes in a row hold every kind)."""
    position = (int(task_id.rsplit("/", 1)[1]) - FIRST_TASK) % HUMANEVAL
    return CODE_KINDS[position % len(CODE_KINDS)]


def code_policy(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    task = task_of(messages)
    kind = code_kind(task.task_id)
    fmt = get_format(tool_format)
    first_turn = not any(m["role"] == "assistant" for m in messages)
    if kind == "no_submit":
        return fmt.render_reply("I would rather not write any code.")
    if kind in ("solve", "slow_tool") and first_turn:
        code = task.reference + "\nprint('defined')\n" if kind == "solve" else "import time\ntime.sleep(30)\n"
        return fmt.render_calls([ToolCall("python", {"code": code})])
    submission = {
        "solve": task.reference,
        "slow_tool": task.reference,
        "wrong": task.prompt,
        "raise": "raise ValueError('bench/load')\n" + task.prompt,
        "kill_grader": HACKS["kill_grader"](task),
        "spin": HACKS["spin"](task),
    }[kind]
    return submit_text(submission, tool_format)


def twx_kind(task_id: str) -> str:
    """A TextWorld-Express task id -> the kind of episode played on it (by the game's tag)."""
    return TWX_KINDS[int(session_of(task_id), 16) % len(TWX_KINDS)]


def twx_policy(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    kind = TWX_KINDS[int(session(messages), 16) % len(TWX_KINDS)]
    command = {"gold": None, "stall": "look around", "garbage": "xyzzy plugh"}[kind]
    return write(command or gold_action(messages, tool_format), messages, tool_format)


# -- the parts: an eval run each -----------------------------------------------------------------
PARTS = {
    "code": (
        "configs/code_exec.yaml",
        "bench.load:code_policy",
        code_kind,
        CODE_EXPECTED,
        [
            "eval.split=all",  # seeds 10000.. enumerate HumanEval/160.. then /0..: distinct tasks
            "env.options={max_turns: 3, tool_timeout_s: 1.0, test_timeout_s: 2.0}",
            "rollout.max_turns=3",
        ],
    ),
    "twx": (
        "configs/twx_coin.yaml",
        "bench.load:twx_policy",
        twx_kind,
        TWX_EXPECTED,
        # 8 turns of `look around` with the valid actions, in the tiny model's base tokenizer: > 1600 tokens
        ["eval.split=test", "rollout.max_total_tokens=4096"],
    ),
}


def eval_command(part: str, n: int, model: str, backend: str, run_dir: Path) -> list[str]:
    config, policy, _, _, own = PARTS[part]
    return [
        sys.executable,
        "-m",
        "agent_rl.cli",
        "eval",
        config,
        f"model.path={model}",
        f"eval.policy={policy}",
        f"eval.episodes={n}",
        "eval.k=1",
        f"rollout.concurrency={n}",
        f"sandbox.backend={backend}",
        f"run.dir={run_dir}",
        "tracking.progress=false",
        "tracking.loggers=[]",
        *own,
    ]


# -- memory: the run's process tree and its containers ---------------------------------------------
def _cgroup_dir(cid: str) -> Path | None:
    for d in (
        f"/sys/fs/cgroup/memory/{cid}",  # cgroup v1, cgroup_parent "/" (sandbox/docker.py)
        f"/sys/fs/cgroup/memory/docker/{cid}",
        f"/sys/fs/cgroup/system.slice/docker-{cid}.scope",  # cgroup v2, systemd driver
        f"/sys/fs/cgroup/docker/{cid}",
    ):
        if Path(d).is_dir():
            return Path(d)
    return None


def container_mb(cli, cid: str) -> float:
    """A container's memory as ``docker stats`` counts it: usage less inactive file pages."""
    d = _cgroup_dir(cid)
    try:
        if d is None:
            stats = cli.api.stats(cid, stream=False)["memory_stats"]
            usage, stat = stats.get("usage", 0), stats.get("stats", {})
        else:
            v1 = (d / "memory.usage_in_bytes").exists()
            usage = int((d / ("memory.usage_in_bytes" if v1 else "memory.current")).read_text())
            stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
        inactive = int(stat.get("total_inactive_file", stat.get("inactive_file", 0)))
        return max(0, usage - inactive) / 2**20
    except Exception:  # noqa: BLE001 - a container removed between listing and reading: it weighs nothing now
        return 0.0


def owned_containers(cli, pid: int) -> list[str]:
    """Ids of the sandbox containers (running or not) whose owner is ``pid`` (``sandbox/docker.py`` labels)."""
    if cli is None:
        return []
    return [c["Id"] for c in cli.api.containers(all=True, filters={"label": f"agent_rl.owner_pid={pid}"})]


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next((x for x in f if x.startswith("VmRSS:")), "VmRSS: 0 kB")
        return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return 0.0


def take_sample(t0: float, pid: int, cli, seen: dict[int, str]) -> dict:
    """The run's memory now: its Python processes, its JVMs and its containers (MB), and their counts."""
    table = process_table()
    tree = [pid, *descendants(pid, table)]
    seen.update({p: table[p][1] for p in tree if p in table})
    java = [p for p in tree if table.get(p, (0, ""))[1] == "java"]
    cids = owned_containers(cli, pid)
    sample = {
        "t_s": round(time.monotonic() - t0, 2),
        "python_mb": round(sum(rss_mb(p) for p in tree if p not in java), 1),
        "jvm_mb": round(sum(rss_mb(p) for p in java), 1),
        "container_mb": round(sum(container_mb(cli, c) for c in cids), 1),
        "processes": len(tree),
        "jvms": len(java),
        "containers": len(cids),
    }
    sample["total_mb"] = round(sample["python_mb"] + sample["jvm_mb"] + sample["container_mb"], 1)
    return sample


def leftovers(pid: int, cli, seen: dict[int, str], wait_s: float = 15.0) -> list[str]:
    """What outlived the run: a process it started (a JVM whose parent died is no longer its
    descendant, so every process seen while it ran is looked for), a container it owned. Containers
    go as their pools close at exit: waited for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        table = process_table()
        alive = {p: comm for p, comm in seen.items() if p != pid and table.get(p, (0, ""))[1] == comm}
        cids = owned_containers(cli, pid)
        if (not alive and not cids) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    found = []
    if alive:
        jvms = sum(1 for c in alive.values() if c == "java")
        found.append(
            f"{len(alive)} processes ({jvms} JVMs): " + ", ".join(f"{p} ({c})" for p, c in list(alive.items())[:5])
        )
    if cids:
        found.append(f"{len(cids)} containers")
    return found


# -- one part: the eval run, sampled, then checked -----------------------------------------------
def check_episodes(part: str, run_dir: Path, n: int) -> tuple[list[dict], list[str]]:
    """One row per episode (its kind, what it expected, how it ended) and what went wrong: an episode
    lost, one that ended otherwise than its kind expects (env and infrastructure errors included)."""
    _, _, kind_of, expected, _ = PARTS[part]
    path = run_dir / "trajectories" / "eval.jsonl"
    trajectories = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    rows, problems = [], []
    for t in trajectories:
        kind = kind_of(t["task_id"])
        want = expected[kind]
        got = (t["stop_reason"], t["reward"], t["info"].get("test_status"))
        rows.append(
            {"task_id": t["task_id"], "kind": kind, "expected": list(want), "got": list(got), "ok": got == want}
        )
        if got != want:
            error = t["info"].get("error")
            problems.append(
                f"{part} {t['task_id']} ({kind}): expected {want}, got {got}" + (f": {error}" if error else "")
            )
    if len(trajectories) != n:
        problems.insert(0, f"{part}: {len(trajectories)} of {n} episodes came back")
    if len({t["episode_id"] for t in trajectories}) != len(trajectories):
        problems.insert(0, f"{part}: an episode came back twice")
    return rows, problems


def run_part(part: str, n: int, args: argparse.Namespace, out: Path, cli, progress) -> dict:
    """The part's eval run, sampled every ``--interval`` s until it exits; its episodes checked,
    then what outlived it."""
    run_dir = out / "runs" / part
    command = eval_command(part, n, args.model, args.backend, run_dir)
    progress.phase(f"{part}: {n} episodes at once")
    t0, samples, seen = time.monotonic(), [], {}
    with open(out / f"{part}.log", "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    timed_out = False
    try:
        with open(out / f"{part}-samples.jsonl", "w") as f:
            while proc.poll() is None:
                if time.monotonic() - t0 > args.timeout_s:
                    timed_out = True
                    break
                sample = take_sample(t0, proc.pid, cli, seen)
                f.write(json.dumps(sample) + "\n")
                f.flush()
                samples.append(sample)
                if len(samples) % max(1, int(10 / args.interval)) == 0:  # a progress line every ~10 s
                    numbers = {k: max(s[k] for s in samples) for k in ("total_mb", "jvms", "containers")}
                    progress.step(progress.done, {f"{part} peak MB": numbers["total_mb"], **numbers})
                time.sleep(args.interval)
    finally:
        stop(proc)
    rows, problems = check_episodes(part, run_dir, n)
    if timed_out:
        problems.insert(0, f"{part}: still running after {args.timeout_s:g} s; stopped")
    elif proc.returncode != 0:
        problems.insert(0, f"{part}: agent-rl eval exited {proc.returncode} (see {out / (part + '.log')})")
    left = leftovers(proc.pid, cli, seen)
    return {
        "part": part,
        "episodes": n,
        "wall_s": round(time.monotonic() - t0, 1),
        "rows": rows,
        "problems": problems,
        "left": left,
        **memory_summary(samples, n),
    }


def memory_summary(samples: list[dict], n: int) -> dict:
    """The peak total and its parts at that moment, each part's own peak, and the peak per episode."""
    if not samples:
        return {"peak_total_mb": None, "per_episode_mb": None}
    top = max(samples, key=lambda s: s["total_mb"])
    return {
        "peak_total_mb": top["total_mb"],
        "at_peak": {k: top[k] for k in ("python_mb", "jvm_mb", "container_mb", "jvms", "containers", "t_s")},
        "peaks": {k: max(s[k] for s in samples) for k in ("python_mb", "jvm_mb", "container_mb", "jvms", "containers")},
        "per_episode_mb": round(top["total_mb"] / n, 1),
        "samples": len(samples),
    }


def report(results: list[dict], backend: str) -> None:
    print(
        f"{'part':<6} {'episodes':>8} {'as expected':>11} {'peak MB':>8} {'python':>7} {'JVMs':>7} "
        f"{'containers':>10} {'MB/episode':>10} {'JVMs':>5} {'ctrs':>5} {'wall s':>7}"
    )
    for r in results:
        ok = sum(row["ok"] for row in r["rows"])
        at = r.get("at_peak") or {}
        print(
            f"{r['part']:<6} {r['episodes']:>8} {ok:>11} {r['peak_total_mb'] or 0:>8.0f} {at.get('python_mb', 0):>7.0f} "
            f"{at.get('jvm_mb', 0):>7.0f} {at.get('container_mb', 0):>10.0f} {r['per_episode_mb'] or 0:>10.1f} "
            f"{(r.get('peaks') or {}).get('jvms', 0):>5} {(r.get('peaks') or {}).get('containers', 0):>5} {r['wall_s']:>7.1f}"
        )
        kinds: dict[str, int] = {}
        for row in r["rows"]:
            kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        where = f" on {backend}" if r["part"] == "code" else ""
        print(f"  {r['part']}{where}: kinds " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
        for line in r["problems"] + [f"{r['part']}: outlived the run: {x}" for x in r["left"]]:
            print(f"  {line}")


def docker_client(backend: str):
    if backend != "docker":
        return None
    import docker  # the sandbox's own SDK

    return docker.from_env(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docker", type=int, default=64, help="code-execution episodes at once (0: skip)")
    p.add_argument("--jvm", type=int, default=32, help="TextWorld-Express episodes at once, one JVM each (0: skip)")
    p.add_argument(
        "--backend", default="docker", choices=["docker", "bwrap", "process"], help="the code part's sandbox"
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between memory samples")
    p.add_argument(
        "--timeout-s", type=float, default=3600.0, help="a part still running after this is stopped (a failure)"
    )
    p.add_argument("--model", default=None, help="a tokenizer directory (default: a tiny model built here)")
    p.add_argument("--out", default=None, help="results directory (default: bench/results/load/<time>)")
    args = p.parse_args(argv)
    out = Path(args.out or ROOT / "bench" / "results" / "load" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        args.model = str(out / "model")
        init = [sys.executable, "-m", "agent_rl.cli", "init-model", "tiny", "--out", args.model]
        subprocess.run(init, check=True, cwd=ROOT, capture_output=True)
    parts = [(name, n) for name, n in (("code", args.docker), ("twx", args.jvm)) if n > 0]
    progress = script_progress("bench/load", len(parts), unit="part")
    cli, results = docker_client(args.backend), []
    load_before = os.getloadavg()
    for name, n in parts:
        results.append(run_part(name, n, args, out, cli, progress))
        progress.step(progress.done + 1, {f"{name} MB/episode": results[-1]["per_episode_mb"] or 0})
    with open(out / "episodes.jsonl", "w") as f:
        f.writelines(json.dumps({"part": r["part"], **row}) + "\n" for r in results for row in r["rows"])
    summary = {
        "backend": args.backend,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cores": os.cpu_count(),
        "parts": [{k: v for k, v in r.items() if k != "rows"} for r in results],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    progress.finish([out / "summary.json", out / "episodes.jsonl"])
    report(results, args.backend)
    bad = [x for r in results for x in r["problems"] + r["left"]]
    total = sum(r["episodes"] for r in results)
    print(
        "load: "
        + (f"all {total} episodes ended as expected; nothing outlived the runs" if not bad else f"{len(bad)} problems")
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())

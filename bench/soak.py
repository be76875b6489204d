"""Soak: do long runs stay flat? Two training runs at once through one ``agent-rl serve`` (a code
env in the docker sandbox, ``agent_rl/ShellTask-v0``, and ``agent_rl/TextWorldExpress-v0``,
``configs/twx_coin.yaml``), both sampling from the server (``weight_sync: none``: two runs cannot
both push their weights to one server), for a chosen time.

Every ``--interval`` seconds one sample is appended to ``samples.jsonl`` as it is taken (a stopped
soak still leaves its data): per process (the server and each run) its RSS, open file descriptors,
threads and descendant processes, and the docker containers and JVMs the runs own. At the end:
each series' slope after ``--warmup`` minutes, ``summary.json`` and ``soak.png``.

Flat means, after the warm-up: descriptors (in all, and by kind: files, pipes, unix and TCP sockets,
other), threads, descendants, containers and JVMs rise by at most 2 (the highest value of the last
fifth of the samples against that of the first fifth: descriptors of calls in flight come and go
between samples; a ceiling that falls is not growth), and each process's RSS grows by less than
50 MB/h.

``--steps N`` runs N training steps each instead of a time, then checks that nothing outlives the
runs: no process of ours, no container they owned, no JVM, no file descriptor of this process
(exit 1 when something did; CI runs it with ``--steps 5``, ``tests/bench/test_soak.py``).

    python bench/soak.py [--minutes 60] [--interval 30] [--warmup 10] [--out DIR] [--model DIR]
    python bench/soak.py --steps 5
    python bench/soak.py --report DIR [--warmup 10]   # the verdict of a stopped soak's samples
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_rl.run.progress import script_progress

ROOT = Path(__file__).resolve().parents[1]
RSS_MB_PER_H = 50.0  # a process's RSS may grow by less than this after the warm-up
COUNT_BAND = 2  # descriptors, threads, descendants, containers, JVMs: their ceiling rises by at most this
SMALL = [  # both runs: small steps, so that a step takes seconds on a 2-core CPU
    "rollout.group_size=2",
    "trainer.prompts_per_step=2",
    "rollout.concurrency=4",
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]
# the code env: ShellTask-v0 writes its files into a docker sandbox at reset and runs its check there
# at the end, whatever the model writes (a random tiny model never reaches CodeExec-v0's sandbox)
RUNS = {
    "shell": (
        "configs/code_exec.yaml",
        [
            "env.id=agent_rl/ShellTask-v0",
            "env.options={max_turns: 2, sandbox_backend: docker}",
            "sandbox.backend=docker",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=48",
            "rollout.max_total_tokens=2048",
        ],
    ),
    "twx": ("configs/twx_coin.yaml", []),
}


# -- what /proc says about a process ------------------------------------------------------------
def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _parents() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, command name)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    head, rest = f.read().rsplit(")", 1)
                out[int(entry)] = (int(rest.split()[1]), head.split("(", 1)[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid: int, table: dict[int, tuple[int, str]]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(p)
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _socket_inodes() -> dict[str, set[str]]:
    """The inodes of every unix and TCP socket on this host (``/proc/net``): to tell descriptors apart."""
    out: dict[str, set[str]] = {"unix": set(), "tcp": set()}
    for kind, files, column in (("unix", ("unix",), 6), ("tcp", ("tcp", "tcp6"), 9)):
        for name in files:
            try:
                with open(f"/proc/net/{name}") as f:
                    next(f, None)
                    out[kind].update(cols[column] for cols in (line.split() for line in f) if len(cols) > column)
            except OSError:
                pass
    return out


def fd_kinds(pid: int, sockets: dict[str, set[str]]) -> dict[str, int]:
    """``pid``'s open descriptors by kind: ``fds_file``, ``fds_pipe``, ``fds_unix`` (the docker daemon's
    socket, the sandbox's executors), ``fds_tcp`` (HTTP to the server) and ``fds_other`` (one closed
    between the listing and its readlink counts as none)."""
    kinds = {"fds_file": 0, "fds_pipe": 0, "fds_unix": 0, "fds_tcp": 0, "fds_other": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inode = target[len("socket:[") : -1]
            kind = "fds_unix" if inode in sockets["unix"] else "fds_tcp" if inode in sockets["tcp"] else "fds_other"
        elif target.startswith("pipe:["):
            kind = "fds_pipe"
        elif target.startswith("/"):
            kind = "fds_file"
        else:
            kind = "fds_other"  # anon_inode:[eventpoll], [eventfd], ...
        kinds[kind] += 1
    return kinds


def process_sample(
    pid: int, table: dict[int, tuple[int, str]], sockets: dict[str, set[str]]
) -> dict[str, float] | None:
    """RSS (MB), open descriptors (and by kind), threads and descendant processes of ``pid`` (None:
    it is gone)."""
    try:
        status = _status(pid)
        kinds = fd_kinds(pid, sockets)
    except OSError:
        return None
    return {
        "rss_mb": int(status.get("VmRSS", "0 kB").split()[0]) / 1024,
        "fds": sum(kinds.values()),
        **kinds,
        "threads": int(status.get("Threads", "0")),
        "children": len(descendants(pid, table)),
    }


def containers(owners: list[int]) -> int:
    """Docker containers (running or not) labelled as owned by one of ``owners`` (sandbox/docker.py)."""
    ids: set[str] = set()
    for pid in owners:
        r = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=agent_rl.owner_pid={pid}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        ids.update(r.stdout.split())
    return len(ids)


def jvms(roots: list[int], table: dict[int, tuple[int, str]]) -> int:
    return sum(1 for root in roots for p in descendants(root, table) if table[p][1] == "java")


# -- the processes ------------------------------------------------------------------------------
def start_server(model: str, log: Path) -> tuple[subprocess.Popen, str]:
    """``agent-rl serve`` on a free loopback port; (the process, its /v1 URL)."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent_rl.cli",
                "serve",
                "--model",
                model,
                "--port",
                "0",
                "--served-model-name",
                "tiny",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    line = proc.stdout.readline()
    if not line.startswith("agent-rl serve: http"):
        proc.kill()
        raise SystemExit(f"agent-rl serve did not start (see {log}): {line.strip()!r}")
    return proc, line.split()[2]


def start_run(name: str, model: str, url: str, out: Path, steps: int) -> subprocess.Popen:
    config, own = RUNS[name]
    overrides = [
        f"model.path={model}",
        "rollout.backend.name=openai",
        f"rollout.backend.base_url={url}",
        "rollout.backend.model=tiny",
        "rollout.backend.weight_sync=none",
        "rollout.backend.api_key_env=null",
        f"trainer.steps={steps}",
        f"run.dir={out / 'runs' / name}",
        *SMALL,
        *own,
    ]
    with open(out / f"{name}.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agent_rl.cli", "train", config, *overrides],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def take_sample(t0: float, procs: dict[str, subprocess.Popen]) -> dict:
    table, sockets = _parents(), _socket_inodes()
    runs = [p.pid for n, p in procs.items() if n != "serve"]
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "procs": {name: process_sample(p.pid, table, sockets) for name, p in procs.items()},
        "containers": containers(runs),
        "jvms": jvms(runs, table),
    }


# -- the verdict ----------------------------------------------------------------------------------
def series(samples: list[dict], warmup_s: float) -> dict[str, list[tuple[float, float]]]:
    """Every series after the warm-up: ``proc.metric`` and ``containers`` / ``jvms`` -> [(hours, value)]."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        if s["t_s"] < warmup_s:
            continue
        h = s["t_s"] / 3600
        for name, m in s["procs"].items():
            for k, v in (m or {}).items():
                out.setdefault(f"{name}.{k}", []).append((h, v))
        for k in ("containers", "jvms"):
            out.setdefault(k, []).append((h, s[k]))
    return out


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of value over hours (0 with fewer than two points)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def verdict(samples: list[dict], warmup_s: float) -> dict[str, dict]:
    """Per series after the warm-up: its slope per hour, ``drift`` (the largest distance from its
    first value), ``rise`` (the highest value of its last fifth minus that of its first fifth) and
    whether it is flat. Counts are judged by ``rise``, which may be at most +2: descriptors of calls in
    flight come and go between samples (``fds_tcp``: a step's HTTP calls to the server), a leak lifts
    the ceiling, and a ceiling that falls (a pool that closed idle connections) is not growth; RSS by
    its slope."""
    out = {}
    for key, pts in series(samples, warmup_s).items():
        per_h = slope(pts)
        drift = max(abs(v - pts[0][1]) for _, v in pts)
        fifth = max(1, len(pts) // 5)
        rise = max(v for _, v in pts[-fifth:]) - max(v for _, v in pts[:fifth])
        flat = per_h < RSS_MB_PER_H if key.endswith("rss_mb") else rise <= COUNT_BAND
        out[key] = {
            "per_hour": round(per_h, 3),
            "drift": round(drift, 3),
            "rise": round(rise, 3),
            "points": len(pts),
            "flat": flat,
        }
    return out


def plot(samples: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = ["rss_mb", "fds", "threads", "children"]
    fig, axes = plt.subplots(1, len(kinds) + 1, figsize=(4 * (len(kinds) + 1), 3.2))
    minutes = [s["t_s"] / 60 for s in samples]
    for ax, kind in zip(axes, kinds, strict=False):
        for name in samples[0]["procs"]:
            ys = [(s["procs"].get(name) or {}).get(kind) for s in samples]
            ax.plot(minutes, [y if y is not None else float("nan") for y in ys], label=name)
        ax.set_title(kind)
        ax.set_xlabel("minutes")
    for key in ("containers", "jvms"):
        axes[-1].plot(minutes, [s[key] for s in samples], label=key)
    axes[-1].set_title("containers, JVMs")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def leaks(before_fds: int, pids: list[int], seen: dict[int, str]) -> list[str]:
    """What outlived the runs: a process they started (``seen`` while they ran, so orphans count
    too: a JVM whose parent died is no longer our descendant), a container they owned, a file
    descriptor of this process."""
    time.sleep(2.0)  # containers are removed as their pools close
    table = _parents()
    alive = [p for p, comm in seen.items() if table.get(p, (0, ""))[1] == comm]
    found = []
    if alive:
        found.append(f"{len(alive)} processes: " + ", ".join(f"{p} ({seen[p]})" for p in alive[:5]))
    if n := containers(pids):
        found.append(f"{n} containers of the runs")
    if (fds := len(os.listdir("/proc/self/fd"))) > before_fds:
        found.append(f"{fds - before_fds} file descriptors of this process")
    return found


# -- the soak -------------------------------------------------------------------------------------
def stop(proc: subprocess.Popen, wait_s: float = 60.0) -> None:
    """SIGINT (the command's own shutdown: pools, engines, JVMs), then SIGKILL after ``wait_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def soak(args: argparse.Namespace, out: Path) -> tuple[list[dict], dict[str, subprocess.Popen], dict[int, str]]:
    """Start the server and the runs, sample until the time is up or (``--steps``) the runs end."""
    serve, url = start_server(args.model, out / "serve.log")
    procs = {"serve": serve}
    steps = args.steps or 10**6
    procs.update({name: start_run(name, args.model, url, out, steps) for name in RUNS})
    t0, samples, seen = time.monotonic(), [], {}
    deadline = t0 + args.minutes * 60
    progress = script_progress("bench/soak", int(args.minutes * 60), unit="s")  # --steps: ends sooner
    print(f"soak: serve {url}, runs {', '.join(RUNS)}; samples in {out / 'samples.jsonl'}", file=sys.stderr)
    try:
        with open(out / "samples.jsonl", "a") as f:
            next_at = t0
            while True:
                if time.monotonic() >= next_at:
                    next_at += args.interval
                    sample = take_sample(t0, procs)
                    table = _parents()
                    seen.update({p: table[p][1] for p in descendants(os.getpid(), table) if p in table})
                    f.write(json.dumps(sample) + "\n")
                    f.flush()
                    samples.append(sample)
                    rss = (sample["procs"].get("serve") or {}).get("rss_mb")
                    progress.step(
                        min(int(sample["t_s"]), progress.total), {"samples": len(samples), "serve RSS MB": rss or 0}
                    )
                ended = {n: procs[n].returncode for n in RUNS if procs[n].poll() is not None}
                if any(ended.values()) or (args.steps and len(ended) == len(RUNS)):
                    break  # a run failed, or (--steps) every run is done
                if not args.steps and time.monotonic() >= deadline:
                    break
                time.sleep(1.0)
    except KeyboardInterrupt:
        print("soak: interrupted; stopping the runs", file=sys.stderr)
    finally:
        for name in [*RUNS, "serve"]:
            stop(procs[name])
        progress.finish([out / "samples.jsonl"])
    return samples, procs, seen


def report(samples: list[dict], warmup_s: float, out: Path, judged: bool = True) -> bool:
    """Each series' slope and drift (``summary.json``, ``soak.png``, one line each); whether all are
    flat. ``judged=False`` (``--steps``: minutes, no warm-up) prints them without a verdict."""
    result = verdict(samples, warmup_s)
    (out / "summary.json").write_text(json.dumps({"warmup_s": warmup_s, "series": result}, indent=2))
    if samples:
        plot(samples, out / "soak.png")
    for key, r in sorted(result.items()):
        unit = "MB/h" if key.endswith("rss_mb") else "/h"
        mark = ("flat" if r["flat"] else "GROWS") if judged else ""
        line = (
            f"{key:<22} slope {r['per_hour']:>9.2f} {unit:<5} drift {r['drift']:>8.2f} rise {r['rise']:>8.2f}  {mark}"
        )
        print(line.rstrip())
    flat = all(r["flat"] for r in result.values())
    said = ("flat" if flat else "NOT flat") + f" after {warmup_s / 60:g} min" if judged else "not judged (--steps)"
    print(f"soak: {len(samples)} samples, {said}; {out}")
    return flat


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="how long the runs go (without --steps)")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=10.0, help="minutes left out of the slopes")
    p.add_argument("--steps", type=int, default=None, help="N steps per run, then check that nothing outlives them")
    p.add_argument("--model", default=None, help="from_pretrained checkpoint (default: a tiny model built here)")
    p.add_argument("--out", default=None, help="results directory (default: bench/results/soak/<time>)")
    p.add_argument("--report", default=None, help="only report the samples.jsonl of this directory (a stopped soak)")
    args = p.parse_args(argv)
    if args.report is not None:
        found = Path(args.report) / "samples.jsonl"
        if not found.is_file():
            p.error(f"--report {args.report}: no samples.jsonl there; name the directory a soak wrote (its --out)")
        samples = [json.loads(line) for line in found.read_text().splitlines()]
        return 0 if report(samples, args.warmup * 60, Path(args.report)) else 1
    out = Path(args.out or ROOT / "bench" / "results" / "soak" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        args.model = str(out / "model")
        subprocess.run(
            [sys.executable, "-m", "agent_rl.cli", "init-model", "tiny", "--out", args.model],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
    before_fds = len(os.listdir("/proc/self/fd"))
    samples, procs, seen = soak(args, out)
    left = leaks(before_fds, [procs[n].pid for n in RUNS], seen) if args.steps else []  # before plotting
    flat = report(samples, 0.0 if args.steps else args.warmup * 60, out, judged=args.steps is None)
    if args.steps is None:
        return 0 if flat else 1
    failed = {n: p.returncode for n, p in procs.items() if n != "serve" and p.returncode}
    for name, code in failed.items():
        print(f"soak: run {name} exited {code} (see {out / (name + '.log')})")
    print("soak: nothing outlived the runs" if not left else "soak: outlived the runs: " + "; ".join(left))
    return 0 if not failed and not left else 1


if __name__ == "__main__":
    sys.exit(main())

"""Sandbox exec latency and throughput, side by side with their peers in ONE run.

    python bench/sandbox_latency.py [--rounds 60] [--seconds 5] [--callers 8]

Every round times, in turn, the same program (``python3 -S -c 'print(1)'``) as:

* a bare process start on the host (``/usr/bin/python3``, ``subprocess.run``),
* ``exec`` on the bwrap warm pool, and on the docker warm pool,
* ``docker exec`` into a warm container of the same image (the usual alternative),

plus a few ``docker run --rm`` and one-shot ``bwrap`` starts. Interleaving the variants makes the
ratios robust to the load of a shared machine, where absolute timings are not. Then 8 concurrent
callers run calls back to back for a few seconds on each pool (throughput).
Prints ratios against the targets of issue 3; exit code 1 if one is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_rl.run.progress import script_progress  # noqa: E402
from sandbox import ExecStatus, SandboxLimits, available_backends, make_sandbox  # noqa: E402
from sandbox.bwrap import BWRAP_UID_BASE, PYTHON, _host_binds  # noqa: E402
from sandbox.image import DEFAULT_IMAGE  # noqa: E402

PROGRAM = ["-S", "-c", "print(1)"]
LIMITS = SandboxLimits(timeout_s=10.0, memory_mb=512)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bare() -> None:
    out = subprocess.run([PYTHON, *PROGRAM], capture_output=True)
    assert out.stdout == b"1\n"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Peers:
    """``docker exec`` / ``docker run`` on a plain warm container of the same image."""

    def __init__(self, image: str):
        self.image = image
        self.cid = subprocess.run(
            ["docker", "run", "-d", "--rm", "--network", "none", image, "sleep", "600"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def docker_exec(self) -> None:
        out = subprocess.run(["docker", "exec", self.cid, "python3", *PROGRAM], capture_output=True)
        assert out.stdout == b"1\n", out

    def docker_run(self) -> None:
        out = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", self.image, "python3", *PROGRAM], capture_output=True
        )
        assert out.stdout == b"1\n", out

    def close(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.cid], capture_output=True)


def bwrap_oneshot() -> None:
    import os

    cmd = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        *_host_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/work",
        PYTHON,
        *PROGRAM,
    ]
    if os.geteuid() == 0:
        uid = BWRAP_UID_BASE + 4000
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    out = subprocess.run(cmd, capture_output=True)
    assert out.stdout == b"1\n", out


async def throughput(backend: str, callers: int, seconds: float) -> tuple[float, int]:
    boxes = [make_sandbox(backend=backend, limits=LIMITS) for _ in range(callers)]
    argv = [PYTHON if backend == "bwrap" else "python3", *PROGRAM]
    done, failed = 0, 0
    end = time.monotonic() + seconds

    async def caller(sb):
        nonlocal done, failed
        while time.monotonic() < end:
            res = await sb.exec(argv=argv)
            if res.status == ExecStatus.OK:
                done += 1
            else:
                failed += 1

    t0 = time.monotonic()
    await asyncio.gather(*(caller(b) for b in boxes))
    return done / (time.monotonic() - t0), failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--cold-rounds", type=int, default=10, help="docker run / one-shot bwrap samples")
    ap.add_argument("--seconds", type=float, default=5.0, help="throughput phase per backend")
    ap.add_argument("--callers", type=int, default=8)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    works = {name: ok for name, (ok, _) in available_backends().items()}
    pools = {b: make_sandbox(backend=b, limits=LIMITS) for b in ("bwrap", "docker") if works[b]}
    # progress: the hot rounds, then one unit per cold variant and per throughput backend
    progress = script_progress(
        "bench/sandbox_latency", args.rounds + works["docker"] + works["bwrap"] + len(pools), unit="part"
    )
    progress.phase(f"warming the pools ({', '.join(pools) or 'none'})")
    for sb in pools.values():
        asyncio.run(sb.pool.wait_warm(60))
    peers = Peers(DEFAULT_IMAGE) if works["docker"] else None

    loop = asyncio.new_event_loop()  # callers are async: one running loop, as in the rollout engine

    def pooled(b):
        argv = [PYTHON if b == "bwrap" else "python3", *PROGRAM]

        def call():
            res = loop.run_until_complete(pools[b].exec(argv=argv))
            assert res.status == ExecStatus.OK and res.stdout == "1\n", res

        return call

    hot = {"bare process": bare}
    hot.update({f"{b} pool exec": pooled(b) for b in pools})
    if peers:
        hot["docker exec"] = peers.docker_exec
    for fn in hot.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in hot}
    progress.phase(f"hot rounds: {', '.join(hot)} (interleaved)")
    for _ in range(args.rounds):
        for name, fn in hot.items():
            times[name].append(timed(fn))
        progress.advance({f"{name} p50 ms": statistics.median(xs) * 1e3 for name, xs in times.items()})
    loop.close()
    cold = {}
    for name, fn, ok in (
        ("docker run --rm", peers.docker_run if peers else None, peers),
        ("bwrap one-shot", bwrap_oneshot, works["bwrap"]),
    ):
        if ok:
            progress.phase(f"cold starts: {name} x {args.cold_rounds}")
            cold[name] = [timed(fn) for _ in range(args.cold_rounds)]
            progress.advance({f"{name} p50 ms": statistics.median(cold[name]) * 1e3})
    if peers:
        peers.close()

    print(
        f"program: python3 {' '.join(PROGRAM)!s}   rounds: {args.rounds} (interleaved)   "
        f"machine load: {open('/proc/loadavg').read().split()[0]}"
    )
    print(f"{'variant':<18} {'p50 ms':>8} {'p90 ms':>8}")
    for name, xs in {**times, **cold}.items():
        print(f"{name:<18} {statistics.median(xs) * 1e3:>8.1f} {pct(xs, 0.9) * 1e3:>8.1f}")

    p50 = {k: statistics.median(v) for k, v in {**times, **cold}.items()}
    checks = []
    if "docker pool exec" in p50:
        checks.append(("docker pool / docker exec", p50["docker pool exec"] / p50["docker exec"], "<= 0.20", 0.20))
        checks.append(("docker pool / bare process", p50["docker pool exec"] / p50["bare process"], "<= 2.00", 2.0))
    if "bwrap pool exec" in p50:
        checks.append(("bwrap pool - bare (ms)", (p50["bwrap pool exec"] - p50["bare process"]) * 1e3, "<= 8.0", 8.0))
        checks.append(("bwrap pool / bare process", p50["bwrap pool exec"] / p50["bare process"], "(info)", None))
    for b in pools:
        progress.phase(f"throughput: {b}, {args.callers} callers for {args.seconds:g} s")
        rate, failed = asyncio.run(throughput(b, args.callers, args.seconds))
        progress.advance({"execs/s": rate})
        checks.append((f"{b} execs/s, {args.callers} callers", rate, ">= 50", -50.0))
        if failed:
            checks.append((f"{b} failed calls", failed, "== 0", 0.0))
    print()
    print(f"{'measure':<32} {'value':>8}  target   ok")
    missed = 0
    for name, value, target, bound in checks:
        ok = True if bound is None else (value >= -bound if bound < 0 else value <= bound)
        missed += not ok
        print(f"{name:<32} {value:>8.2f}  {target:<8} {'yes' if ok else 'NO'}")
    for sb in pools.values():
        asyncio.run(sb.close())
    progress.finish(numbers={"targets missed": missed})
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``agent-rl sandbox doctor`` and ``agent-rl sandbox build-image`` (wired in agent_rl/cli.py).

Both print for humans and return an exit code.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time


def build_image(name: str | None = None, force: bool = False) -> int:
    """Build (or reuse) the default docker image. 0: ready; 1: could not build (reason printed)."""
    from sandbox.image import ImageBuildError
    from sandbox.image import build_image as _build

    try:
        _build(name, force=force, say=lambda msg: print(f"build-image: {msg}", flush=True))
    except (ImageBuildError, OSError) as exc:
        print(f"build-image: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


async def _latency(backend: str, n: int) -> tuple[float, float, str]:
    """(first call s, p50 of the next ``n`` calls s, status) for ``python3 -c 'print(1)'``."""
    from sandbox import ExecStatus, make_sandbox

    sb = make_sandbox(backend=backend, timeout_s=10.0)
    try:
        t0 = time.perf_counter()
        first = await sb.exec(code="print(1)")
        first_s = time.perf_counter() - t0
        if first.status != ExecStatus.OK:
            return first_s, float("nan"), f"{first.status}: {first.stderr.strip()[-200:]}"
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            res = await sb.exec(code="print(1)")
            times.append(time.perf_counter() - t0)
            if res.status != ExecStatus.OK:
                return first_s, float("nan"), f"{res.status}: {res.stderr.strip()[-200:]}"
        return first_s, statistics.median(times), "ok"
    finally:
        await sb.close()


def doctor(calls: int = 20) -> int:
    """Which backends work here, the image, cgroups, and measured exec latency.

    Returns 0 when an isolated backend (docker or bwrap) works, 2 when only the non-isolated
    process backend does.
    """
    import warnings

    from sandbox import cgroups
    from sandbox.image import DEFAULT_IMAGE, image_exists
    from sandbox.process import SandboxIsolationWarning
    from sandbox.registry import BACKENDS, available_backends, resolve_backend

    warnings.simplefilter("ignore", SandboxIsolationWarning)
    root = " (root: sandboxed code drops to unprivileged uids)" if os.geteuid() == 0 else ""
    print(f"user: uid {os.geteuid()}{root}")
    image = os.environ.get("AGENT_RL_SANDBOX_IMAGE") or DEFAULT_IMAGE
    print(f"image: {image} " + ("present" if image_exists(image) else "MISSING (agent-rl sandbox build-image)"))
    print(f"cgroups for bwrap workers: {', '.join(cgroups.available()) or 'none (rlimits only)'}")
    print()
    works = available_backends()
    print(f"{'backend':<9} {'isolated':<9} {'works':<6} {'first call':>11} {'p50 exec':>9}  detail")
    isolated_ok = False
    for name, (ok, why) in works.items():
        first = p50 = "-"
        if ok:
            try:
                f, p, status = asyncio.run(_latency(name, calls))
            except Exception as exc:  # noqa: BLE001 - report, keep checking the others
                ok, why = False, f"{why}; exec failed: {type(exc).__name__}: {exc}"
            else:
                first, p50 = f"{f * 1000:.0f} ms", f"{p * 1000:.1f} ms"
                if status != "ok":
                    ok, why = False, f"{why}; exec: {status}"
        isolated_ok |= ok and BACKENDS[name].isolated
        iso = "yes" if BACKENDS[name].isolated else "NO"
        print(f"{name:<9} {iso:<9} {'yes' if ok else 'no':<6} {first:>11} {p50:>9}  {why}")
    print()
    auto = resolve_backend("auto")
    print(f"backend auto -> {auto}")
    if not isolated_ok:
        print(
            "WARNING: only the process backend works: model-written code is NOT isolated here. "
            "Install bubblewrap (apt-get install bubblewrap) or Docker."
        )
        return 2
    return 0


if __name__ == "__main__":  # python -m sandbox.cli [doctor|build-image]
    cmd = sys.argv[1] if len(sys.argv) > 1 else "doctor"
    sys.exit(doctor() if cmd == "doctor" else build_image(force="--force" in sys.argv))

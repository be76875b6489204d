"""The test suite's durations report, `tests/durations.md`: `make durations` (or `python .ci/durations.py run`).

`run` runs `make test`'s pytest sessions (`make pytest`) with `--durations=0`, notes the wall time and the
machine's load before and after, and writes the report; `render FILE` writes it from a saved pytest
output (the lines `12.34s call     tests/x.py::test_y` that `--durations=0` prints)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$")
SUMMARY = re.compile(r"^=* ?(\d+ (?:passed|failed).*) in ([\d.]+)s")


def parse(text: str) -> tuple[dict[str, dict[str, float]], str]:
    """Per-test phase times, and pytest's closing summary line (counts and time)."""
    tests: dict[str, dict[str, float]] = defaultdict(lambda: {"setup": 0.0, "call": 0.0, "teardown": 0.0})
    sessions = []  # `make pytest` runs two sessions: each has its summary line
    for line in text.splitlines():
        if m := LINE.match(line):
            tests[m[3]][m[2]] += float(m[1])
        elif m := SUMMARY.match(line):
            sessions.append(f"{m[1]} in {float(m[2]):.0f} s")
    if not tests:
        sys.exit("durations: no `--durations=0` lines in that output: run pytest with --durations=0")
    return dict(tests), "; then ".join(sessions)


def directory(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return str(Path(path).parent)


def render(tests: dict[str, dict[str, float]], summary: str, header: str) -> str:
    total = {nodeid: sum(phases.values()) for nodeid, phases in tests.items()}
    all_s = sum(total.values())
    out = [
        "# Test durations",
        "",
        "Made by `make durations` (`.ci/durations.py`); refresh it with the change that moves it.",
        "",
        header,
        "",
        f"pytest: {summary}. Summed over tests (setup + call + teardown): {all_s:.0f} s; with xdist's",
        "workers that sum is larger than the wall time.",
        "",
        "## The 30 slowest tests",
        "",
        "| s | setup | call | test |",
        "|---:|---:|---:|---|",
    ]
    for nodeid in sorted(total, key=total.get, reverse=True)[:30]:
        p = tests[nodeid]
        out.append(f"| {total[nodeid]:.1f} | {p['setup']:.1f} | {p['call']:.1f} | `{nodeid}` |")
    per_dir: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for nodeid, s in total.items():
        per_dir[directory(nodeid)][0] += s
        per_dir[directory(nodeid)][1] += 1
    out += ["", "## Time per directory", "", "| directory | tests timed | s | share |", "|---|---:|---:|---:|"]
    for d, (s, n) in sorted(per_dir.items(), key=lambda kv: kv[1][0], reverse=True):
        out.append(f"| `{d}` | {n} | {s:.0f} | {s / all_s:.1%} |")
    phases = {ph: sum(p[ph] for p in tests.values()) for ph in ("setup", "call", "teardown")}
    out += ["", "## Setup vs call", "", "| phase | s | share |", "|---|---:|---:|"]
    for ph, s in phases.items():
        out.append(f"| {ph} | {s:.0f} | {s / all_s:.1%} |")
    return "\n".join(out) + "\n"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the tests with --durations=0 and write the report")
    r.add_argument("--out", default=str(ROOT / "tests" / "durations.md"), help="the report's path")
    r.add_argument("--log", default=str(ROOT / "runs" / "durations.log"), help="where pytest's whole output goes")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    g = sub.add_parser("render", help="write the report from a saved pytest output")
    g.add_argument("file", help="pytest's output, with its --durations=0 lines")
    g.add_argument("--note", default="", help="a line on how that output was made (machine, load)")
    args = ap.parse_args(argv)
    if args.cmd == "render":
        tests, summary = parse(Path(args.file).read_text())
        sys.stdout.write(render(tests, summary, args.note))
        return 0
    durations = ["--durations=0", "--durations-min=0"]  # every test, the ones under 5 ms too
    cmd = ["make", "--no-print-directory", "pytest", f"PYTEST_ARGS={shlex.join([*durations, *args.pytest_args])}"]
    before, t0 = load(), time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.monotonic() - t0
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout)  # the whole output: the failures' reports are in its middle
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    sys.stdout.write("\n".join([proc.stdout[-1500:], *failed, f"durations: pytest's whole output is in {log}", ""]))
    tests, summary = parse(proc.stdout)
    header = (
        f"`{shlex.join(cmd)}` on {os.cpu_count()} cores, exit {proc.returncode}, wall {wall:.0f} s; "
        f"load average (1, 5, 15 min) {before} before, {load()} after."
    )
    Path(args.out).write_text(render(tests, summary, header))
    print(f"durations: wrote {args.out}")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())

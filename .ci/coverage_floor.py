"""Line coverage per package against its floor: `make coverage` runs this on coverage.py's JSON report.

Each package (agent_rl, envs, tools, sandbox) must cover at least the share of its lines that
`tests/coverage.json` holds, the baseline measured when the floors were set. `--update` writes the
measured shares there instead (after a change that raises them, or one that moves code out of a
package, said in its commit)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ROOT / "tests" / "coverage.json"
PACKAGES = ("agent_rl", "envs", "tools", "sandbox")


def per_package(report: dict) -> dict[str, dict[str, int]]:
    """Statements and covered lines per top-level package, from `coverage json`'s per-file summaries."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"statements": 0, "covered": 0})
    for path, data in report["files"].items():
        parts = Path(path).parts
        package = next((p for p in parts if p in PACKAGES), None)
        if package is None:
            continue
        counts[package]["statements"] += data["summary"]["num_statements"]
        counts[package]["covered"] += data["summary"]["covered_lines"]
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="coverage.py's JSON report (`coverage json -o FILE`)")
    ap.add_argument("--update", action="store_true", help="write the measured shares to tests/coverage.json")
    args = ap.parse_args(argv)
    counts = per_package(json.loads(Path(args.report).read_text()))
    floors = json.loads(FLOORS.read_text()) if FLOORS.exists() else {}
    measured = {p: round(100 * c["covered"] / c["statements"], 1) for p, c in counts.items() if c["statements"]}
    low = []
    print(f"{'package':10} {'lines':>7} {'covered':>8} {'share':>7} {'floor':>7}")
    for package in PACKAGES:
        c, share, floor = counts.get(package), measured.get(package), floors.get(package)
        if c is None:
            print(f"{package:10} not measured")
            low.append(package)
            continue
        print(
            f"{package:10} {c['statements']:7d} {c['covered']:8d} {share:6.1f}% {floor if floor is not None else '-':>6}%"
        )
        if floor is not None and share < floor:
            low.append(package)
    if args.update:
        note = {"_measured": "a whole run of make coverage (say where and at what load in the commit)"}
        FLOORS.write_text(json.dumps({**note, **measured}, indent=2) + "\n")
        print(f"coverage: floors written to {FLOORS.relative_to(ROOT)}")
        return 0
    if low:
        print(f"coverage: {', '.join(low)} below the floor in {FLOORS.relative_to(ROOT)}: add the tests that cover it")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

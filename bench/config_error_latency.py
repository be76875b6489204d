"""Wall time of `agent-rl` answering a config mistake, and of the listing commands (issue 42: under
2 s on an idle machine). Each command runs 3 times in a fresh process; the median is printed.

    python bench/config_error_latency.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from agent_rl.run.progress import script_progress

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "configs" / "quickstart.yaml")
COMMANDS = {
    "train: trainer.stpes=2": ["train", QUICK, "trainer.stpes=2"],
    "train: algorithm.loss.name=cipso": ["train", QUICK, "algorithm.loss.name=cipso"],
    "eval: env.id typo": ["eval", QUICK, "env.id=agent_rl/Arithmetc-v0"],
    "sft: model.path missing": ["sft", QUICK, "model.path=/nonexistent/model"],
    "objectives list": ["objectives", "list"],
    "envs list": ["envs", "list"],
}


def wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "agent_rl.cli", *args], capture_output=True, cwd=ROOT, check=False)
    return time.perf_counter() - t0


if __name__ == "__main__":
    progress = script_progress("bench/config_error_latency", len(COMMANDS), unit="command")  # on stderr
    for name, args in COMMANDS.items():
        progress.phase(name)
        times = [wall(args) for _ in range(3)]
        print(f"{name:<36} median {statistics.median(times):5.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times)})")
        progress.advance({"median s": statistics.median(times)})
    progress.finish()

"""Success, mean reward and turns, each with a 95% bootstrap interval over games, and the share of
valid commands, from the trajectories ``agent-rl eval`` writes (``RUN/trajectories/eval.jsonl``).

``python bench/results/text_games_tiny/summarize.py RUN [RUN ...]``
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from agent_rl.train.evaluation import bootstrap_ci


def summarize(run: Path) -> str:
    trajectories = [json.loads(line) for line in (run / "trajectories" / "eval.jsonl").open()]
    scored = [t for t in trajectories if t["reward"] is not None]
    success_E = [1.0 if t["reward"] >= 1.0 - 1e-9 else 0.0 for t in scored]
    reward_E = [float(t["reward"]) for t in scored]
    turns_E = [float(len(t["turns_N"])) for t in scored]
    turns = [turn for t in scored for turn in t["turns_N"]]
    valid = sum(bool(turn["action_valid"]) for turn in turns) / max(len(turns), 1)
    stops = Counter(t["stop_reason"] for t in trajectories)

    def mean_ci(values: list[float], digits: int) -> str:
        lo, hi = bootstrap_ci(values)
        return f"{sum(values) / len(values):.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

    return (
        f"{run}: games {len(scored)} (errors {len(trajectories) - len(scored)}), success {mean_ci(success_E, 3)}, "
        f"mean reward {mean_ci(reward_E, 3)}, turns {mean_ci(turns_E, 1)}, valid commands {valid:.3f} "
        f"of {len(turns)} turns, stop reasons {dict(stops)}"
    )


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(summarize(Path(arg)))

"""Metrics to JSONL and TensorBoard (and W&B when installed and enabled); the reward-curve PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class Tracker:
    def __init__(self, run_dir: Path, cfg: Any, config_dict: dict | None = None):
        self.run_dir = Path(run_dir)
        self.cfg = cfg
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a") if cfg.jsonl else None
        self._tb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir))
        self._wandb = None
        if cfg.wandb:
            try:
                import wandb
            except ImportError:
                raise ValueError("tracking.wandb=true but the wandb package is not installed (pip install wandb)") from None
            self._wandb = wandb.init(project="agent_rl", dir=str(self.run_dir), config=config_dict)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and math.isfinite(float(v))}
        if self._jsonl:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()
        if self._tb:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb:
            self._wandb.log(clean, step=step)

    def close(self) -> None:
        if self._jsonl:
            self._jsonl.close()
            self._jsonl = None
        if self._tb:
            self._tb.close()
            self._tb = None
        if self._wandb:
            self._wandb.finish()
            self._wandb = None


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def plot_rewards(run_dir: Path, keys: tuple[str, ...] = ("rollout/reward_mean", "eval/success")) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="." if len(pts) < 40 else None, label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("reward / success")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(run_dir) / "reward.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

"""``agent-rl compare RUN...``: metric curves of several runs in one PNG, a table of final and best
values, and the config keys whose values differ between the runs.

Curves are aligned by training step, or by sampled tokens (the running sum of
``rollout/generated_tokens``): runs that sample different amounts per step compare fairly by tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent_rl.progress import LOWER_IS_BETTER
from agent_rl.tracking import _flatten, read_metrics

DEFAULT_METRICS = ("rollout/reward_mean", "eval/success")
X_AXES = ("step", "tokens")
IGNORED_KEYS = ("run.dir", "run.name", "run.root")  # differ between any two runs


def load_run(run: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(``metrics.jsonl`` rows, flattened ``config.yaml``) of a run directory."""
    path = Path(run)
    rows = read_metrics(path)
    if not rows:
        raise ValueError(f"run '{run}': no metrics.jsonl with rows (a run directory of agent-rl train / sft)")
    config = path / "config.yaml"
    flat = _flatten(yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}
    return rows, flat


def curve(rows: list[dict[str, Any]], metric: str, x: str) -> list[tuple[float, float]]:
    """(x, value) of each row that logged ``metric``; x the step or the tokens sampled up to that step."""
    if x not in X_AXES:
        raise ValueError(f"--x {x}: unknown axis; known: {', '.join(X_AXES)}")
    out, tokens = [], 0.0
    last = {r["step"]: r for r in rows}  # a resumed run may log a step again: its last row counts
    for r in (last[s] for s in sorted(last)):
        tokens += r.get("rollout/generated_tokens", 0.0)
        if metric in r:
            out.append((float(r["step"]) if x == "step" else tokens, float(r[metric])))
    return out


def config_differences(configs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Keys whose value is not the same in every config (missing: None), except the run's own names."""
    keys = sorted({k for c in configs for k in c} - set(IGNORED_KEYS))
    return {k: [c.get(k) for c in configs] for k in keys if len({repr(c.get(k)) for c in configs}) > 1}


def summarize(rows: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """Final and best value of ``metric`` in one run (lower is better for a loss), None if never logged."""
    pts = curve(rows, metric, "step")
    if not pts:
        return None
    pick = min if metric.endswith(LOWER_IS_BETTER) else max
    best = pick(pts, key=lambda p: p[1])
    return {"final": pts[-1][1], "best": best[1], "best_step": int(best[0]), "steps": int(pts[-1][0])}


def compare(runs: list[str], metrics: tuple[str, ...] | None = None, x: str = "step", out: str | Path = "compare.png",
            labels: list[str] | None = None) -> tuple[Path, str]:
    """Write the PNG; return it and the text report (table + config differences). ``metrics`` None:
    those of ``DEFAULT_METRICS`` that some run logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(runs) < 1:
        raise ValueError("compare: give at least one run directory")
    loaded = [load_run(r) for r in runs]
    labels = labels or [Path(r).resolve().name for r in runs]
    if len(labels) != len(runs):
        raise ValueError(f"--labels: {len(labels)} labels for {len(runs)} runs")
    logged = {k for rows, _ in loaded for r in rows for k in r} - {"step"}
    metrics = metrics or tuple(m for m in DEFAULT_METRICS if m in logged) or DEFAULT_METRICS[:1]
    missing = [m for m in metrics if m not in logged]
    if missing:
        raise ValueError(f"--metrics: {', '.join(missing)} logged by none of the runs; logged: {', '.join(sorted(logged))}")

    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for label, (rows, _) in zip(labels, loaded, strict=True):
            pts = curve(rows, metric, x)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="." if len(pts) < 40 else None, label=label)
        ax.set_title(metric)
        ax.set_xlabel("step" if x == "step" else "sampled tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)

    lines = ["| run | metric | final | best | best step | steps |", "|---|---|---|---|---|---|"]
    for label, (rows, _) in zip(labels, loaded, strict=True):
        for metric in metrics:
            s = summarize(rows, metric)
            if s is not None:
                lines.append(f"| {label} | {metric} | {s['final']:.4f} | {s['best']:.4f} | {s['best_step']} | {s['steps']} |")
    diffs = config_differences([c for _, c in loaded])
    if diffs:
        lines += ["", "config differences:", "| key | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        lines += [f"| {k} | " + " | ".join(str(v) for v in vals) + " |" for k, vals in diffs.items()]
    else:
        lines += ["", "config differences: none"]
    return out, "\n".join(lines)

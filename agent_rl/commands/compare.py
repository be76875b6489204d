"""``agent-rl compare RUN...``: metric curves of several runs in one PNG, a table of final and best
values, and the config keys whose values differ between the runs.

Curves are aligned by training step, or by sampled tokens (the running sum of
``rollout/generated_tokens``): runs that sample different amounts per step compare fairly by tokens.
Runs given the same label (``--labels grpo,grpo,gigpo,gigpo``: seeds of one method) form a group:
each run is drawn faintly under the group's mean curve (the mean of the runs' i-th points), and the
table gives the mean ± standard deviation over the group's runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent_rl.run.progress import LOWER_IS_BETTER
from agent_rl.run.tracking import _flatten, read_metrics

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
    """Final, best (lower is better for a loss) and mean value of ``metric`` in one run, None if never logged."""
    return summarize_points(curve(rows, metric, "step"), metric)


def summarize_points(pts: list[tuple[float, float]], metric: str) -> dict[str, Any] | None:
    if not pts:
        return None
    pick = min if metric.endswith(LOWER_IS_BETTER) else max
    best = pick(pts, key=lambda p: p[1])
    return {
        "final": pts[-1][1],
        "best": best[1],
        "best_step": int(best[0]),
        "mean": sum(y for _, y in pts) / len(pts),
        "steps": int(pts[-1][0]),
    }


def mean_curve(curves: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The i-th point of the mean curve: the mean x and mean value of the runs' i-th points (up to the shortest run)."""
    curves = [c for c in curves if c]
    n = min((len(c) for c in curves), default=0)
    return [(sum(c[i][0] for c in curves) / len(curves), sum(c[i][1] for c in curves) / len(curves)) for i in range(n)]


def spread(values: list[float]) -> str:
    """mean ± standard deviation (population) of a group's values; one value as it is."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.4f}"
    return f"{mean:.4f} ± {(sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5:.4f}"


def table(groups: dict[str, list[list[dict[str, Any]]]], metrics: tuple[str, ...]) -> list[str]:
    """One row per (group, metric): final and mean (of the logged values: the area under the curve for
    evenly spaced points) as mean ± std over the group's runs; best and best step of its mean curve."""
    lines = ["| run | metric | final | best | best step | mean | steps |", "|---|---|---|---|---|---|---|"]
    for label, runs in groups.items():
        name = label if len(runs) == 1 else f"{label} ({len(runs)} runs)"
        for metric in metrics:
            each = [s for s in (summarize(rows, metric) for rows in runs) if s is not None]
            whole = summarize_points(mean_curve([curve(rows, metric, "step") for rows in runs]), metric)
            if whole is None:
                continue
            final, mean = spread([s["final"] for s in each]), spread([s["mean"] for s in each])
            lines.append(
                f"| {name} | {metric} | {final} | {whole['best']:.4f} | {whole['best_step']} | {mean} | {max(s['steps'] for s in each)} |"
            )
    return lines


def compare(
    runs: list[str],
    metrics: tuple[str, ...] | None = None,
    x: str = "step",
    out: str | Path = "compare.png",
    labels: list[str] | None = None,
) -> tuple[Path, str]:
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
        raise ValueError(
            f"--metrics: {', '.join(missing)} logged by none of the runs; logged: {', '.join(sorted(logged))}"
        )

    groups: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for color, (label, members) in enumerate(groups.items()):
            curves = [curve(loaded[i][0], metric, x) for i in members]
            pts = curves[0] if len(members) == 1 else mean_curve(curves)
            if len(members) > 1:
                for c in filter(None, curves):
                    ax.plot(*zip(*c, strict=True), color=f"C{color}", alpha=0.25, lw=1)
                label = f"{label} (mean of {len(members)})"
            if pts:
                ax.plot(
                    *zip(*pts, strict=True),
                    color=f"C{color}",
                    lw=2 if len(members) > 1 else 1.5,
                    marker="." if len(pts) < 40 else None,
                    label=label,
                )
        ax.set_title(metric)
        ax.set_xlabel("step" if x == "step" else "sampled tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)

    lines = table({label: [loaded[i][0] for i in members] for label, members in groups.items()}, metrics)
    diffs = config_differences([c for _, c in loaded])
    if diffs:
        # a column per group: the values of its runs, each once, in run order (a group's seeds: "0, 1, 2")
        cells = {
            k: [", ".join(dict.fromkeys(str(vals[i]) for i in members)) for members in groups.values()]
            for k, vals in diffs.items()
        }
        lines += ["", "config differences:", "| key | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
        lines += [f"| {k} | " + " | ".join(row) + " |" for k, row in cells.items()]
    else:
        lines += ["", "config differences: none"]
    return out, "\n".join(lines)

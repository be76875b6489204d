"""The summary of a comparison: the plot and table over the run directories, intervals, gaps and diagnostics."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.credit_assignment.methods import METHODS
from bench.credit_assignment.running import run_config, run_dir


def run_dirs_from_results(rows: list[dict], out: Path, args: argparse.Namespace) -> None:
    """Run directories for the results of a bench version that kept none (the measured 36k-token run
    in bench/results/credit_assignment/): each run's evaluation rows as ``metrics.jsonl``
    (``eval/success``; ``rollout/generated_tokens`` the tokens sampled since the previous
    evaluation, so that their running sum is the measured count; ``rollout/reward_mean_since_eval``
    the mean training reward of the steps in between) and a ``config.yaml`` resolved today from the
    bench's overrides (``--model`` as given; the runs' own files were not kept)."""
    curves: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        curves.setdefault((r["method"], r["seed"]), []).append(r)
    for (method, seed), curve in curves.items():
        path = run_dir(out, method, seed)
        if (path / "metrics.jsonl").exists():
            continue
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.yaml").write_text(run_config(method, seed, args, out).to_yaml())
        lines, before = [], 0
        for r in sorted(curve, key=lambda r: r["tokens"]):
            row = {"step": r["step"], "eval/success": r["success"], "rollout/generated_tokens": r["tokens"] - before}
            if r.get("train_reward") is not None:
                row["rollout/reward_mean_since_eval"] = r["train_reward"]
            lines.append(json.dumps(row) + "\n")
            before = r["tokens"]
        (path / "metrics.jsonl").write_text("".join(lines))


def rows_from_run_dirs(out: Path) -> list[dict]:
    """The evaluation rows of the run directories ``out/runs/METHOD-sSEED/metrics.jsonl``, for a comparison
    that kept its run directories but not its ``results-*.jsonl`` (the pre-registered ones commit only the
    run directories): ``tokens`` the running sum of ``rollout/generated_tokens`` up to the evaluation,
    ``success`` and ``reward`` its ``eval/success`` and ``eval/reward``, ``train_reward`` the mean
    ``rollout/reward_mean`` of the steps since the previous evaluation (None at step 0). Turns to success
    and wall time are not in ``metrics.jsonl``: None."""
    from agent_rl.run.tracking import read_metrics

    rows = []
    for path in sorted((out / "runs").glob("*-s*")):
        method, _, seed = path.name.rpartition("-s")
        if not seed.isdigit() or not (path / "metrics.jsonl").exists():
            continue
        tokens, rewards = 0, []
        for m in sorted(read_metrics(path), key=lambda m: m["step"]):
            tokens += int(m.get("rollout/generated_tokens", 0))
            if "rollout/reward_mean" in m:
                rewards.append(m["rollout/reward_mean"])
            if "eval/success" in m:
                rows.append(
                    {"method": method, "seed": int(seed), "tokens": tokens, "step": m["step"],
                     "success": m["eval/success"], "reward": m.get("eval/reward"), "turns_success": None,
                     "train_reward": sum(rewards) / len(rewards) if rewards else None, "seconds": None}
                )  # fmt: skip
                rewards = []
    return rows


def flatness_and_gaps(curves: dict[tuple[str, int], list[dict]], methods: list[str]) -> list[str]:
    """Has GRPO's curve flattened (slope of its seeds' evaluations over the last two thirds of the budget,
    per 10k tokens, by least squares), and each method's gap to GRPO, over each run's last 3 evaluations
    and over all its evaluations after 0, with the standard error of each difference
    across seeds (the seeds are independent runs)."""
    import numpy as np

    def per_seed(m: str, part: slice) -> np.ndarray:
        return np.array([np.mean([r["success"] for r in c[part]]) for k, c in sorted(curves.items()) if k[0] == m])

    out = []
    if "grpo" not in methods:
        return out
    if all(len(c) < 2 for c in curves.values()):  # common_reach cut every curve at 0: a run has only just begun
        return [
            "GRPO's slope and the gaps to it: none yet (a run has no evaluation after 0 tokens, so every curve is cut there)"
        ]
    # every GRPO seed's evaluations in one fit (seeds may have evaluated at different steps)
    points = np.array([(r["tokens"], r["success"]) for k, c in curves.items() if k[0] == "grpo" for r in c])
    xs, ys = points[:, 0], points[:, 1]
    late = xs >= xs.max() / 3
    # the fit's standard error needs two residual degrees of freedom, and a slope two token counts
    if late.sum() >= 4 and len(np.unique(xs[late])) >= 2:
        (slope, _), cov = np.polyfit(xs[late] / 10_000, ys[late], 1, cov=True)
        out.append(
            f"GRPO's slope over the last two thirds of the budget ({late.sum()} evaluations of all seeds, "
            f"{xs[late].min():.0f}-{xs.max():.0f} tokens): {slope:+.3f} ± {np.sqrt(cov[0, 0]):.3f} "
            "(standard error) success per 10k tokens"
        )
    for name, part in (("the last 3 evaluations", slice(-3, None)), ("all evaluations after 0", slice(1, None))):
        base = per_seed("grpo", part)
        for m in methods:
            if m == "grpo":
                continue
            t = per_seed(m, part)
            gap = t.mean() - base.mean()
            se = (
                np.sqrt(t.var(ddof=1) / len(t) + base.var(ddof=1) / len(base))
                if min(len(t), len(base)) > 1
                else float("nan")
            )
            out.append(f"{m} - grpo over {name}: {gap:+.3f} (standard error {se:.3f}, {len(t)} vs {len(base)} seeds)")
    return out


def mean_ci(values: list[float]) -> str:
    """``mean [lo, hi]``: Student's t 95% interval over the seeds (one seed: the mean alone)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return f"{mean:.3f}"
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = float(stats.t.ppf(0.975, n - 1)) * sd / n**0.5
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def area(curve: list[dict]) -> float:
    """Area under success against sampled tokens (trapezoids), divided by the tokens: the curve's mean height."""
    if len(curve) < 2 or curve[-1]["tokens"] <= 0:
        return curve[-1]["success"]
    total = sum(
        (b["tokens"] - a["tokens"]) * (a["success"] + b["success"]) / 2 for a, b in zip(curve, curve[1:], strict=False)
    )
    return total / curve[-1]["tokens"]


def results_table(curves: dict[tuple[str, int], list[dict]], methods: list[str]) -> list[str]:
    """Per method over its seeds: final held-out success (95% t interval), area under success vs tokens,
    turns of the successful held-out episodes at the last evaluation, wall time of a run."""
    lines = [
        "| method | seeds | final success [95% CI] | area under success vs tokens [95% CI] | turns to success | "
        "wall time per run (s) |",
        "|---|---|---|---|---|---|",
    ]
    for m in methods:
        runs = [c for k, c in sorted(curves.items()) if k[0] == m]
        turns = [c[-1]["turns_success"] for c in runs if c[-1].get("turns_success") is not None]
        seconds = [c[-1]["seconds"] for c in runs if c[-1].get("seconds") is not None]
        lines.append(
            f"| {m} | {len(runs)} | {mean_ci([c[-1]['success'] for c in runs])} | {mean_ci([area(c) for c in runs])} "
            f"| {f'{sum(turns) / len(turns):.1f}' if turns else '-'} "
            f"| {f'{sum(seconds) / len(seconds):.0f}' if seconds else '-'} |"
        )
    return lines


def diagnostics_table(out: Path, runs: list[tuple[str, int]], methods: list[str]) -> list[str]:
    """Each ``credit/`` metric's mean over all training steps of a method's runs (``-``: not logged)."""
    from agent_rl.run.tracking import read_metrics

    sums: dict[tuple[str, str], list[float]] = {}
    for m, s in runs:
        for row in read_metrics(run_dir(out, m, s)):
            for k, v in row.items():
                if k.startswith("credit/") and isinstance(v, int | float):
                    sums.setdefault((k, m), []).append(float(v))
    keys = sorted({k for k, _ in sums}, key=lambda k: (not k.startswith("credit/adv_var"), k))
    if not keys:
        return []
    lines = ["| diagnostic (mean over steps) | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for k in keys:
        cells = [f"{sum(v) / len(v):.4g}" if (v := sums.get((k, m))) else "-" for m in methods]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return lines


def empty_group_headroom(out: Path, curves: dict[tuple[str, int], list[dict]]) -> list[str]:
    """How much of GRPO's sampling fell in groups without signal, and what giving it signal could be
    worth: each step's ``credit/zero_adv_frac`` (groups whose rewards were all equal) times its
    sampled tokens, summed over the steps within the run's curve; then those tokens times GRPO's
    mean rate (final minus initial success over the tokens, per seed). The second number is an
    estimate under one assumption, written out in the line: that a token in such a group would
    have taught as much as a token in a group with signal. A method whose only gain over GRPO is
    signal in those groups (GiGPO's penalty, SPO's tracker, one larger group) wins about that much at
    most, under that assumption."""
    from agent_rl.run.tracking import read_metrics

    empty, total, rates = [], [], []
    for (m, s), c in sorted(curves.items()):
        if m != "grpo" or c[-1]["tokens"] <= 0:
            continue
        steps = [r for r in read_metrics(run_dir(out, m, s)) if "credit/zero_adv_frac" in r]
        if not steps:  # a run directory rebuilt from evaluations alone (the maze comparison's)
            continue
        seen = lost = 0.0
        for row in steps:
            seen += row.get("rollout/generated_tokens", 0.0)
            if seen <= c[-1]["tokens"]:
                lost += row["credit/zero_adv_frac"] * row.get("rollout/generated_tokens", 0.0)
        empty.append(lost)
        total.append(c[-1]["tokens"])
        rates.append((c[-1]["success"] - c[0]["success"]) / c[-1]["tokens"])
    if not empty:
        return []
    n = len(empty)
    lost, tokens, rate = sum(empty) / n, sum(total) / n, sum(rates) / n
    share = (
        f"GRPO's groups with equal rewards (no signal) held {lost / tokens:.0%} of its sampled tokens "
        f"({lost:.0f} of {tokens:.0f} a run, {n} seeds)"
    )
    if rate <= 0:
        return [f"{share}; GRPO's success did not rise ({rate * 10_000:+.3f} per 10k tokens), so no estimate"]
    return [
        f"{share}; at GRPO's mean rate ({rate * 10_000:+.3f} success per 10k tokens), giving them signal "
        f"is worth about {lost * rate:+.3f} success, if a token there would teach as much as one in a group "
        "with signal"
    ]


def common_reach(curves: dict[tuple[str, int], list[dict]]) -> dict[tuple[str, int], list[dict]]:
    """Every curve up to the tokens all runs reached: its evaluations before the shortest run's last
    one, and its first at or beyond it. Runs that all sampled their budget keep every evaluation,
    however many each had (steps of different sizes cross ``--eval-every-tokens`` at different
    steps); a run cut short by a time limit cuts the others at the same point of the budget."""
    curves = {k: sorted(c, key=lambda r: r["tokens"]) for k, c in curves.items()}
    reach = min(c[-1]["tokens"] for c in curves.values())
    return {
        k: [r for r in c if r["tokens"] < reach] + [next(r for r in c if r["tokens"] >= reach)]
        for k, c in curves.items()
    }


def summarize(rows: list[dict], out: Path) -> str:
    """``agent_rl.commands.compare``'s plot and table of held-out success against sampled tokens over the run
    directories (each method's seeds one group), then per method the final success with its 95%
    interval over seeds, the area under the curve, turns to success and wall time, the mean of each
    ``credit/`` diagnostic over the training steps, GRPO's late slope, its tokens in groups without
    signal (``empty_group_headroom``) and the gaps to GRPO over
    the tokens every run reached (``common_reach``: a run cut short by a time limit cuts the others
    at the same point, so every method gets the same token budget)."""
    from agent_rl.commands.compare import compare

    curves: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        curves.setdefault((r["method"], r["seed"]), []).append(r)
    curves = common_reach(curves)
    methods = [m for m in METHODS if any(k[0] == m for k in curves)]
    runs = [k for m in methods for k in sorted(curves) if k[0] == m]
    _, report = compare(
        [str(run_dir(out, m, s)) for m, s in runs],
        ("eval/success",),
        x="tokens",
        out=out / "success_vs_tokens.png",
        labels=[m for m, _ in runs],
    )
    parts = [report, "", *results_table(curves, methods)]
    diagnostics = diagnostics_table(out, runs, methods)
    if diagnostics:
        parts += ["", *diagnostics]
    table = "\n".join([*parts, "", *flatness_and_gaps(curves, methods), *empty_group_headroom(out, curves)])
    (out / "table.md").write_text(table + "\n")
    return table

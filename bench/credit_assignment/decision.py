"""The pre-registered analysis of a credit comparison (``bench/results/credit_prereg_*/PLAN.md``).

``python -m bench.credit_assignment.decision OUT_B OUT_A`` reads the run directories of the planned settings
(``OUT/runs/METHOD-sSEED/metrics.jsonl``) and prints, for each planned comparison:

- the measure of each seed: its mean held-out success over the evaluations after step 0 (``eval/success``
  of every row after the 0-token one), and its mean on-policy training reward (``rollout/reward_mean`` of
  every training step);
- the difference of the two methods' means with Welch's 95% interval and two-sided p value;
- Holm's adjusted p value over the secondary comparisons (the primary one stands alone);
- the decision: ``helps`` when the (adjusted) p is below ``ALPHA``, the difference is positive and the
  training reward's difference has the same sign; ``hurts`` for the mirror case; otherwise ``no difference
  shown`` (at this size: not evidence of no effect).

Then, descriptive, each method's measure and training reward over its seeds with Student's t 95% intervals.

The comparisons and the rule are fixed here, before the runs, as the plan names them. A decision is made
only at the planned size: a comparison with fewer than ``PLANNED_SEEDS`` finished seeds a side reads
``interim``, and the secondary comparisons are decided only once all seven are at that size (Holm's
family is the seven, not those present).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

ALPHA = 0.05
PLANNED_SEEDS = 12  # both plans' seeds 0-11
# (setting directory's suffix, method, baseline): the primary comparison first, then the secondary family
PRIMARY = ("frozenlake", "gigpo", "grpo")
SECONDARY = [
    ("frozenlake", "g2po", "grpo"),
    ("frozenlake", "gigpo_g32", "grpo_g32"),
    ("frozenlake", "grpo_g32", "grpo"),
    ("hanoi", "gigpo", "grpo"),
    ("hanoi", "g2po", "grpo"),
    ("hanoi", "gigpo_g32", "grpo_g32"),
    ("hanoi", "grpo_g32", "grpo"),
]


@dataclass(frozen=True)
class SeedMeasure:
    success: float  # mean held-out success over the evaluations after step 0
    train_reward: float  # mean on-policy training reward over the training steps


@dataclass(frozen=True)
class Comparison:
    setting: str
    method: str
    baseline: str
    n: tuple[int, int]
    diff: float  # mean success of method - mean of baseline
    ci: tuple[float, float]  # Welch's 95% interval of diff
    p: float  # Welch's two-sided p value
    reward_diff: float  # the same difference of the mean training reward
    p_adjusted: float | None = None  # Holm's, for a secondary comparison

    @property
    def complete(self) -> bool:
        return min(self.n) >= PLANNED_SEEDS

    def decision(self) -> str:
        p = self.p if self.p_adjusted is None else self.p_adjusted
        if p < ALPHA and self.diff > 0 and self.reward_diff > 0:
            return "helps"
        if p < ALPHA and self.diff < 0 and self.reward_diff < 0:
            return "hurts"
        return "no difference shown"


def seed_measure(run: Path) -> SeedMeasure | None:
    """A run's measure, None while it has no evaluation after step 0 (a run still going, or lost)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r["eval/success"] for r in rows if r.get("step", 0) > 0 and "eval/success" in r]
    rewards = [r["rollout/reward_mean"] for r in rows if "rollout/reward_mean" in r]
    if not evals or not rewards:
        return None
    return SeedMeasure(statistics.fmean(evals), statistics.fmean(rewards))


def measures(out: Path, method: str) -> list[SeedMeasure]:
    """Every finished seed of ``method`` under ``out/runs``."""
    found = [
        seed_measure(run)
        for run in sorted((out / "runs").glob(f"{method}-s*"))
        if run.name[len(method) + 2 :].isdigit()
    ]
    return [m for m in found if m is not None]


def welch(a: list[float], b: list[float]) -> tuple[float, tuple[float, float], float]:
    """mean(a) - mean(b), Welch's 95% interval and two-sided p value (nan with fewer than 2 values a side)."""
    from scipy import stats

    diff = statistics.fmean(a) - statistics.fmean(b)
    if min(len(a), len(b)) < 2:
        return diff, (float("nan"), float("nan")), float("nan")
    if statistics.variance(a) == 0 and statistics.variance(b) == 0:  # Welch's test is undefined
        return diff, (diff, diff), 1.0 if diff == 0 else 0.0
    test = stats.ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(0.95)
    return diff, (float(ci.low), float(ci.high)), float(test.pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the input's order (nan stays nan and counts in the family)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i] != pvalues[i], pvalues[i]))  # nan last
    out, running = [float("nan")] * m, 0.0
    for rank, i in enumerate(order):
        if pvalues[i] != pvalues[i]:
            continue
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def compare(outs: dict[str, Path], setting: str, method: str, baseline: str) -> Comparison | None:
    if setting not in outs:
        return None
    a, b = measures(outs[setting], method), measures(outs[setting], baseline)
    if not a or not b:
        return None
    diff, ci, p = welch([m.success for m in a], [m.success for m in b])
    reward = statistics.fmean(m.train_reward for m in a) - statistics.fmean(m.train_reward for m in b)
    return Comparison(setting, method, baseline, (len(a), len(b)), diff, ci, p, reward)


def decide(outs: dict[str, Path]) -> tuple[Comparison | None, list[Comparison]]:
    """The primary comparison and the secondary ones present. Holm's adjustment is applied only when the
    whole secondary family is present at its planned size; before that the secondary p values stand
    unadjusted and every secondary comparison is interim."""
    primary = compare(outs, *PRIMARY)
    secondary = [c for c in (compare(outs, *s) for s in SECONDARY) if c is not None]
    if len(secondary) < len(SECONDARY) or not all(c.complete for c in secondary):
        return primary, secondary
    adjusted = holm([c.p for c in secondary])
    return primary, [Comparison(**{**c.__dict__, "p_adjusted": q}) for c, q in zip(secondary, adjusted, strict=True)]


def line(c: Comparison, secondary: bool = False) -> str:
    p = f"p {c.p:.3f}" + (f", Holm {c.p_adjusted:.3f}" if c.p_adjusted is not None else "")
    decided = c.complete and (not secondary or c.p_adjusted is not None)
    return (
        f"| {c.setting} | {c.method} - {c.baseline} | {c.n[0]} vs {c.n[1]} | {c.diff:+.3f} "
        f"[{c.ci[0]:+.3f}, {c.ci[1]:+.3f}] | {p} | {c.reward_diff:+.3f} | {c.decision() if decided else 'interim'} |"
    )


def method_lines(outs: dict[str, Path]) -> list[str]:
    """Each method's measure and training reward over its finished seeds, per setting (descriptive)."""
    from bench.credit_assignment.methods import METHODS
    from bench.credit_assignment.summary import mean_ci

    lines = [
        "| setting | method | seeds | measure [95% CI] | training reward [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for setting, out in outs.items():
        for method in METHODS:
            if found := measures(out, method):
                lines.append(
                    f"| {setting} | {method} | {len(found)} | {mean_ci([m.success for m in found])} "
                    f"| {mean_ci([m.train_reward for m in found])} |"
                )
    return lines


def report(outs: dict[str, Path]) -> str:
    primary, secondary = decide(outs)
    head = [
        "| setting | comparison | seeds | success difference [Welch 95% CI] | p | training reward difference | decision |",
        "|---|---|---|---|---|---|---|",
    ]
    lines = ["Primary comparison (alone, alpha 0.05):", "", *head]
    lines.append(line(primary) if primary else f"| {PRIMARY[0]} | {PRIMARY[1]} - {PRIMARY[2]} | no finished runs |")
    if secondary and secondary[0].p_adjusted is not None:
        lines += ["", f"Secondary comparisons (Holm over the {len(SECONDARY)}):", "", *head]
    else:
        lines += [
            "",
            f"Secondary comparisons: interim, unadjusted ({len(secondary)} of {len(SECONDARY)} present; Holm's"
            f" correction and the decisions wait for all {len(SECONDARY)} at {PLANNED_SEEDS} seeds a side):",
            "",
            *head,
        ]
    lines += [line(c, secondary=True) for c in secondary]
    lines += ["", "Per method (the measure and the training reward of each seed, t intervals over the seeds):", ""]
    return "\n".join(lines + method_lines(outs))


def main() -> None:
    p = argparse.ArgumentParser(description="the pre-registered decision of the credit comparison")
    p.add_argument("outs", nargs="+", type=Path, help="result directories, named credit_prereg_<setting>")
    args = p.parse_args()
    outs = {}
    for out in args.outs:
        if not (out / "runs").is_dir():
            p.error(f"{out}: no runs/ directory")
        outs[out.name.rsplit("_", 1)[-1]] = out
    print(report(outs))


if __name__ == "__main__":
    main()

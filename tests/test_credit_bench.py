"""bench/credit_assignment/ end to end: every method, 1 seed, 2 steps, on the smallest setting.

The comparison's own command, as the issue asks of CI: each method's run directory gets
``config.yaml`` and a ``metrics.jsonl`` whose training steps carry the ``credit/`` diagnostics
(docs/learner.md), and ``table.md`` summarises them per method. The tiny model is untrained and the
mazes are cut to 3 turns: this checks the path, not what the methods learn.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import cli_runner
from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[1]
BRANCHING = {"cbpo", "arpo", "vineppo"}
GRAPH = {"gigpo", "g2po", "gigpo_no_penalty", "gigpo_g32"}


def load_bench():
    return importlib.import_module("bench.credit_assignment")


def test_summary_numbers_hand_computed():
    bench = load_bench()
    # mean 0.6, sd 0.141421, t(1 df) 12.706: half width 12.706 * 0.141421 / sqrt(2) = 1.2706
    assert bench.mean_ci([0.5, 0.7]) == "0.600 [-0.671, 1.871]"
    assert bench.mean_ci([0.25]) == "0.250"
    # 12 seeds (11 df): t 2.2010, not the normal 1.96; sd of 0.1 x 6 and 0.3 x 6 is 0.104447: half 0.0664
    assert bench.mean_ci([0.1] * 6 + [0.3] * 6) == "0.200 [0.134, 0.266]"
    # trapezoids over tokens 0, 10, 30: (10 * 0.3 + 20 * 0.4) / 30 = 0.3667
    curve = [{"tokens": 0, "success": 0.2}, {"tokens": 10, "success": 0.4}, {"tokens": 30, "success": 0.4}]
    assert bench.area(curve) == (10 * 0.3 + 20 * 0.4) / 30
    won = [SimpleNamespace(reward=1.0, turns_N=[0] * 12), SimpleNamespace(reward=1.0, turns_N=[0] * 15)]
    lost = [SimpleNamespace(reward=0.0, turns_N=[0] * 20), SimpleNamespace(reward=None, turns_N=[])]
    assert bench.turns_to_success(won + lost) == 13.5 and bench.turns_to_success(lost) is None


def test_runs_with_more_evaluations_keep_their_last_and_a_cut_run_cuts_the_others():
    bench = load_bench()

    def curve(*tokens):
        return [{"tokens": t, "success": t / 10_000} for t in tokens]

    # two complete runs of a 6600-token budget: steps of ~2.3k and ~2.1k tokens cross 2200-token
    # evaluation marks at different steps, so one has an evaluation more; both keep their final one
    full = {("grpo", 0): curve(0, 2300, 4600, 6900), ("spo", 0): curve(0, 4200, 6300, 8400)}
    assert bench.common_reach(full) == full
    # a run stopped at 4500 tokens: the others up to their first evaluation at or beyond 4500
    cut = bench.common_reach({**full, ("gigpo", 0): curve(4500, 0, 2200)})
    assert [[r["tokens"] for r in c] for c in cut.values()] == [[0, 2300, 4600], [0, 4200, 6300], [0, 2200, 4500]]
    lines = bench.flatness_and_gaps(cut, ["grpo", "spo", "gigpo"])
    # over all evaluations after 0: spo (0.42 + 0.63) / 2 - grpo (0.23 + 0.46) / 2 = 0.18
    assert "spo - grpo over all evaluations after 0: +0.180 (standard error nan, 1 vs 1 seeds)" in lines

    # a study in progress whose newest run has only its 0-token evaluation: every curve is cut to it, and
    # there is no slope and no gap to print (a fit through one token count used to end the run's summary
    # in numpy's LinAlgError, after the run's own rows were written)
    started = bench.common_reach({**full, ("grpo", 1): curve(0), ("grpo", 2): curve(0, 2300)})
    assert [len(c) for c in started.values()] == [1, 1, 1, 1]
    assert bench.flatness_and_gaps(started, ["grpo", "spo"]) == [
        "GRPO's slope and the gaps to it: none yet (a run has no evaluation after 0 tokens, so every curve is cut there)"
    ]
    # four GRPO evaluations late in the budget, all at one token count: no slope, the gaps still
    same = {("grpo", s): curve(0, 4600) for s in range(4)} | {("spo", 0): curve(0, 4600)}
    lines = bench.flatness_and_gaps(same, ["grpo", "spo"])
    assert not any(line.startswith("GRPO's slope") for line in lines)
    assert "spo - grpo over all evaluations after 0: +0.000 (standard error nan, 1 vs 4 seeds)" in lines


def test_grpo_tokens_in_groups_without_signal_and_their_worth_hand_computed(tmp_path):
    bench = load_bench()

    def write(method, seed, steps):
        run = bench.run_dir(tmp_path, method, seed)
        run.mkdir(parents=True)
        rows = [{"step": 0, "eval/success": 0.1, "rollout/generated_tokens": 0.0}] + [
            {"step": i, "rollout/generated_tokens": t, "credit/zero_adv_frac": z} for i, (t, z) in enumerate(steps, 1)
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    # seed 0: its third step lies beyond its curve's last evaluation (2000 tokens): 500 + 250 = 750 tokens
    # without signal; seed 1: 0 + 500. Rates: (0.3 - 0.1) / 2000 and (0.5 - 0.1) / 2000, mean 1.5e-4 a token.
    write("grpo", 0, [(1000, 0.5), (1000, 0.25), (1000, 1.0)])
    write("grpo", 1, [(1000, 0.0), (1000, 0.5)])
    write("gigpo", 0, [(1000, 1.0), (1000, 1.0)])  # not GRPO: not counted
    curves = {
        ("grpo", 0): [{"tokens": 0, "success": 0.1}, {"tokens": 2000, "success": 0.3}],
        ("grpo", 1): [{"tokens": 0, "success": 0.1}, {"tokens": 2000, "success": 0.5}],
        ("gigpo", 0): [{"tokens": 0, "success": 0.1}, {"tokens": 2000, "success": 0.9}],
    }
    (line,) = bench.empty_group_headroom(tmp_path, curves)
    # 625 of 2000 tokens (31%); 1.5 success per 10k tokens; 625 * 1.5e-4 = 0.094
    assert line.startswith(
        "GRPO's groups with equal rewards (no signal) held 31% of its sampled tokens (625 of 2000 a run, 2 seeds); "
        "at GRPO's mean rate (+1.500 success per 10k tokens), giving them signal is worth about +0.094 success"
    )
    falling = {k: [c[0], {**c[1], "success": 0.0}] for k, c in curves.items()}
    (line,) = bench.empty_group_headroom(tmp_path, falling)
    assert line.endswith("GRPO's success did not rise (-0.500 per 10k tokens), so no estimate")
    assert bench.empty_group_headroom(tmp_path, {("gigpo", 0): curves[("gigpo", 0)]}) == []


def test_every_setting_and_method_is_a_valid_config_and_env(tmp_path, tiny_model_dir):
    """Each setting's overrides with each method's: the config validates and its env is made (no JVM
    starts before a reset); a typo in a setting fails here, not after its SFT."""
    from argparse import Namespace

    from agent_rl.run.envloader import env_factory

    bench = load_bench()
    for name, setting in bench.SETTINGS.items():
        for method in bench.METHODS:
            args = Namespace(setting=name, model=tiny_model_dir, device="cpu", lr=None, overrides=[])
            cfg = bench.run_config(method, 0, args, tmp_path)
            assert cfg.env.id == setting.env_id and cfg.learner.lr == setting.lr
        env_factory(cfg.env)  # makes one env and closes it: bad options raise
    rooms = bench.run_config("grpo", 0, Namespace(setting="twx_coin_rooms", model=tiny_model_dir, device="cpu",
                                                   lr=None, overrides=[]), tmp_path)  # fmt: skip
    assert rooms.env.options["view"] == "exits" and rooms.rollout.max_turns == 30


def test_the_shared_initial_evaluation_is_reused_only_for_the_same_evaluation(tmp_path):
    """initial.json is read back for the same model, episodes, setting and command-line overrides; a
    different turn limit (an override) is measured again and replaces it."""
    from argparse import Namespace

    bench = load_bench()
    measured = []

    def measure(success):
        return lambda: measured.append(success) or {"success": success}

    args = Namespace(model=tmp_path, eval_episodes=32, setting="hanoi_sparse", overrides=[])
    assert bench.initial_point(args, tmp_path, measure(0.5)) == {"success": 0.5}
    assert bench.initial_point(args, tmp_path, measure(0.9)) == {"success": 0.5}
    args.overrides = ["env.options.max_turns=20", "rollout.max_turns=20"]
    assert bench.initial_point(args, tmp_path, measure(0.25)) == {"success": 0.25}
    assert bench.initial_point(args, tmp_path, measure(0.9)) == {"success": 0.25}
    assert measured == [0.5, 0.25]
    assert json.loads((tmp_path / "initial.json").read_text())["key"]["overrides"] == args.overrides
    args.initial_episodes = 1024  # a larger start evaluation is another evaluation
    assert bench.initial_point(args, tmp_path, measure(0.125)) == {"success": 0.125}
    assert json.loads((tmp_path / "initial.json").read_text())["key"]["episodes"] == 1024


def test_the_preregistered_decision_hand_computed(tmp_path):
    """Holm's adjustment, Welch's test and the decision rule on hand-made runs (bench/credit_assignment/decision.py)."""
    decision = importlib.import_module("bench.credit_assignment.decision")
    # Holm: sorted 0.01, 0.02, 0.04 over m=3 -> 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04; nan stays
    assert decision.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert decision.holm([0.5, float("nan")])[0] == 1.0  # the nan counts in the family: min(1, 2 * 0.5)
    # Welch: a = 0.5, 0.7 (mean 0.6, var 0.02); b = 0.1, 0.2, 0.3 (mean 0.2, var 0.01);
    # se = sqrt(0.02/2 + 0.01/3) = 0.11547; t = 3.4641; df = se^4 / ((0.01^2)/1 + (0.003333^2)/2) = 1.6842
    diff, (lo, hi), p = decision.welch([0.5, 0.7], [0.1, 0.2, 0.3])
    assert diff == pytest.approx(0.4)
    from scipy import stats

    half = stats.t.ppf(0.975, 1.684211) * 0.115470
    assert (lo, hi) == pytest.approx((0.4 - half, 0.4 + half), abs=1e-5)
    assert p == pytest.approx(2 * stats.t.sf(3.464102, 1.684211), abs=1e-6)

    def runs(out, method, per_seed):  # per seed: (evaluations after step 0, training rewards)
        for seed, (evals, rewards) in enumerate(per_seed):
            run = out / "runs" / f"{method}-s{seed}"
            run.mkdir(parents=True)
            rows = [{"step": 0, "eval/success": 0.9}]  # the start: never part of the measure
            rows += [{"step": i + 1, "rollout/reward_mean": r} for i, r in enumerate(rewards)]
            rows += [{"step": len(rewards), "eval/success": e} for e in evals]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    out = tmp_path / "credit_prereg_frozenlake"
    runs(out, "grpo", [([0.1, 0.2], [0.1, 0.1]), ([0.2, 0.2], [0.2, 0.0]), ([0.3, 0.1], [0.1, 0.1])])
    runs(out, "gigpo", [([0.5, 0.7], [0.3, 0.3]), ([0.6, 0.6], [0.4, 0.2]), ([0.7, 0.6], [0.3, 0.3])])
    (out / "runs" / "gigpo-s3").mkdir()  # a run still going (no metrics yet) is left out
    (out / "runs" / "gigpo-s3" / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/success": 0.9}) + "\n")
    primary, secondary = decision.decide({"frozenlake": out})
    assert (
        primary.n == (3, 3)
        and primary.diff == pytest.approx((0.6 + 0.6 + 0.65) / 3 - (0.15 + 0.2 + 0.2) / 3)
        and secondary == []
    )
    assert primary.reward_diff == pytest.approx(0.3 - 0.1)
    assert primary.p < 0.05 and primary.decision() == "helps"
    # the same success gap with the training reward's difference of the other sign is not "helps"
    assert decision.Comparison(**{**primary.__dict__, "reward_diff": -0.1}).decision() == "no difference shown"
    assert decision.Comparison(**{**primary.__dict__, "p_adjusted": 0.06}).decision() == "no difference shown"
    assert "| frozenlake | gigpo - grpo | 3 vs 3 | +0.433" in decision.report({"frozenlake": out})
    # per method: GRPO's measures 0.15, 0.2, 0.2 (mean 0.18333, sd 0.028868, t(2 df) 4.3027: half 0.07171);
    # its training rewards 0.1 each (no spread)
    assert "| frozenlake | grpo | 3 | 0.183 [0.112, 0.255] | 0.100 [0.100, 0.100] |" in decision.report(
        {"frozenlake": out}
    )


def test_the_decision_waits_for_the_planned_size(tmp_path, monkeypatch):
    """Below the planned seeds a comparison is interim; Holm's family is the seven, adjusted only when all are in."""
    decision = importlib.import_module("bench.credit_assignment.decision")

    def runs(out, method, successes):  # one evaluation after step 0 and one training step per seed
        for seed, success in enumerate(successes):
            run = out / "runs" / f"{method}-s{seed}"
            run.mkdir(parents=True)
            rows = [{"step": 1, "rollout/reward_mean": success}, {"step": 1, "eval/success": success}]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    outs = {setting: tmp_path / f"credit_prereg_{setting}" for setting in ("frozenlake", "hanoi")}
    runs(outs["frozenlake"], "grpo", [0.1, 0.2, 0.3])
    runs(outs["frozenlake"], "gigpo", [0.5, 0.7, 0.6])
    runs(outs["frozenlake"], "g2po", [0.2, 0.3, 0.4])
    report = decision.report({"frozenlake": outs["frozenlake"]})
    assert report.splitlines()[4].endswith("| +0.400 | interim |")  # 3 of the planned 12 seeds: no decision
    assert "interim, unadjusted (1 of 7 present" in report and "Holm 0." not in report

    monkeypatch.setattr(decision, "PLANNED_SEEDS", 3)
    primary, [g2po] = decision.decide({"frozenlake": outs["frozenlake"]})
    assert primary.decision() == "helps" and g2po.p_adjusted is None  # the primary stands alone; the family waits
    assert decision.report({"frozenlake": outs["frozenlake"]}).splitlines()[4].endswith("| +0.400 | helps |")

    for method in ("gigpo_g32", "grpo_g32"):
        runs(outs["frozenlake"], method, [0.1, 0.2, 0.3])
    for method, successes in [("grpo", [0.1, 0.2, 0.3]), ("gigpo", [0.2, 0.3, 0.5]), ("g2po", [0.1, 0.3, 0.3])]:
        runs(outs["hanoi"], method, successes)
    for method in ("gigpo_g32", "grpo_g32"):
        runs(outs["hanoi"], method, [0.2, 0.2, 0.4])
    primary, secondary = decision.decide(outs)
    assert [(c.setting, c.method, c.baseline) for c in secondary] == decision.SECONDARY
    assert [c.p_adjusted for c in secondary] == decision.holm([c.p for c in secondary])
    assert "Secondary comparisons (Holm over the 7):" in decision.report(outs)


def _metrics(run: Path, rows: list[dict]) -> None:
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_evaluation_rows_of_run_directories_hand_computed(tmp_path):
    """A comparison that committed only its run directories: each evaluation's tokens are the running sum of
    the sampled tokens, its training reward the mean over the steps since the evaluation before."""
    summary = importlib.import_module("bench.credit_assignment.summary")
    _metrics(
        tmp_path / "runs" / "gigpo_g32-s3",
        [
            {"step": 0, "eval/success": 0.1, "eval/reward": 0.15, "rollout/generated_tokens": 0},
            {"step": 1, "rollout/reward_mean": 0.25, "rollout/generated_tokens": 300},
            {
                "step": 2,
                "rollout/reward_mean": 0.5,
                "rollout/generated_tokens": 400,
                "eval/success": 0.2,
                "eval/reward": 0.3,
            },
            {
                "step": 3,
                "rollout/reward_mean": 0.75,
                "rollout/generated_tokens": 500,
                "eval/success": 0.4,
                "eval/reward": 0.4,
            },
        ],
    )
    (tmp_path / "runs" / "notes").mkdir()  # not a METHOD-sSEED directory
    rows = summary.rows_from_run_dirs(tmp_path)
    assert [
        (r["method"], r["seed"], r["step"], r["tokens"], r["success"], r["reward"], r["train_reward"]) for r in rows
    ] == [
        ("gigpo_g32", 3, 0, 0, 0.1, 0.15, None),
        ("gigpo_g32", 3, 2, 700, 0.2, 0.3, 0.375),  # (0.25 + 0.5) / 2
        ("gigpo_g32", 3, 3, 1200, 0.4, 0.4, 0.75),
    ]


def test_summarize_only_from_run_directories_alone(tmp_path):
    """``--summarize-only`` on a directory with run directories and no results files writes the table and plot."""
    for method, seed, success in [("grpo", 0, 0.2), ("grpo", 1, 0.4), ("gigpo", 0, 0.6)]:
        _metrics(
            tmp_path / "runs" / f"{method}-s{seed}",
            [
                {"step": 0, "eval/success": 0.1, "rollout/generated_tokens": 0},
                {"step": 1, "rollout/reward_mean": success, "rollout/generated_tokens": 100, "eval/success": success},
            ],
        )
    cmd = [sys.executable, "-m", "bench.credit_assignment", "--setting", "prereg_frozenlake", "--summarize-only",
           "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "table.md").read_text()
    assert "| grpo | 2 | 0.300 [-0.971, 1.571] |" in table  # mean of 0.2 and 0.4, t(1) interval: 0.1 * 12.706
    assert "| gigpo | 1 | 0.600 |" in table
    assert (tmp_path / "success_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run([*cmd[:-1], str(empty)], capture_output=True, text=True, env=cli_env(), timeout=300, cwd=ROOT)
    assert done.returncode == 2 and "no results-*.jsonl, results.jsonl or runs/*/metrics.jsonl" in done.stderr


@pytest.mark.parametrize("setting", ["frozenlake", "hanoi"])
def test_the_prereg_readme_commands(tmp_path, setting):
    """bench/results/credit_prereg_SETTING/README.md's commands, as written, on a copy of both settings'
    committed run directories (the decision reads both): the decision prints the table the README shows,
    the summary writes the committed table."""
    import shutil

    from tests.test_docs_commands import _run, documented_commands

    results = f"bench/results/credit_prereg_{setting}"
    decide, summarize = documented_commands(f"{results}/README.md")
    assert decide.startswith("python -m bench.credit_assignment.decision ")
    assert summarize.startswith("python -m bench.credit_assignment ") and "--summarize-only" in summarize
    for each in ("frozenlake", "hanoi"):
        shutil.copytree(
            ROOT / f"bench/results/credit_prereg_{each}",
            tmp_path / f"bench/results/credit_prereg_{each}",
            ignore=shutil.ignore_patterns("*.png", "model", "results.jsonl"),
        )
    (tmp_path / results / "table.md").unlink()
    readme = (ROOT / results / "README.md").read_text()
    decided = _run(decide, tmp_path).stdout
    assert decided.strip() and decided.strip() in readme  # the README's table is the command's output
    _run(summarize, tmp_path)
    table = (tmp_path / results / "table.md").read_text()
    assert table == (ROOT / results / "table.md").read_text()
    per_method = [row for row in table.splitlines() if row.split(" | ")[1:2] == ["12"]]  # | method | 12 | ...
    assert len(per_method) == 5 and all(row in readme for row in per_method)  # the README's table, as written
    assert (tmp_path / results / "success_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_model_directory_is_one_line(tmp_path):
    cmd = [sys.executable, "-m", "bench.credit_assignment", "--model", str(tmp_path / "nope")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(f"error: --model {tmp_path / 'nope'}: no such model directory")


def test_every_method_logs_its_credit_diagnostics(tmp_path, tiny_model_dir):
    METHODS = load_bench().METHODS  # noqa: N806 (the bench's constant)

    out = tmp_path / "bench"
    cmd = [
        sys.executable, "-m", "bench.credit_assignment", "--model", str(tiny_model_dir), "--seeds", "0",
        "--max-steps", "2", "--budget-tokens", "1000000", "--eval-episodes", "2", "--out", str(out),
        "trainer.prompts_per_step=1", "rollout.max_turns=3", "env.options.max_turns=3",
    ]  # fmt: skip
    # a child of the preloaded server (tests/cli_runner.py): the bench runs every method in this one process
    done = cli_runner.run(cmd, ROOT, {**cli_env(), "OMP_NUM_THREADS": "1"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (out / "table.md").read_text()
    for method in METHODS:
        run = out / "runs" / f"{method}-s0"
        assert (run / "config.yaml").exists() and not (run / "checkpoints").exists()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [0, 1, 2], method  # the 0-token evaluation, then 2 steps
        for r in rows[1:]:
            assert 0.0 <= r["credit/zero_adv_frac"] <= 1.0, method
            assert r["credit/adv_var_turn_1"] >= 0.0, method
            if method in BRANCHING:
                assert r["credit/branch_points"] >= 0.0 and 0.0 <= r["credit/branch_outcome_differs_frac"] <= 1.0
            assert ("credit/branch_points" in r) == (method in BRANCHING), method
            assert ("credit/shared_states" in r) == (method in GRAPH), method
            assert ("credit/pooled_turn_frac" in r) == (method in GRAPH), method
    # the per-method summary: one column per method, one row per diagnostic
    assert "| diagnostic (mean over steps) | " + " | ".join(METHODS) + " |" in table
    for key in ("credit/zero_adv_frac", "credit/adv_var_turn_1", "credit/branch_points", "credit/shared_states"):
        assert f"| {key} | " in table
    assert "| method | seeds | final success [95% CI] |" in table

"""agent-rl compare: curves aligned by step or sampled tokens, a table, the config differences."""

from __future__ import annotations

import json

import pytest

from agent_rl.cli import main
from agent_rl.commands.compare import compare, config_differences, curve


def _run(path, rows, config):
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    return path


@pytest.fixture
def runs(tmp_path):
    a = _run(
        tmp_path / "a",
        [
            {"step": 1, "rollout/reward_mean": 0.1, "rollout/generated_tokens": 100.0},
            {"step": 2, "rollout/reward_mean": 0.5, "rollout/generated_tokens": 100.0, "eval/success": 0.25},
            {
                "step": 2,
                "rollout/reward_mean": 0.4,
                "rollout/generated_tokens": 100.0,
                "eval/success": 0.5,
            },  # resumed: redone
            {"step": 3, "rollout/reward_mean": 0.3, "rollout/generated_tokens": 50.0},
        ],
        {
            "trainer": {"steps": 3, "seed": 0},
            "algorithm": {"loss": {"name": "ppo_clip"}},
            "run": {"dir": "x", "name": "a"},
        },
    )
    b = _run(
        tmp_path / "b",
        [
            {"step": 1, "rollout/reward_mean": 0.2, "rollout/generated_tokens": 300.0},
            {"step": 2, "rollout/reward_mean": 0.6, "rollout/generated_tokens": 300.0},
        ],
        {
            "trainer": {"steps": 2, "seed": 0},
            "algorithm": {"loss": {"name": "cispo", "eps_high": 5.0}},
            "run": {"dir": "y", "name": "b"},
        },
    )
    return a, b


def test_curves_by_step_and_tokens(runs):
    from agent_rl.run.tracking import read_metrics

    rows = read_metrics(runs[0])
    assert curve(rows, "rollout/reward_mean", "step") == [(1.0, 0.1), (2.0, 0.4), (3.0, 0.3)]
    assert curve(rows, "rollout/reward_mean", "tokens") == [(100.0, 0.1), (200.0, 0.4), (250.0, 0.3)]
    assert curve(rows, "eval/success", "step") == [(2.0, 0.5)]
    with pytest.raises(ValueError, match="--x epochs: unknown axis; known: step, tokens"):
        curve(rows, "eval/success", "epochs")


def test_config_differences_ignore_the_run_names():
    a = {"trainer.steps": 3, "algorithm.loss.name": "ppo_clip", "run.dir": "x", "trainer.seed": 0}
    b = {
        "trainer.steps": 2,
        "algorithm.loss.name": "cispo",
        "algorithm.loss.eps_high": 5.0,
        "run.dir": "y",
        "trainer.seed": 0,
    }
    assert config_differences([a, b]) == {
        "algorithm.loss.eps_high": [None, 5.0],
        "algorithm.loss.name": ["ppo_clip", "cispo"],
        "trainer.steps": [3, 2],
    }


def test_compare_writes_png_and_table(runs, tmp_path):
    out, report = compare([str(r) for r in runs], x="tokens", out=tmp_path / "cmp" / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.splitlines() == [
        "| run | metric | final | best | best step | mean | steps |",
        "|---|---|---|---|---|---|---|",
        "| a | rollout/reward_mean | 0.3000 | 0.4000 | 2 | 0.2667 | 3 |",  # (0.1 + 0.4 + 0.3) / 3
        "| a | eval/success | 0.5000 | 0.5000 | 2 | 0.5000 | 2 |",
        "| b | rollout/reward_mean | 0.6000 | 0.6000 | 2 | 0.4000 | 2 |",
        "",
        "config differences:",
        "| key | a | b |",
        "|---|---|---|",
        "| algorithm.loss.eps_high | None | 5.0 |",
        "| algorithm.loss.name | ppo_clip | cispo |",
        "| trainer.steps | 3 | 2 |",
    ]


def test_cli_compare_and_its_errors(runs, tmp_path, capsys):
    png = tmp_path / "c.png"
    assert (
        main(
            [
                "compare",
                str(runs[0]),
                str(runs[1]),
                "--metrics",
                "rollout/reward_mean",
                "--labels",
                "ppo,cispo",
                "--out",
                str(png),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| cispo | rollout/reward_mean | 0.6000 |" in out and f"plot written to {png}" in out and png.exists()
    assert main(["compare", str(runs[0]), "--metrics", "train/nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: --metrics: train/nope logged by none of the runs; logged: eval/success, rollout/generated_tokens"
    )
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert "no metrics.jsonl with rows" in capsys.readouterr().err


def test_runs_with_one_label_are_a_group(runs, tmp_path):
    """Seeds of one method: the mean curve's best, final and mean as mean ± std over the runs."""
    c = _run(
        tmp_path / "c",
        [
            {"step": 1, "rollout/reward_mean": 0.3, "rollout/generated_tokens": 100.0},
            {"step": 2, "rollout/reward_mean": 0.2, "rollout/generated_tokens": 100.0},
        ],
        {
            "trainer": {"steps": 2, "seed": 1},
            "algorithm": {"loss": {"name": "cispo", "eps_high": 5.0}},
            "run": {"dir": "z", "name": "c"},
        },
    )
    out, report = compare(
        [str(runs[0]), str(runs[1]), str(c)],
        ("rollout/reward_mean",),
        out=tmp_path / "g.png",
        labels=["ppo", "cispo", "cispo"],
    )
    assert out.exists()
    assert report.splitlines()[2:4] == [
        "| ppo | rollout/reward_mean | 0.3000 | 0.4000 | 2 | 0.2667 | 3 |",
        # finals 0.6, 0.2: 0.4 ± 0.2; mean curve (0.25, 0.4): best 0.4 at step 2; run means 0.4, 0.25
        "| cispo (2 runs) | rollout/reward_mean | 0.4000 ± 0.2000 | 0.4000 | 2 | 0.3250 ± 0.0750 | 2 |",
    ]
    assert "| key | ppo | cispo |" in report and "| trainer.seed | 0 | 0, 1 |" in report  # a column per group
    assert "| algorithm.loss.name | ppo_clip | cispo |" in report


def test_credit_assignment_readme_compare_command(tmp_path):
    """bench/results/credit_assignment/README.md's `agent-rl compare` command, as written, on a copy of
    the committed run directories: it prints the table the bench wrote (table.md) and redraws the plot."""
    import shutil
    from pathlib import Path

    from tests.test_docs_commands import ROOT, _run, documented_commands

    results = "bench/results/credit_assignment"
    (command,) = documented_commands(f"{results}/README.md")
    assert command.startswith("agent-rl compare ")
    shutil.copytree(ROOT / results, tmp_path / results, ignore=shutil.ignore_patterns("*.png"))
    done = _run(command, tmp_path)
    report, written = done.stdout.rstrip("\n").rsplit("\n", 1)
    assert (ROOT / results / "table.md").read_text().startswith(report + "\n")
    png = Path(written.removeprefix("plot written to "))
    assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

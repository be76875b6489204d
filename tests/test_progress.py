"""Live progress: a readable line per step when piped, phases on a terminal, an end-of-run summary."""

from __future__ import annotations

import io
import os
import re

from agent_rl.run.progress import RunProgress, clock


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_lines_per_step_and_summary(tmp_path):
    ticks = iter([0.0, 0.0, 0.0, 2.0, 5.0, 6.0, 9.0])  # made, entered, rollout, steps 1-3 at 2, 5, 6 s, summary
    out = io.StringIO()
    with RunProgress("train", total=3, stream=out, now=lambda: next(ticks)) as p:
        p.phase("rollout")
        p.step(1, {"rollout/reward_mean": 0.25, "train/loss": 0.5, "rollout/generated_tokens": 100.0})
        p.step(2, {"rollout/reward_mean": 0.75, "train/loss": 0.25, "eval/success": 0.5})
        p.step(3, {"rollout/reward_mean": 0.5, "train/loss": 0.125})
    assert out.getvalue().splitlines() == [
        "train step 1/3 | rollout",  # the first step's phases: no ETA yet
        "train step 1/3 | reward 0.250 | loss 0.5000 | 50 tok/s | 2.0 s/step | ETA 0:00:04",
        "train step 2/3 | reward 0.750 | success 0.500 | loss 0.2500 | 3.0 s/step | ETA 0:00:02",
        "train step 3/3 | reward 0.500 | loss 0.1250 | 1.0 s/step",
    ]
    (tmp_path / "metrics.jsonl").write_text("")
    rows = [
        {"step": 1, "rollout/reward_mean": 0.25, "train/loss": 0.5},
        {"step": 2, "rollout/reward_mean": 0.75, "train/loss": 0.25},
        {"step": 3, "rollout/reward_mean": 0.5, "train/loss": 0.125},
    ]
    text = p.summary(tmp_path, rows, ["metrics.jsonl", "reward.png"])
    assert text.splitlines() == [
        "train done: 3 step(s) in 0:00:09",
        "  rollout/reward_mean    final 0.500  best 0.750 (step 2)",
        "  train/loss             final 0.1250  best 0.1250 (step 3)",  # lower is better
        f"  run directory: {tmp_path}",
        "  files: metrics.jsonl",  # reward.png does not exist
    ]


def test_piped_line_every_keeps_evals_and_the_last_step():
    out = io.StringIO()
    with RunProgress("sft", total=10, stream=out, line_every=4) as p:
        for step in range(1, 11):
            p.step(step, {"sft/loss": 1.0 / step, **({"sft/val_success": 0.5} if step == 5 else {})})
    assert [int(re.match(r"sft step (\d+)/10", line).group(1)) for line in out.getvalue().splitlines()] == [4, 5, 8, 10]


def test_disabled_prints_nothing_and_resume_counts_from_the_start_step():
    out = io.StringIO()
    with RunProgress("train", total=5, start=3, stream=out, enabled=False) as p:
        p.step(4, {})
    assert out.getvalue() == "" and p.eta_s() is not None
    assert clock(3725.4) == "1:02:05"


def test_terminal_bar_shows_phase_and_metrics():
    out = Tty()
    with RunProgress("train", total=2, stream=out) as p:
        p.phase("update")
        p.step(1, {"rollout/reward_mean": 0.5})
        assert p._bar.tasks[0].description == "train: update" and p._bar.tasks[0].completed == 1
        assert p._bar.tasks[0].fields["metrics"].startswith("reward 0.500 | ETA 0:00:")  # 1 step of 2 left
    assert "train: update" in out.getvalue()


def test_train_piped_shows_steps_hint_and_summary(tmp_path, tiny_model_dir):
    """An untrained model: a line per step, the hint once, the summary; files numbered from 1; no torch warning."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # the CLI itself must keep warnings quiet
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_rl.cli",
            "train",
            str(ROOT / "configs" / "quickstart.yaml"),
            f"model.path={tiny_model_dir}",
            f"run.dir={tmp_path / 'run'}",
            "trainer.steps=2",
            "trainer.eval_every=0",
            "sandbox.backend=process",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "trainer.prompts_per_step=2",
            "tracking.loggers=[]",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == f"train: loading {tiny_model_dir} on cpu, env agent_rl/Arithmetic-v0"
    assert [line.split(" | ")[0] for line in lines if line.startswith("train step") and " s/step" in line] == [
        "train step 1/2",
        "train step 2/2",
    ]
    # inside the first step (no ETA yet): each phase, and the episodes at each quarter of the 4
    inside = [
        re.sub(r" \| \d+ tok/s$", "", x) for x in lines if x.startswith("train step 1/2 | ") and "s/step" not in x
    ]
    assert inside == [
        "train step 1/2 | rollout",
        *[f"train step 1/2 | rollout {n}/4 episodes" for n in (1, 2, 3, 4)],
        "train step 1/2 | needs",
        "train step 1/2 | update",
        "train step 1/2 | sync",
    ]
    hints = [
        line for line in lines if line.startswith("hint: RL cannot learn here: in the first 2 step(s) every group's")
    ]
    assert len(hints) == 1 and "agent-rl sft" in hints[0]
    assert "train done: 2 step(s) in " in r.stdout
    assert "  files: metrics.jsonl, reward.png, checkpoints/step_000002/model, trajectories" in lines
    assert sorted(p.name for p in (tmp_path / "run" / "trajectories").iterdir()) == [
        "step_000001.jsonl",
        "step_000002.jsonl",
    ]
    assert "UserWarning" not in r.stderr and "Traceback" not in r.stderr


def _episode(reward):
    from types import SimpleNamespace

    return [SimpleNamespace(reward=reward)]


def test_eval_episode_progress_piped_lines_running_success_and_errors():
    from agent_rl.run.progress import EpisodeProgress

    ticks = iter([0.0, 0.0, 1.0, 2.0, 4.0, 8.0])  # made, entered, then episodes 1-4 end at 1, 2, 4, 8 s
    out = io.StringIO()
    with EpisodeProgress("eval", total=4, stream=out, now=lambda: next(ticks)) as p:
        for reward in (1.0, None, 0.0, 0.5):  # None: an env error, counted and left out of the score
            p.episode_done(_episode(reward))
    assert out.getvalue().splitlines() == [
        "eval episode 1/4 | success 1.000 | errors 0 | 1.00 episodes/s | ETA 0:00:03",
        "eval episode 2/4 | success 1.000 | errors 1 | 1.00 episodes/s | ETA 0:00:02",
        "eval episode 3/4 | success 0.500 | errors 1 | 0.75 episodes/s | ETA 0:00:01",
        "eval episode 4/4 | success 0.500 | errors 1 | 0.50 episodes/s",
    ]
    assert (p.scored, p.errors, p.done) == (3, 1, 4)


def test_eval_episode_progress_prints_about_20_lines_and_a_bar_on_a_terminal():
    from agent_rl.run.progress import EpisodeProgress

    out = io.StringIO()
    with EpisodeProgress("eval", total=100, stream=out) as p:
        for _ in range(100):
            p.episode_done(_episode(1.0))
    steps = [int(re.match(r"eval episode (\d+)/100", line).group(1)) for line in out.getvalue().splitlines()]
    assert steps == list(range(5, 101, 5))
    tty = Tty()
    with EpisodeProgress("eval", total=2, stream=tty) as p:
        p.episode_done(_episode(0.0))
        assert p._bar.tasks[0].description == "eval: rollout" and p._bar.tasks[0].completed == 1
        assert p._bar.tasks[0].fields["metrics"].startswith("success 0.000 | errors 0")


class _Episode:
    def __init__(self, tokens: int):
        self.num_generated_tokens = tokens


def test_inside_a_step_piped_phases_and_episodes_of_the_first_step_then_quiet():
    clock_s = [0.0]
    out = io.StringIO()
    with RunProgress("train", total=3, stream=out, now=lambda: clock_s[0], quiet_s=30.0) as p:
        p.phase("rollout")
        p.rollout_start(8)
        for _ in range(8):
            clock_s[0] += 1.0
            p.episode_done([_Episode(50)])  # 50 tokens a second
        for name in ("filters", "needs", "update", "sync"):
            p.phase(name)
        p.step(1, {"rollout/reward_mean": 0.5})
        for t, name in ((10.0, "rollout"), (20.0, "update"), (45.0, "sync")):  # step 2: quiet for 30 s
            clock_s[0] = t
            p.phase(name)
        clock_s[0] = 50.0
        p.step(2, {"rollout/reward_mean": 0.5})
    assert out.getvalue().splitlines() == [
        "train step 1/3 | rollout",
        "train step 1/3 | rollout 2/8 episodes | 50 tok/s",
        "train step 1/3 | rollout 4/8 episodes | 50 tok/s",
        "train step 1/3 | rollout 6/8 episodes | 50 tok/s",
        "train step 1/3 | rollout 8/8 episodes | 50 tok/s",
        "train step 1/3 | filters",
        "train step 1/3 | needs",
        "train step 1/3 | update",
        "train step 1/3 | sync",
        "train step 1/3 | reward 0.500 | 8.0 s/step | ETA 0:00:16",  # the ETA from the first step on
        "train step 2/3 | sync",  # 37 s after the last line
        "train step 2/3 | reward 0.500 | 42.0 s/step | ETA 0:00:25",
    ]


def test_terminal_bar_fits_80_columns_with_the_steps_eta_and_the_episodes_of_the_step():
    from rich.console import Console

    clock_s = [0.0]
    p = RunProgress("train", total=100, stream=Tty(), now=lambda: clock_s[0]).start()
    try:
        p.phase("rollout")
        p.rollout_start(64)
        clock_s[0] = 4.0
        p.episode_done([_Episode(100), _Episode(60)])  # one episode, two trajectories: 160 tokens in 4 s
        p.phase("checkpoint")
        clock_s[0] = 10.0
        p.step(1, {"rollout/reward_mean": 0.25, "train/loss": 0.0123, "rollout/generated_tokens": 800.0})
        p.phase("rollout")
        p.rollout_start(64)
        clock_s[0] = 12.0
        p.episode_done([_Episode(100)])
        out = io.StringIO()
        Console(file=out, width=80, force_terminal=True, color_system=None).print(p._bar.get_renderable())
    finally:
        p.stop()
    rows = out.getvalue().splitlines()
    assert len(rows) == 2 and all(len(row) <= 80 for row in rows)
    assert re.fullmatch(r"train: rollout +.*\s1/100 reward 0\.250 \| loss 0\.0123 \| ETA 0:16:30 *", rows[0]), rows[0]
    assert re.fullmatch(r"  episodes +.*\s1/64 +50 tok/s *", rows[1]), rows[1]

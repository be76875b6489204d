"""The generic progress reporter of long scripts (the benches): piped lines, ETA text, summary."""

from __future__ import annotations

import io
from pathlib import Path

from agent_rl.run.progress import PartProgress, TaskProgress, number
from tests.test_progress import Tty


def test_piped_lines_phases_eta_and_summary(tmp_path):
    # made, entered, phase "loading" at 0 s, phase "hf run" at 2 s (setup: the pace starts here), unit 1 at 6 s,
    # unit 2 at 12 s, unit 4 at 14 s, finish at 20 s
    ticks = iter([0.0, 0.0, 0.0, 2.0, 6.0, 12.0, 14.0, 20.0])
    out = io.StringIO()
    written = tmp_path / "results.json"
    written.write_text("{}")
    with TaskProgress("bench/x", total=4, unit="run", stream=out, now=lambda: next(ticks)) as p:
        p.phase("loading")
        p.phase("loading")  # no change: no line
        p.phase("hf run")
        p.advance({"tok/s": 1234.56, "success": 0.70312, "episodes": 64})
        p.advance({"tok/s": 98.765})
        p.phase("vllm run")
        p.advance({"tok/s": 2.0}, by=2)
        text = p.finish([written, tmp_path / "missing.png"], {"speedup": 1.5})
    assert (
        out.getvalue().splitlines()
        == [
            "bench/x run 0/4 | loading",
            "bench/x run 0/4 | hf run",
            "bench/x run 1/4 | hf run | tok/s 1235 | success 0.703 | episodes 64 | ETA 0:00:12",  # 4 s a run since 2 s, 3 left
            "bench/x run 2/4 | hf run | tok/s 98.8 | ETA 0:00:10",  # 10 s for 2 runs, 2 left
            "bench/x run 2/4 | vllm run",
            "bench/x run 4/4 | vllm run | tok/s 2",
            "bench/x done: 4 run(s) of 4 in 0:00:20",
            "  speedup: 1.5",
            f"  results: {written}",  # the missing file is not named
        ]
    )
    assert text == "\n".join(out.getvalue().splitlines()[-3:])


def test_line_every_keeps_the_last_and_nothing_written_is_said():
    out = io.StringIO()
    with TaskProgress("bench/y", total=5, unit="round", stream=out, line_every=2) as p:
        for _ in range(5):
            p.advance()
        p.finish()
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines[:3]] == [
        "bench/y round 2/5",
        "bench/y round 4/5",
        "bench/y round 5/5",
    ]
    assert lines[-1] == "  results: printed above (no file written)"


def test_disabled_is_silent_and_terminal_shows_a_bar():
    out = io.StringIO()
    p = TaskProgress("bench/z", total=2, stream=out, enabled=False).start()
    p.phase("a")
    p.advance({"n": 1})
    p.finish()
    assert out.getvalue() == ""
    tty = Tty()
    p = TaskProgress("bench/z", total=2, unit="round", stream=tty).start()
    p.phase("warm-up")
    p.advance({"tok/s": 10.0})
    p.finish()
    assert (
        "bench/z: warm-up" in tty.getvalue()
        and "tok/s 10" in tty.getvalue()
        and "bench/z done: 1 round(s) of 2" in tty.getvalue()
    )


def test_number_text():
    assert [number(x) for x in (3, 0.70312, 12.345, 99.96, 100.4, 1234.0, -0.5, "n/a")] == [
        "3",
        "0.703",
        "12.3",
        "100",
        "100",
        "1234",
        "-0.5",
        "n/a",
    ]


def test_a_training_run_inside_a_script():
    """PartProgress takes the trainer's calls: its step n is the script's offset + n, with its key metrics."""
    ticks, part_ticks = (
        iter([0.0, 0.0, 2.0, 6.0, 8.0]),
        iter([0.0, 0.0, 1.0, 2.0]),
    )  # the part's phase comes after step 2
    out = io.StringIO()
    parent = TaskProgress("bench/q", total=4, unit="step", stream=out, now=lambda: next(ticks)).start()
    parent.step(2, {})  # a first run's two steps, at 2 s
    with PartProgress(parent, 2, "run 2/2 vllm", now=lambda: next(part_ticks)) as run:
        run.phase("rollout")  # the phases every step goes through: no line of their own
        run.step(1, {"rollout/reward_mean": 0.5, "rollout/generated_tokens": 100.0, "train/loss": 0.25})  # 1 s
        run.phase("update")
        run.step(2, {"rollout/reward_mean": 0.75})
        assert run.summary(Path("."), [], []) == ""
    assert (
        out.getvalue().splitlines()
        == [
            "bench/q step 2/4 | ETA 0:00:02",
            "bench/q step 2/4 | run 2/2 vllm",
            "bench/q step 3/4 | run 2/2 vllm: rollout | reward 0.5 | loss 0.25 | tok/s 100 | ETA 0:00:02",  # 6 s for 3 steps, 1 left
            "bench/q step 4/4 | run 2/2 vllm: update | reward 0.75",
        ]
    )


def test_every_bench_script_reports_progress():
    """Each bench script with a command line reports through agent_rl.run.progress (script_progress)."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    scripts = [p for p in sorted(bench.glob("*.py")) if '__name__ == "__main__"' in p.read_text()]
    assert len(scripts) >= 10
    assert [p.name for p in scripts if "script_progress(" not in p.read_text()] == []

"""The soak bench's verdict (issue 58, item 2) on hand-made samples: RSS by its least-squares slope
after the warm-up, counts by the rise of their ceiling (the last fifth's highest value against the
first fifth's), where calls in flight come and go and a falling ceiling is not growth."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT))
from bench.soak import main, verdict  # noqa: E402


def _samples(rss, fds, every_s=360.0):
    """One sample every ``every_s`` seconds (10 an hour) of one process."""
    return [
        {"t_s": i * every_s, "procs": {"run": {"rss_mb": r, "fds": f}}, "containers": 4, "jvms": 4}
        for i, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


def test_rss_is_judged_by_its_slope_after_the_warm_up():
    # the warm-up's first sample (0 MB) is left out; then +4 MB every 6 minutes: 40 MB/h, flat
    rss = [0.0] + [800.0 + 4 * i for i in range(10)]
    got = verdict(_samples(rss, [30] * 11), warmup_s=300.0)["run.rss_mb"]
    assert (got["per_hour"], got["drift"], got["points"], got["flat"]) == (40.0, 36.0, 10, True)
    # +6 MB every 6 minutes: 60 MB/h, over the 50 MB/h line
    rss = [0.0] + [800.0 + 6 * i for i in range(10)]
    got = verdict(_samples(rss, [30] * 11), warmup_s=300.0)["run.rss_mb"]
    assert (got["per_hour"], got["flat"]) == (60.0, False)


def test_descriptors_in_flight_do_not_grow_a_leak_does_and_a_fall_is_not_growth():
    rss = [800.0] * 10
    in_flight = [34, 41, 34, 41, 41, 34, 41, 34, 34, 41]  # a step's 7 HTTP calls, open or not
    leak = [34, 35, 36, 37, 38, 39, 40, 41, 42, 43]  # one more every sample
    fall = [56, 34, 34, 41, 34, 41, 34, 34, 41, 34]  # a spike, then a pool's idle connections closed
    judged = {name: verdict(_samples(rss, fds), 0.0)["run.fds"] for name, fds in [("in_flight", in_flight),
              ("leak", leak), ("fall", fall)]}  # fmt: skip
    # fifths of 2 samples: ceilings 41 -> 41, 35 -> 43, 56 -> 41
    assert {k: (v["rise"], v["flat"]) for k, v in judged.items()} == {
        "in_flight": (0, True),
        "leak": (8, False),
        "fall": (-15, True),
    }
    # the band: a ceiling 2 higher is flat, 3 is not
    assert verdict(_samples(rss, [30, 30, 30, 30, 30, 30, 30, 30, 32, 30]), 0.0)["run.fds"]["flat"] is True
    assert verdict(_samples(rss, [30, 30, 30, 30, 30, 30, 30, 30, 33, 30]), 0.0)["run.fds"]["flat"] is False


def test_report_of_a_directory_without_samples_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--report", str(tmp_path)])
    assert e.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]  # "<prog>: error: ...", prog as argparse names it
    assert last.endswith(
        f": error: --report {tmp_path}: no samples.jsonl there; name the directory a soak wrote (its --out)"
    ), last

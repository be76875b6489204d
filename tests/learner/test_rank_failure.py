"""A learner rank that raises stops the whole group within seconds, its rank and error named."""

from __future__ import annotations

import time

import pytest

from agent_rl.config import load_config
from agent_rl.learner import launch
from tests.conftest import ROOT


@pytest.mark.distributed
def test_a_raising_rank_stops_the_group_with_its_rank_and_error(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the ranks run `python -m tests.learner.faulty_rank`
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = load_config(None, ["learner.world_size=2", f"run.dir={tmp_path}"])
    t0 = time.monotonic()
    with pytest.raises(launch.RankFailedError) as info:
        launch.start_ranks(cfg, tmp_path, None, module="tests.learner.faulty_rank")
    elapsed = time.monotonic() - t0
    msg = str(info.value)
    # the first failure is named, not rank 0's echo of it (its all_reduce lost its peer)
    assert msg.startswith("learner rank 1 of 2 failed: ValueError: rank 1 broke: bad batch"), msg
    assert "the other ranks were stopped" in msg and "\n" not in msg
    assert elapsed < 120, elapsed  # gloo's collective timeout is 30 minutes

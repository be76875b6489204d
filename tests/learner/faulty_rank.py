"""A learner rank program for ``test_rank_failure.py``: rank 1 raises while rank 0 waits in a collective.

Rank 1 also leaves a non-daemon thread busy (a stuck tool call, say), which would keep a plain
process alive after its exception.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from agent_rl.config import load_config
from agent_rl.learner import launch


def main(argv: list[str]) -> None:
    cfg = load_config(argv[0])
    with launch.process_group(cfg) as rank, launch.rank_guard():
        if rank == 1:
            ThreadPoolExecutor(1).submit(time.sleep, 600)
            time.sleep(0.5)  # rank 0 is in the all_reduce by now
            raise ValueError("rank 1 broke: bad batch")
        x = torch.ones(1)
        dist.all_reduce(x)  # waits for rank 1, which never comes


if __name__ == "__main__":
    main(sys.argv[1:])

"""OpenMP threads that yield their core when they wait, set before torch loads (issue 42, item 4).

Why the first training step was slow: torch's OpenMP runtime (libgomp) makes a waiting thread spin
up to 300,000 times (about 3 ms) at every barrier and between parallel regions while the process
runs no more OpenMP threads than it has cores. The first step's rollout is the only time that
holds: the generate thread's team (2 threads on 2 cores) is the only one, so on a machine whose
cores are busy with other work each waiting thread burns its core while the thread it waits for
is descheduled, at every op of every decode step. The learner's first update starts the main
thread's team; from then on the process has more OpenMP threads than cores, libgomp spins only
100 times, and the steps are fast. Measured on the quickstart (2 cores shared, load 9-24): the
first step 8.4x a steady one (6.2x its CPU), with LoRA 5.6x; with the main thread's team started
before the first step, or with ``OMP_WAIT_POLICY=PASSIVE``, 0.9x and 1.2x, the CPU of a steady
step (``bench/first_step.py``, its numbers in ``bench/README.md``).

So ``OMP_WAIT_POLICY=PASSIVE`` is set when nobody chose a wait policy (neither it nor
``GOMP_SPINCOUNT`` is set): a waiting thread sleeps at once, which is what the steady steps got
already. It is read when the OpenMP runtime loads, i.e. at ``import torch``: ``import agent_rl``
sets it, so it must come first (the command line does); after torch it changes nothing and is not
set. Worker processes (learner ranks, Ray actors, servers) inherit it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # a user's own setting of how OpenMP threads wait


def passive_openmp_waits(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless a wait policy is chosen or torch is already loaded;
    returns whether it was set."""
    environ = os.environ if environ is None else environ
    if "torch" in sys.modules or any(name in environ for name in CHOICES):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True

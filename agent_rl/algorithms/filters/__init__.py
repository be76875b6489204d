"""Group filters and samplers (registry ``filter``), applied to groups before the update.

Importing this package registers all of them; one module per idea:

    sampling.py    dynamic_sampling, popo_replay (all-equal groups: drop and refill / replay)
    task_stats.py  pass_rate_filter, curriculum, prioritized (per-prompt success statistics)
    length.py      overlong_filter, overlong_soft_penalty, forced_interruption, length_penalty
    test_time.py   ttpo_vote (majority-vote pseudo-labels, label-free)
    temperature.py posterior_temperature (per-task rollout temperature)

Methods that act on the run (re-roll, fork, queue tasks, write text, score with other models) are
not filters: they live in ``agent_rl/methods/``, one module each.
"""

from agent_rl.algorithms.filters import length, sampling, task_stats, temperature, test_time  # noqa: F401  (registration)
from agent_rl.algorithms.filters.sampling import DynamicSamplingConfig, dynamic_sampling

__all__ = ["DynamicSamplingConfig", "dynamic_sampling"]

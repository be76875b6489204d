"""Objectives: pure tensor functions in registries (see ``registry.py``).

Importing this package registers every built-in entry.
"""

from agent_rl.algorithms import advantages, aggregation, credit, filters, kl, losses  # noqa: F401  (registration)
from agent_rl.algorithms.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    ALL_REGISTRIES,
    CREDITS,
    FILTERS,
    KLS,
    POLICY_LOSSES,
)

__all__ = ["ADVANTAGES", "AGGREGATIONS", "ALL_REGISTRIES", "CREDITS", "FILTERS", "KLS", "POLICY_LOSSES"]

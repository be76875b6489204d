"""The data contracts, at their old import path for plugins written against it: they live in
``agent_rl/core/types.py``."""

from agent_rl.core.types import *  # noqa: F403

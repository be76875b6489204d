"""The names a config may use, without importing what registers them: ``names.json`` (next to this
module) holds the keys of every config section, each component's registered entries and their
keys, the config's defaults and the objective catalog.

The registries import torch; reading this file does not, so ``agent_rl/run/precheck.py`` reports a
config mistake and ``agent-rl objectives list`` answers in well under a second. The file is
generated (``python -m agent_rl.commands.catalog --names > agent_rl/core/names.json``) and
``tests/test_precheck.py`` keeps it equal to the registries and the config classes. Objectives or
backends of installed plugins are not in it: with such plugins the real registries answer.
"""

from __future__ import annotations

import functools
import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

NAMES_FILE = Path(__file__).with_name("names.json")
# the entry-point groups whose plugins add names the snapshot does not hold (agent_rl/core/plugins.py)
NAME_GROUPS = ("agent_rl.objectives", "agent_rl.backends")


@functools.cache
def load_names() -> dict[str, Any]:
    """The snapshot of ``names.json``."""
    return json.loads(NAMES_FILE.read_text())


@functools.cache
def plugins_add_names() -> bool:
    """An installed package registers objectives or backends (the snapshot does not know them)."""
    return any(len(entry_points(group=g)) for g in NAME_GROUPS)

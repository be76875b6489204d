"""What the advantage-estimator tests share: running a registered estimator and comparing tensors."""

from __future__ import annotations

import torch

from agent_rl.algorithms import ADVANTAGES
from agent_rl.algorithms.registry import AdvantageInputs


def assert_tensor(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual.double(), torch.tensor(expected, dtype=torch.float64), atol=atol, rtol=0)


def run(key: str, x: AdvantageInputs, **cfg):
    entry = ADVANTAGES.get(key)
    if entry.state is not None and x.state is None:
        x.state = entry.make_state()
    return entry.fn(x, entry.config(**cfg))

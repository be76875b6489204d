"""The last-layer hidden states of the learner's own forward pass, for objectives that read the
policy's backbone with gradient (need ``policy_hidden``: SARPO's value read from the LM head).

A forward pre-hook on the LM head records its input during the call; the learner hands it (and the
head) to the loss as ``extras['policy_hidden']`` / ``extras['lm_head']``. The padded layout only:
packed rows reach the head as one ``[1, N, H]`` sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def head_inputs(model: torch.nn.Module, enabled: bool, packed: bool) -> Iterator[list[torch.Tensor]]:
    """Yields a list that holds the LM head's input of each model call inside the block (empty when not ``enabled``)."""
    captured: list[torch.Tensor] = []
    if not enabled:
        yield captured
        return
    if packed:
        raise ValueError("the policy loss reads the policy's hidden states (need policy_hidden): set learner.packing: false")
    handle = model.get_output_embeddings().register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    try:
        yield captured
    finally:
        handle.remove()


def with_hidden(extras: dict[str, Any], captured: list[torch.Tensor], model: torch.nn.Module) -> dict[str, Any]:
    """``extras`` plus the captured hidden states ``[B, T, H]`` and the LM head, when any were captured."""
    if not captured:
        return extras
    return {**extras, "policy_hidden": captured[-1], "lm_head": model.get_output_embeddings()}

"""Activations of the learner's own forward pass, for objectives that read the policy's backbone
with gradient: needs declared with ``forward="capture"``, each recorded by the capture registered
here under its name (``CAPTURES``), handed to the loss in ``extras``.

- ``policy_hidden``: a forward pre-hook on the LM head records its input; the loss gets it (and the
  head) as ``extras['policy_hidden']`` / ``extras['lm_head']`` (SARPO's value read from the LM head);
- ``policy_layers``: every decoder layer's output (ride).

The padded layout only: packed rows reach the model as one ``[1, N, H]`` sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
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
        raise ValueError(
            "the policy loss reads the policy's hidden states (need policy_hidden): set learner.packing: false"
        )
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


# -- every decoder layer's output (need ``policy_layers``; ride) ---------------------------------
def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's stack of decoder layers (``model.model.layers`` in Qwen2 / Llama / Mistral; else
    the first ``ModuleList`` as long as ``config.num_hidden_layers``)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return module
    raise ValueError(
        f"{type(model).__name__}: cannot find its decoder layers (a ModuleList of config.num_hidden_layers={n})"
    )


@contextlib.contextmanager
def layer_outputs(model: torch.nn.Module, enabled: bool, packed: bool) -> Iterator[list[torch.Tensor]]:
    """Yields a list that receives each decoder layer's output hidden states ``[B, T, H]``, in layer
    order, for the calls inside the block (empty when not ``enabled``). Capturing costs no memory in
    an update: the tensors are the activations the backward keeps anyway."""
    captured: list[torch.Tensor] = []
    if not enabled:
        yield captured
        return
    if packed:
        raise ValueError(
            "the policy loss reads the policy's layer outputs (need policy_layers): set learner.packing: false"
        )

    def keep(module: torch.nn.Module, args: Any, output: Any) -> None:
        captured.append(output[0] if isinstance(output, tuple) else output)

    handles = [layer.register_forward_hook(keep) for layer in decoder_layers(model)]
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


# need name -> (hook context manager yielding a list, list -> extras); a new capture is one entry
CAPTURES: dict[str, tuple[Callable[..., Any], Callable[[list[torch.Tensor], torch.nn.Module], dict[str, Any]]]] = {
    "policy_hidden": (head_inputs, lambda captured, model: with_hidden({}, captured, model)),
    "policy_layers": (layer_outputs, lambda captured, model: {"policy_layers": captured} if captured else {}),
}


@contextlib.contextmanager
def captured_extras(model: torch.nn.Module, needs: Any, packed: bool) -> Iterator[dict[str, Any]]:
    """Yields a dict that, once the block ends, holds the extras of every capture in ``needs``."""
    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        lists = [
            (name, stack.enter_context(CAPTURES[name][0](model, True, packed)))
            for name in sorted(needs)
            if name in CAPTURES
        ]
        yield out
    for name, captured in lists:
        out.update(CAPTURES[name][1](captured, model))


def layer_states(model: torch.nn.Module, batch: Any, layers: tuple[int, ...] = ()) -> torch.Tensor:
    """``[B, T, L, H]``: the outputs of decoder layers ``layers`` (() : all) on the batch's rows, the
    forward the learner runs (right-padded rows, explicit positions, no cache), without gradient."""
    if not isinstance(model, torch.nn.Module):  # learner.lora's reference is the policy with adapters off
        raise ValueError(
            f"hidden states of {type(model).__name__} are not available: use a full model (learner.lora: null)"
        )
    with torch.no_grad(), layer_outputs(model, True, False) as captured:
        model(
            input_ids=batch.input_ids_BT,
            attention_mask=batch.attention_mask_BT,
            position_ids=batch.position_ids_BT,
            use_cache=False,
        )
    chosen = [captured[i] for i in layers] if layers else captured
    return torch.stack(chosen, dim=2)

"""Variable-length attention for packed rows on ``sdpa`` models: each row attends only to itself,
and the work is sum_i n_i^2, not N^2.

With the position ids alone, transformers isolates packed rows for sdpa / eager by a dense
block-diagonal ``[N, N]`` mask: exact, but it computes every masked score (on CPU a pack of 16
rows was 2-3x slower than the padded batch). Flash attention has a varlen kernel; sdpa does
not, so this module registers an attention implementation, ``agent_rl_varlen_sdpa``, that
behaves exactly as transformers' ``sdpa`` unless a call passes ``agent_rl_segments``
(``packing.Pack.segments``): then it runs causal sdpa on each row's slice of the queries, keys
and values; a suffix that reads a shared prefix attends to all of the prefix's keys and causally
to its own (``prefix.py``). The segments travel as a keyword argument of the model call, which
transformers hands on to every decoder layer and its attention (also when activation
checkpointing recomputes a layer in the backward pass); while such a call builds its masks, the
mask function returns no mask at all (``_PACKED``).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

import torch

NAME = "agent_rl_varlen_sdpa"
_PACKED: contextvars.ContextVar[bool] = contextvars.ContextVar("agent_rl_packed", default=False)
_registered = False


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop("agent_rl_segments", None)
    if segments is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs)
    if query.shape[0] != 1:
        raise ValueError("agent_rl_segments: a packed call has one row")
    # segments of one shape, (own length, prefix length), run as one batched call
    shapes: dict[tuple[int, int], list[int]] = {}
    for i, (s, e, ps, pe) in enumerate(segments):
        if e > s:
            shapes.setdefault((e - s, pe - ps), []).append(i)
    outs: dict[int, torch.Tensor] = {}
    for (n, m), members in shapes.items():
        q = torch.cat([query[:, :, segments[i][0] : segments[i][1]] for i in members])
        k = torch.cat([torch.cat([key[:, :, ps:pe], key[:, :, s:e]], dim=2) for s, e, ps, pe in (segments[i] for i in members)])
        v = torch.cat([torch.cat([value[:, :, ps:pe], value[:, :, s:e]], dim=2) for s, e, ps, pe in (segments[i] for i in members)])
        if m == 0:  # rows of their own: causal
            out = sdpa_attention_forward(module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True, **kwargs)[0]
        else:  # suffixes: all of their shared prefix, then causal over themselves
            mask_nm = torch.ones((n, m + n), dtype=torch.bool, device=query.device)
            mask_nm[:, m:] = torch.ones((n, n), dtype=torch.bool, device=query.device).tril()
            out = sdpa_attention_forward(module, q, k, v, mask_nm[None, None], dropout=dropout, scaling=scaling, is_causal=False, **kwargs)[0]
        for j, i in enumerate(members):
            outs[i] = out[j : j + 1]
    return torch.cat([outs[i] for i in sorted(outs)], dim=1), None  # [1, N, heads, head_dim], in packed order


def _mask(*args: Any, **kwargs: Any):
    from transformers.masking_utils import sdpa_mask

    return None if _PACKED.get() else sdpa_mask(*args, **kwargs)


def _register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        AttentionInterface.register(NAME, _attention)
        AttentionMaskInterface.register(NAME, _mask)
        _registered = True


def supported(model: torch.nn.Module) -> bool:
    """An sdpa model (switched to this implementation on its first packed call) whose layers all
    use full attention (a sliding window would need its own per-row mask)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", NAME):
        return False
    return all(t == "full_attention" for t in getattr(config, "layer_types", None) or ["full_attention"])


def use(model: torch.nn.Module) -> None:
    """Switch an sdpa model to ``agent_rl_varlen_sdpa`` (identical on calls without bounds)."""
    _register()
    if model.config._attn_implementation != NAME:
        model.set_attn_implementation(NAME)


@contextlib.contextmanager
def packed_masks():
    """While a packed call builds its masks: no mask (the attention isolates the rows itself)."""
    token = _PACKED.set(True)
    try:
        yield
    finally:
        _PACKED.reset(token)

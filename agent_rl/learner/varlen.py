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


_PLAN: list[Any] = [None, None]  # (segments object, its plan): the layers of one call share it


def _plan(
    segments: list[tuple[int, int, int, int]], device: torch.device
) -> list[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Segments of one shape, (own length n, prefix length m), batched: per shape the query index
    ``[k, n]`` and the key / value index ``[k, m + n]`` (the prefix's tokens, then its own) into
    the packed sequence. Computed once per packed call (every layer reads the same segments)."""
    if _PLAN[0] is segments and _PLAN[1][0] == device:
        return _PLAN[1][1]
    shapes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s, e, ps, pe in segments:
        if e > s:
            shapes.setdefault((e - s, pe - ps), []).append((s, ps))
    plan = []
    for (n, m), starts in shapes.items():
        start_k1 = torch.tensor([[st] for st, _ in starts], device=device)
        q_kn = start_k1 + torch.arange(n, device=device)
        kv_km = torch.tensor([[ps] for _, ps in starts], device=device) + torch.arange(m, device=device)
        plan.append((n, m, q_kn, torch.cat([kv_km, q_kn], dim=1)))
    _PLAN[0], _PLAN[1] = segments, (device, plan)
    return plan


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop("agent_rl_segments", None)
    if segments is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError("agent_rl_segments: a packed call has one row")
    # segments of one shape, (own length, prefix length), run as one batched call; the rows of a
    # shape are gathered by one index each (one scatter in the backward, not one per segment)
    outs, index = [], []
    for n, m, q_kn, kv_kl in _plan(segments, query.device):
        q = query[0][:, q_kn].transpose(0, 1)  # [heads, k, n, dim] -> [k, heads, n, dim]
        k = key[0][:, kv_kl].transpose(0, 1)
        v = value[0][:, kv_kl].transpose(0, 1)
        if m == 0:  # rows of their own: causal
            out = sdpa_attention_forward(
                module, q, k, v, None, dropout=dropout, scaling=scaling, is_causal=True, **kwargs
            )[0]
        else:  # suffixes: all of their shared prefix, then causal over themselves
            mask_nm = torch.ones((n, m + n), dtype=torch.bool, device=query.device)
            mask_nm[:, m:] = torch.ones((n, n), dtype=torch.bool, device=query.device).tril()
            out = sdpa_attention_forward(
                module, q, k, v, mask_nm[None, None], dropout=dropout, scaling=scaling, is_causal=False, **kwargs
            )[0]
        outs.append(out.reshape(-1, *out.shape[2:]))  # [k n, heads, head_dim]
        index.append(q_kn.flatten())
    out_N = torch.cat(outs) if len(outs) > 1 else outs[0]
    order = torch.argsort(torch.cat(index)) if len(index) > 1 else torch.argsort(index[0])
    return out_N[order][None], None  # [1, N, heads, head_dim], in packed order


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

"""Per-token log-probabilities (and entropy, top-k logprobs) of a batch under a model, memory-lean.

The model runs to its last hidden states; the LM head and the log-softmax then run over chunks
of ``chunk_tokens`` tokens inside a custom autograd function that keeps only the hidden states,
the targets and the per-token results, and recomputes each chunk's logits in the backward pass.
So neither the ``[B, T, V]`` logits nor their fp32 log-softmax is ever held at once: the peak
extra memory is a few ``[chunk_tokens, V]`` fp32 tensors, whatever B and T are.

How the hidden states are reached: during the call, the model's output-embedding module (its LM
head, ``get_output_embeddings()``) gets a temporary ``forward`` that computes our per-token
results instead of logits. The head still runs inside the model's own forward, so a model
sharded with FSDP2 has its head weight gathered exactly as for a normal forward, and the results
come out as ``out.logits`` (packed ``[B, T, C]``), where FSDP's backward hooks see them.
Models whose forward transforms the logits after the head (Gemma-2's final soft-capping) are not
supported by this path; ``direct_token_logprobs`` is the plain reference computation.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from agent_rl.core.types import TrainBatch
from agent_rl.learner import packing, prefix


def _chunk_logprobs(
    hidden_NH: torch.Tensor, weight_VH: torch.Tensor, bias_V: torch.Tensor | None, temperature: float, fp32: bool
) -> torch.Tensor:
    """fp32 log-softmax of one chunk's logits / temperature (one [n, V] tensor alive at the end)."""
    if fp32:
        logits_NV = F.linear(hidden_NH.float(), weight_VH.float(), None if bias_V is None else bias_V.float())
    else:
        logits_NV = F.linear(hidden_NH, weight_VH, bias_V).float()
    if temperature != 1.0:
        logits_NV.div_(temperature)
    return torch.log_softmax(logits_NV, dim=-1)


class _ChunkedHead(torch.autograd.Function):
    """(hidden_NH, W, b) -> logprob of targets_N, entropy_N, logprobs at topk_NK; chunked, recomputed."""

    @staticmethod
    def forward(ctx, hidden_NH, weight_VH, bias_V, targets_N, topk_NK, temperature, chunk, with_entropy, fp32):
        N = hidden_NH.shape[0]
        logprobs_N = torch.zeros(N, dtype=torch.float32, device=hidden_NH.device)
        entropy_N = torch.zeros(N if with_entropy else 0, dtype=torch.float32, device=hidden_NH.device)
        K = 0 if topk_NK is None else topk_NK.shape[1]
        topk_NK_out = torch.zeros((N, K), dtype=torch.float32, device=hidden_NH.device)
        with torch.no_grad():
            for s in range(0, N, chunk):
                logp_nV = _chunk_logprobs(hidden_NH[s : s + chunk], weight_VH, bias_V, temperature, fp32)
                logprobs_N[s : s + chunk] = logp_nV.gather(-1, targets_N[s : s + chunk, None]).squeeze(-1)
                if K:
                    topk_NK_out[s : s + chunk] = logp_nV.gather(-1, topk_NK[s : s + chunk])
                if with_entropy:  # H = -sum_j p_j log p_j, in place on p
                    entropy_N[s : s + chunk] = -logp_nV.exp().mul_(logp_nV).sum(-1)
        ctx.save_for_backward(hidden_NH, weight_VH, bias_V, targets_N, topk_NK, entropy_N)
        ctx.options = (temperature, chunk, with_entropy, fp32)
        ctx.set_materialize_grads(False)
        return logprobs_N, entropy_N, topk_NK_out

    @staticmethod
    def backward(ctx, g_logprobs_N, g_entropy_N, g_topk_NK):
        hidden_NH, weight_VH, bias_V, targets_N, topk_NK, entropy_N = ctx.saved_tensors
        temperature, chunk, with_entropy, fp32 = ctx.options
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden_NH) if need_h else None
        acc_dtype = torch.float32 if fp32 else weight_VH.dtype
        grad_w = torch.zeros(weight_VH.shape, dtype=acc_dtype, device=weight_VH.device) if need_w else None
        grad_b = torch.zeros(bias_V.shape, dtype=torch.float32, device=bias_V.device) if need_b else None
        w_VH = weight_VH.float() if fp32 else weight_VH
        for s in range(0, hidden_NH.shape[0], chunk):
            h_nH = hidden_NH[s : s + chunk]
            logp_nV = _chunk_logprobs(h_nH, weight_VH, bias_V, temperature, fp32)
            p_nV = logp_nV.exp()
            n = h_nH.shape[0]
            # dz_j = -p_j * (c + g_H log p_j) + [j = y] g_lp + sum_k [j = k] g_k, with c = g_lp + g_H H + sum_k g_k:
            #   d log p_y / dz_j = [j = y] - p_j;  dH / dz_j = -p_j (log p_j + H)
            c_n = torch.zeros(n, dtype=torch.float32, device=h_nH.device)
            if g_logprobs_N is not None:
                c_n += g_logprobs_N[s : s + chunk].float()
            use_entropy = with_entropy and g_entropy_N is not None
            if use_entropy:
                g_ent_n = g_entropy_N[s : s + chunk].float()
                c_n += g_ent_n * entropy_N[s : s + chunk]
            if topk_NK is not None and g_topk_NK is not None:
                c_n += g_topk_NK[s : s + chunk].float().sum(-1)
            # in place: logp becomes dz, so two [n, V] tensors are alive at most
            dz_nV = logp_nV.mul_(g_ent_n[:, None]) if use_entropy else logp_nV.zero_()
            dz_nV.add_(c_n[:, None]).mul_(p_nV).neg_()
            del p_nV
            if g_logprobs_N is not None:
                dz_nV.scatter_add_(1, targets_N[s : s + chunk, None], g_logprobs_N[s : s + chunk, None].float())
            if topk_NK is not None and g_topk_NK is not None:
                dz_nV.scatter_add_(1, topk_NK[s : s + chunk], g_topk_NK[s : s + chunk].float())
            dz_nV /= temperature
            if need_h:
                grad_h[s : s + chunk] = (dz_nV.to(w_VH.dtype) @ w_VH).to(hidden_NH.dtype)
            if need_w:
                h = h_nH.float() if fp32 else h_nH
                grad_w += dz_nV.to(h.dtype).T @ h
            if need_b:
                grad_b += dz_nV.sum(0)
        grad_w = grad_w.to(weight_VH.dtype) if grad_w is not None else None
        grad_b = grad_b.to(bias_V.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None, None, None


@dataclass
class _Request:
    """What the patched head computes during one model call."""

    targets_BT: torch.Tensor  # token t+1 is the target of hidden state t (last column unused)
    valid_BT: torch.Tensor  # positions whose next token is real (attention mask of t+1)
    topk_ids_BTK: torch.Tensor | None  # candidate ids of position t+1, aligned like targets_BT
    temperature: float
    chunk: int
    with_entropy: bool
    fp32: bool
    hidden_index_P: torch.Tensor | None = None  # packed: the head runs on these hidden states (targets_BT: [P])


def _pairs_forward(head: torch.nn.Module, request: _Request, hidden_1NH: torch.Tensor) -> torch.Tensor:
    """Packed layout: per-pair results ``[1, P, 1 + E + K]`` of hidden ``hidden_index_P`` -> ``targets_BT``."""
    out = _ChunkedHead.apply(
        hidden_1NH[0, request.hidden_index_P],
        head.weight,
        getattr(head, "bias", None),
        request.targets_BT,
        request.topk_ids_BTK,
        request.temperature,
        request.chunk,
        request.with_entropy,
        request.fp32,
    )
    return _columns(request, *out)[None]


def _columns(
    request: _Request, logprobs_N: torch.Tensor, entropy_N: torch.Tensor, topk_NK: torch.Tensor
) -> torch.Tensor:
    cols = [logprobs_N[:, None]]
    if request.with_entropy:
        cols.append(entropy_N[:, None])
    if request.topk_ids_BTK is not None:
        cols.append(topk_NK)
    return torch.cat(cols, dim=1)


def _head_forward(head: torch.nn.Module, request: _Request, hidden_BTH: torch.Tensor) -> torch.Tensor:
    """Packed per-token results ``[B, T, 1 + E + K]`` aligned with the input ids (column 0 zero)."""
    if request.hidden_index_P is not None:
        return _pairs_forward(head, request, hidden_BTH)
    B, T, _ = hidden_BTH.shape
    b_N, t_N = request.valid_BT.nonzero(as_tuple=True)
    topk_NK = None if request.topk_ids_BTK is None else request.topk_ids_BTK[b_N, t_N]
    logprobs_N, entropy_N, topk_NK_out = _ChunkedHead.apply(
        hidden_BTH[b_N, t_N],
        head.weight,
        getattr(head, "bias", None),
        request.targets_BT[b_N, t_N],
        topk_NK,
        request.temperature,
        request.chunk,
        request.with_entropy,
        request.fp32,
    )
    packed_NC = _columns(request, logprobs_N, entropy_N, topk_NK_out)
    out_BTC = torch.zeros((B, T, packed_NC.shape[1]), dtype=packed_NC.dtype, device=packed_NC.device)
    return out_BTC.index_put((b_N, t_N + 1), packed_NC)


@contextlib.contextmanager
def _chunked_head(model: torch.nn.Module, request: _Request):
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"{type(model).__name__} has no linear output embedding (LM head) for chunked logprobs")
    head.forward = lambda hidden_BTH: _head_forward(head, request, hidden_BTH)
    try:
        yield
    finally:
        del head.forward  # back to the class's forward (generation sees a plain LM head)


def batch_logits(
    model: torch.nn.Module, batch: TrainBatch, packed: bool = False, share_prefixes: bool = False
) -> torch.Tensor:
    """``model(...)``'s per-token output on a batch (right-padded rows, explicit positions, no cache).

    ``packed``: the rows run as one packed sequence (``packing``; ``share_prefixes``: shared
    prefixes once, ``prefix``); the output comes back in the padded layout, zeros on padding."""
    if share_prefixes and not packed:
        raise ValueError("learner.share_prefixes needs learner.packing: true")
    if packed:
        packing.check_isolation(model)
        p = prefix.pack_rows(batch, share_prefixes)
        return p.unpack(packing.packed_call(model, p).logits)
    return model(
        input_ids=batch.input_ids_BT,
        attention_mask=batch.attention_mask_BT,
        position_ids=batch.position_ids_BT,
        use_cache=False,
    ).logits


_SCORING: contextvars.ContextVar[tuple[bool, bool]] = contextvars.ContextVar("agent_rl_scoring", default=(False, False))


@contextlib.contextmanager
def packed_scoring(packed: bool, share_prefixes: bool = False):
    """While inside: ``scoring_logits`` runs packed (``learner.packing``; ``share_prefixes``: shared
    prefixes once). The trainer wraps the forwards that score rows outside the learner (the
    sdpo / opsd teacher) with the run's learner settings."""
    token = _SCORING.set((packed, share_prefixes))
    try:
        yield
    finally:
        _SCORING.reset(token)


def scoring_logits(model: torch.nn.Module, input_ids_BS: torch.Tensor, attention_mask_BS: torch.Tensor) -> torch.Tensor:
    """``model(input_ids, attention_mask).logits`` of right-padded rows, ``[B, S, V]``; inside
    ``packed_scoring(True)`` the rows run packed (no compute on padding; zeros there)."""
    packed, share_prefixes = _SCORING.get()
    if not packed:
        return model(input_ids=input_ids_BS, attention_mask=attention_mask_BS).logits
    rows = SimpleNamespace(
        input_ids_BT=input_ids_BS,
        attention_mask_BT=attention_mask_BS,
        batch_size=input_ids_BS.shape[0],
        position_ids_BT=torch.arange(input_ids_BS.shape[1], device=input_ids_BS.device)[None],
    )
    return batch_logits(model, rows, packed=True, share_prefixes=share_prefixes)


def token_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = 1024,
    topk_ids_BTK: torch.Tensor | None = None,
    fp32_lm_head: bool = False,
    packed: bool = False,
    share_prefixes: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``logprobs_BT[:, t]`` = log p(input_ids[:, t] | input_ids[:, :t]) at ``temperature``; column 0 is 0.

    Positions whose token is padding (attention mask 0) are 0 and cost nothing. ``entropy_BT`` is
    the entropy of the distribution that predicted token t (None unless ``with_entropy``). With
    ``topk_ids_BTK`` it also returns the logprobs at those ids, as a third value. ``fp32_lm_head``
    runs the head's matmul in fp32 (bf16 models: the logits keep their precision). ``packed``: the
    rows run as one packed sequence (``packing``); the results are the same, padding costs nothing.
    ``share_prefixes`` (with ``packed``): rows sharing a prefix compute it once (``prefix``).
    """
    chunk = max(1, chunk_tokens)
    if share_prefixes and not packed:
        raise ValueError("learner.share_prefixes needs learner.packing: true")
    if packed:  # the head runs on (hidden index, target) pairs of the packed layout
        packing.check_isolation(model)
        p = prefix.pack_rows(batch, share_prefixes)
        h_P, y_P, b_D, t_D, pair_D = p.predictions(batch.input_ids_BT, dedupe=topk_ids_BTK is None)
        topk_PK = None if topk_ids_BTK is None else topk_ids_BTK[b_D, t_D]
        request = _Request(y_P, None, topk_PK, temperature, chunk, with_entropy, fp32_lm_head, hidden_index_P=h_P)
        with _chunked_head(model, request):
            pairs_PC = packing.packed_call(model, p).logits[0]
        B, T = batch.input_ids_BT.shape
        packed_BTC = torch.zeros((B, T, pairs_PC.shape[1]), dtype=pairs_PC.dtype, device=pairs_PC.device)
        packed_BTC = packed_BTC.index_put((b_D, t_D), pairs_PC[pair_D])
    else:
        ids_BT, valid_BT = batch.input_ids_BT, batch.attention_mask_BT.bool()
        valid_BT = torch.cat([valid_BT[:, 1:], torch.zeros_like(valid_BT[:, :1])], dim=1)
        targets_BT = torch.cat([ids_BT[:, 1:], ids_BT[:, :1]], dim=1)
        topk_next_BTK = None
        if topk_ids_BTK is not None:
            topk_next_BTK = torch.cat([topk_ids_BTK[:, 1:], topk_ids_BTK[:, :1]], dim=1)
        request = _Request(targets_BT, valid_BT, topk_next_BTK, temperature, chunk, with_entropy, fp32_lm_head)
        with _chunked_head(model, request):
            packed_BTC = batch_logits(model, batch)
    logprobs_BT = packed_BTC[..., 0]
    entropy_BT = packed_BTC[..., 1] if with_entropy else None
    if topk_ids_BTK is None:
        return logprobs_BT, entropy_BT
    return logprobs_BT, entropy_BT, packed_BTC[..., 1 + int(with_entropy) :]


def direct_token_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The reference computation: full ``[B, T, V]`` fp32 log-softmax (tests and the benchmark)."""
    logits_BTV = batch_logits(model, batch)
    logp_BTV = torch.log_softmax(logits_BTV[:, :-1].float() / temperature, dim=-1)
    lp_BT = logp_BTV.gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    zeros_B1 = torch.zeros_like(lp_BT[:, :1])
    valid_BT = batch.attention_mask_BT[:, 1:].to(lp_BT.dtype)
    logprobs_BT = torch.cat([zeros_B1, lp_BT * valid_BT], dim=1)
    if not with_entropy:
        return logprobs_BT, None
    ent_BT = -(logp_BTV.exp() * logp_BTV).sum(-1) * valid_BT
    return logprobs_BT, torch.cat([zeros_B1, ent_BT], dim=1)

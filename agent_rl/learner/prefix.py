"""Shared-prefix packing (``learner.share_prefixes``): rows of a micro-batch that begin with the same
tokens at the same positions (a group's prompt, a fork's parent) compute that prefix once.

Layout (one level of sharing): rows are taken in order; a row joins the earlier cluster whose
first row shares at least ``MIN_SHARED_TOKENS`` tokens with it where that saves the most tokens
(``clusters``), and a cluster's prefix is the shortest of those common prefixes. A cluster of several rows is packed as its prefix once,
then each row's remaining tokens:

    rows   a = p p p p x x        b = p p p p y y y
    packed   p p p p | x x | y y y          segments (0, 4, -), (4, 6, 0:4), (6, 9, 0:4)

Each suffix attends to all of its prefix and causally to itself (``varlen``), with its own
position ids, so every hidden state is the one the unshared row computes. A prefix token's
logprob, entropy or value is computed once and read by every row of the cluster (a gather: its
gradient is the sum of the rows' gradients), so losses, aggregation and gradients equal the
unshared computation. Exact only where the attention can read a prefix (``varlen``: sdpa with
full attention); any other model is refused with the reason.
"""

from __future__ import annotations

import torch

from agent_rl.core.types import TrainBatch
from agent_rl.learner.packing import Pack, pack

MIN_SHARED_TOKENS = 8  # shorter common prefixes are not worth a segment of their own (a chat header)


def common_prefixes(
    lead_ids_KL: torch.Tensor, lead_pos_KL: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor
) -> list[int]:
    """Tokens each of the K leader rows shares with one row from their start (same ids at the same
    positions); leaders are padded with -1 (never a token id or position), the row is not."""
    n = min(ids.numel(), lead_ids_KL.shape[1])
    same_KN = (lead_ids_KL[:, :n] == ids[:n]) & (lead_pos_KL[:, :n] == pos[:n])
    differs_KN = torch.cat([~same_KN, same_KN.new_ones((same_KN.shape[0], 1))], dim=1)
    return differs_KN.byte().argmax(dim=1).tolist()  # the first column that differs (n when none does)


def clusters(ids_B: list[torch.Tensor], pos_B: list[torch.Tensor]) -> list[tuple[list[int], int]]:
    """(rows, shared prefix length) of each cluster; a row alone shares nothing (length 0).

    A row joins the earlier cluster where it saves the most tokens: joining a cluster of r rows
    that share s tokens, with which the row shares n >= ``MIN_SHARED_TOKENS``, makes the cluster
    share min(s, n), saving r min(s, n) tokens instead of (r - 1) s; a row that saves nothing
    anywhere starts its own cluster (so two prompts that share only a chat template header stay
    apart instead of cutting each other's shared prompt down to the header). Each row is compared
    with every cluster's first row at once (one tensor comparison per row)."""
    out: list[tuple[list[int], int]] = []
    if not ids_B:
        return out
    width = max(ids.numel() for ids in ids_B)
    lead_ids_KL = torch.full((len(ids_B), width), -1, dtype=ids_B[0].dtype, device=ids_B[0].device)
    lead_pos_KL = torch.full_like(lead_ids_KL, -1)
    for b in range(len(ids_B)):
        shared_K = common_prefixes(lead_ids_KL[: len(out)], lead_pos_KL[: len(out)], ids_B[b], pos_B[b]) if out else []
        best, best_gain = -1, 0
        for k, ((rows, shared), n) in enumerate(zip(out, shared_K, strict=True)):
            if n < MIN_SHARED_TOKENS:
                continue
            gain = n if len(rows) == 1 else len(rows) * min(shared, n) - (len(rows) - 1) * shared
            if gain > best_gain:
                best, best_gain = k, gain
        if best < 0:
            lead_ids_KL[len(out), : ids_B[b].numel()] = ids_B[b]
            lead_pos_KL[len(out), : pos_B[b].numel()] = pos_B[b]
            out.append(([b], 0))
            continue
        rows, shared = out[best]
        n = shared_K[best]
        out[best] = ([*rows, b], n if len(rows) == 1 else min(shared, n))
    return out


def shared_pack(batch: TrainBatch) -> Pack:
    """The packed layout with each cluster's prefix once (see the module docstring)."""
    mask_BT = batch.attention_mask_BT.bool()
    position_ids_BT = batch.position_ids_BT.expand_as(batch.input_ids_BT)
    cols_B = [mask_BT[b].nonzero().flatten() for b in range(batch.batch_size)]
    ids_B = [batch.input_ids_BT[b, c] for b, c in enumerate(cols_B)]
    pos_B = [position_ids_BT[b, c] for b, c in enumerate(cols_B)]
    index_BT = torch.full_like(batch.input_ids_BT, -1)
    src_rows, src_cols, segments = [], [], []
    n = 0

    def place(b: int, lo: int, hi: int, prefix: tuple[int, int]) -> tuple[int, int]:
        """Row b's tokens [lo, hi) as the next packed run; returns its [start, end)."""
        nonlocal n
        cols = cols_B[b][lo:hi]
        index_BT[b, cols] = torch.arange(n, n + cols.numel(), device=index_BT.device)
        src_rows.append(torch.full_like(cols, b))
        src_cols.append(cols)
        segments.append((n, n + cols.numel(), *prefix))
        n += cols.numel()
        return segments[-1][0], segments[-1][1]

    for rows, shared in clusters(ids_B, pos_B):
        if len(rows) == 1:
            place(rows[0], 0, cols_B[rows[0]].numel(), (n, n))
            continue
        ps, pe = place(rows[0], 0, shared, (n, n))
        for b in rows:
            index_BT[b, cols_B[b][:shared]] = torch.arange(ps, pe, device=index_BT.device)
            place(b, shared, cols_B[b].numel(), (ps, pe))
    src_rows_N, src_cols_N = torch.cat(src_rows), torch.cat(src_cols)
    ids_1N = batch.input_ids_BT[src_rows_N, src_cols_N][None]
    return Pack(ids_1N, position_ids_BT[src_rows_N, src_cols_N][None], index_BT, src_rows_N, src_cols_N, segments)


def pack_rows(batch: TrainBatch, share_prefixes: bool) -> Pack:
    """The packed layout of ``batch``: with shared prefixes once, or every row whole."""
    return shared_pack(batch) if share_prefixes else pack(batch)

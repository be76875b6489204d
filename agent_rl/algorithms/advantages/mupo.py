"""MUPO, Multi-Group Policy Optimization (Tian et al. 2026, "All Roads Lead to Rome: Incentivizing
Divergent Thinking in Vision-Language Models", CVPR 2026; mechanism and defaults read from the authors'
public code, https://github.com/xytian1008/MUPO).

GRPO's group collapses onto one reasoning strategy early in training. MUPO splits each prompt's
responses into ``partition_k`` partitions by the embeddings of their reasoning (size-constrained
k-means, at least ``partition_min`` rows each), standardizes the reward inside each partition, and
pays correct responses for being far from the other partitions:

    div_i   = 2 * mean_{j in other partitions of i's prompt} (1 - cos(e_i, e_j))     (0 with one partition)
    s_i     = (1 - diversity_weight) * r_i + diversity_weight * div_i * [r_i > correct_threshold]
    A_i     = (s_i - mean_P(s)) / (std_P(s) + eps) * (n_avg / n_P) ** balance_beta

P = i's partition, std unbiased, n_P its size and n_avg the mean partition size of the prompt (small
partitions weigh more). A_i is put on every loss token of row i.

Embeddings come from the need ``response_embedding``: the env's ``info['response_embedding']`` when
every episode has one, else each episode's bag of generated token ids (our stand-in for the paper's
Qwen3-Embedding-0.6B server, which this platform does not run). Called without the need (row tensors
alone), every group is one partition: GRPO with an unbiased std.
"""

from __future__ import annotations

import torch
from pydantic import Field

from agent_rl.algorithms.advantages.common import broadcast_to_tokens, group_rows
from agent_rl.algorithms.needs import NEEDS, NeedContext, register_need
from agent_rl.algorithms.registry import (
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
)


class MupoConfig(ComponentConfig):
    partition_k: int = Field(2, ge=1, description="partitions per prompt (paper: 2)")
    partition_min: int = Field(
        3, ge=2, description="fewest rows in a partition (paper: 3); fewer rows -> fewer partitions"
    )
    balance_beta: float = Field(
        1.0, ge=0.0, description="exponent of the partition-size weight (n_avg / n_P) (paper: 1)"
    )
    diversity_weight: float = Field(
        0.1, ge=0.0, le=1.0, description="weight of the diversity reward in s_i (paper: 0.1)"
    )
    correct_threshold: float = Field(
        0.5, description="a row is correct when its reward is above this (only correct rows earn diversity)"
    )
    kmeans_iters: int = Field(20, ge=1, description="Lloyd iterations of the cosine k-means")
    eps: float = Field(1e-6, description="added to each partition's std (paper: 1e-6)")


def bag_of_tokens(token_lists: list[list[int]]) -> torch.Tensor:
    """``[B, V']``: counts of each token id (columns = the ids any row uses, sorted)."""
    ids = sorted({t for toks in token_lists for t in toks})
    column = {t: c for c, t in enumerate(ids)}
    out = torch.zeros(len(token_lists), len(ids), dtype=torch.float64)
    for b, toks in enumerate(token_lists):
        for t in toks:
            out[b, column[t]] += 1.0
    return out


def _response_embedding(ctx: NeedContext) -> torch.Tensor:
    trajs = [t for g in ctx.groups for t in g.trajectories_G]
    given = [t.info.get("response_embedding") for t in trajs]
    if given and all(e is not None for e in given):
        return torch.tensor(given, dtype=torch.float64)
    return bag_of_tokens([[tok for tok, m in zip(t.token_ids_T, t.loss_mask_T) if m] for t in trajs])


if "response_embedding" not in NEEDS:
    register_need(
        "response_embedding",
        "one vector per row: the env's info['response_embedding'], else the bag of the episode's generated token ids",
        compute=_response_embedding,
        to_batch=False,
    )


def _unit(e_NV: torch.Tensor) -> torch.Tensor:
    norm_N = e_NV.norm(dim=-1, keepdim=True)
    return torch.where(norm_N > 0, e_NV / norm_N.clamp(min=1e-12), torch.zeros_like(e_NV))


def partition(e_NV: torch.Tensor, k: int, size_min: int, iters: int) -> list[int]:
    """Cosine k-means of one prompt's rows into ``k`` partitions of at least ``size_min`` rows (fewer
    partitions when the rows cannot fill ``k``). Deterministic: farthest-point initialization from row
    0, Lloyd iterations, then undersized partitions take the rows nearest their centroid from
    partitions that can spare one. Labels are numbered by first appearance."""
    n = e_NV.shape[0]
    k = max(1, min(k, n // size_min))
    if k == 1:
        return [0] * n
    u_NV = _unit(e_NV.double())
    centers = [0]
    while len(centers) < k:  # the row least similar to its nearest chosen center
        sim_N = (u_NV @ u_NV[centers].T).max(dim=1).values
        sim_N[centers] = float("inf")
        centers.append(int(sim_N.argmin()))
    c_KV = u_NV[centers].clone()
    labels = [0] * n
    for _ in range(iters):
        labels = (u_NV @ c_KV.T).argmax(dim=1).tolist()
        new_KV = torch.stack([_unit(u_NV[[i for i in range(n) if labels[i] == c]].sum(0, keepdim=True))[0]
                              if c in labels else c_KV[c] for c in range(k)])  # fmt: skip
        if torch.equal(new_KV, c_KV):
            break
        c_KV = new_KV
    for c in range(k):  # size constraint
        while labels.count(c) < size_min:
            donors = [i for i in range(n) if labels[i] != c and labels.count(labels[i]) > size_min]
            labels[max(donors, key=lambda i: float(u_NV[i] @ c_KV[c]))] = c
    first = {}
    return [first.setdefault(lab, len(first)) for lab in labels]


@register_advantage(
    "mupo",
    config=MupoConfig,
    config_needs=lambda cfg: {"response_embedding"},
    status="interpretation",
    evidence="formula from the authors' code (xytian1008/MUPO), but the embeddings that form the "
    "partitions are ours (env embedding or bag of token ids, not Qwen3-Embedding); 3 "
    "recorded choices; tests/algorithms/test_mupo.py",
)
def mupo(x: AdvantageInputs, cfg: MupoConfig) -> AdvantageOutput:
    """MUPO (Tian et al. 2026): per-partition standardization + cross-partition diversity reward.

    Partitions: cosine k-means of each prompt's response embeddings (k = partition_k, >= partition_min rows).
    div_i = 2 mean_{j not in P(i)} (1 - cos(e_i, e_j)); s_i = (1 - w) r_i + w div_i [r_i > threshold]
    A_i = (s_i - mean_P s) / (std_P s + eps) * (n_avg / n_P)^beta, std unbiased, on every loss token.
    """
    rewards_B = x.rewards_B.double().cpu()
    emb_BV = x.extras.get("response_embedding")
    score_B = rewards_B.clone()
    adv_B = torch.zeros_like(rewards_B)
    partitions_used = []
    for rows in group_rows(x.group_index_B.cpu()):
        idx = rows.tolist()
        if emb_BV is None:
            labels = [0] * len(idx)
        else:
            e_NV = emb_BV[idx].double().cpu()
            labels = partition(e_NV, cfg.partition_k, cfg.partition_min, cfg.kmeans_iters)
            u_NV = _unit(e_NV)
            dist_NN = 1.0 - u_NV @ u_NV.T
            for a, i in enumerate(idx):
                other = [b for b in range(len(idx)) if labels[b] != labels[a]]
                div = 2.0 * float(dist_NN[a, other].mean()) if other and float(u_NV[a].norm()) > 0 else 0.0
                correct = float(rewards_B[i] > cfg.correct_threshold)
                score_B[i] = (1 - cfg.diversity_weight) * rewards_B[i] + cfg.diversity_weight * div * correct
        sizes = {lab: labels.count(lab) for lab in set(labels)}
        n_avg = sum(sizes.values()) / len(sizes)
        partitions_used.append(len(sizes))
        for lab, n_p in sizes.items():
            members = [i for i, label in zip(idx, labels) if label == lab]
            s_P = score_B[members]
            std = float(s_P.std()) if n_p > 1 else 0.0
            adv_B[members] = (s_P - s_P.mean()) / (std + cfg.eps) * (n_avg / n_p) ** cfg.balance_beta
    metrics = {"adv/mupo_partitions": sum(partitions_used) / max(len(partitions_used), 1)}
    return AdvantageOutput(
        advantages_BT=broadcast_to_tokens(adv_B, x.loss_mask_BT.cpu()).to(x.loss_mask_BT.device), metrics=metrics
    )


for _question, _choice in (
    (
        "embeddings of the responses",
        "the env's info['response_embedding'] if every episode has one, else the bag of generated token ids "
        "(the paper serves Qwen3-Embedding-0.6B, which this platform does not run)",
    ),
    (
        "size-constrained k-means",
        "cosine Lloyd k-means, farthest-point init from the group's first row; undersized partitions take the "
        "rows nearest their centroid from partitions above partition_min; k shrinks to n // partition_min",
    ),
    (
        "reward it mixes with diversity",
        "the env's reward r stands for the paper's accuracy + format terms: s = (1 - w) r + w div [r > threshold]",
    ),
):
    record_choice("mupo", _question, _choice)

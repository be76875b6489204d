"""MemReward's heterogeneous rollout graph and its GNN (arXiv 2603.19310), for the
``memreward`` method (``memreward.py``).

Nodes, three types: one ``query`` per task, one ``think`` and one ``answer`` per rollout (R rollouts,
rollout r belongs to query ``query_of_R[r]``). Edges (src -> dst; a node aggregates what reaches it):

    query q  -> think r    and  think r  -> query q     (``generates`` / ``rev_generates``: r is a rollout of q)
    think r  -> answer r   and  answer r -> think r     (``leads_to`` / ``rev_leads_to``)
    query j  -> query i                                  (``similar_to``: j is one of the k memory queries most
                                                          cosine-similar to i, j != i; plus a self loop on every query)

The first ``num_memory`` queries are the memory (labelled rollouts); a new (unlabelled) query is
attached to the memory by its k most similar memory queries and receives from them, never the
reverse, so the memory's node states are the ones the GNN was fitted on.

One layer: per relation a GATv2 attention (Brody et al. 2022) over the incoming edges,

    e_ij = a_h . LeakyReLU_0.2(W_src x_j + W_dst x_i),  alpha_ij = softmax_{j -> i}(e_ij),
    out_i = concat_h sum_j alpha_ij W_src x_j  + b,

then per node type the mean over the relations that end there, then ReLU. The score of rollout r
with query q (scaled dot product, the authors' ``UnifiedGNNDotProduct``):

    s_r = LN(W_q h_q) . LN(W_r [h_think_r ; h_answer_r ; MLP(f_r)]) / sqrt(dot_dim) + b,   p_r = sigmoid(s_r)

fitted by binary cross-entropy on the labelled rollouts (full batch, Adam).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NODE_TYPES = ("query", "think", "answer")
RELATIONS = (
    ("query", "generates", "think"),
    ("think", "rev_generates", "query"),
    ("think", "leads_to", "answer"),
    ("answer", "rev_leads_to", "think"),
    ("query", "similar_to", "query"),
)
SELF_LOOPS = {("query", "similar_to", "query")}


@dataclass
class RolloutGraph:
    x: dict[str, Tensor]  # node features: query [Q, D], think [R, D], answer [R, D]
    edges: dict[tuple[str, str, str], Tensor]  # [2, E] long: (src, dst) of each relation
    query_of_R: Tensor  # [R] long: the query node of each rollout
    features_RF: Tensor  # [R, F] answer features of each rollout

    def to(self, device: str | torch.device) -> RolloutGraph:
        return RolloutGraph({t: x.to(device) for t, x in self.x.items()}, {r: e.to(device) for r, e in self.edges.items()},
                            self.query_of_R.to(device), self.features_RF.to(device))  # fmt: skip


def knn_edges(query_QD: Tensor, num_memory: int, k: int) -> Tensor:
    """``similar_to`` edges: each query receives from its ``k`` most cosine-similar memory queries
    (never itself; ties: the lower index). Returns [2, E] (src, dst), grouped by dst."""
    unit = F.normalize(query_QD.float(), dim=-1)
    sim_QM = unit @ unit[:num_memory].T
    src, dst = [], []
    for i in range(query_QD.shape[0]):
        order = torch.argsort(-sim_QM[i], stable=True).tolist()
        nearest = [j for j in order if j != i][:k]
        src += nearest
        dst += [i] * len(nearest)
    return torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)


def build_graph(
    query_QD: Tensor,
    think_RD: Tensor,
    answer_RD: Tensor,
    query_of_R: Tensor,
    features_RF: Tensor,
    num_memory: int,
    k: int,
) -> RolloutGraph:
    """The heterogeneous graph of the module docstring."""
    rollouts = torch.arange(think_RD.shape[0])
    generates = torch.stack([query_of_R, rollouts])
    leads_to = torch.stack([rollouts, rollouts])
    edges = {
        ("query", "generates", "think"): generates,
        ("think", "rev_generates", "query"): generates.flip(0),
        ("think", "leads_to", "answer"): leads_to,
        ("answer", "rev_leads_to", "think"): leads_to.clone(),
        ("query", "similar_to", "query"): knn_edges(query_QD, num_memory, k),
    }
    return RolloutGraph({"query": query_QD, "think": think_RD, "answer": answer_RD}, edges, query_of_R, features_RF)


class GATv2(nn.Module):
    """One relation's GATv2 attention (module docstring), ``heads`` heads of ``dim // heads`` each."""

    def __init__(self, dim: int, heads: int, dropout: float, self_loops: bool):
        super().__init__()
        if dim % heads:
            raise ValueError(f"memreward: hidden_dim {dim} must be a multiple of heads {heads}")
        self.heads, self.dropout, self.self_loops = heads, dropout, self_loops
        self.lin_src, self.lin_dst = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.att = nn.Parameter(torch.empty(heads, dim // heads))
        self.bias = nn.Parameter(torch.zeros(dim))
        nn.init.xavier_uniform_(self.att)

    def forward(self, x_src: Tensor, x_dst: Tensor, edge_index: Tensor) -> Tensor:
        n_dst, H = x_dst.shape[0], self.heads
        src, dst = edge_index
        if self.self_loops:
            loops = torch.arange(n_dst, device=x_dst.device)
            src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
        xs = self.lin_src(x_src).view(x_src.shape[0], H, -1)
        xd = self.lin_dst(x_dst).view(n_dst, H, -1)
        e_EH = (F.leaky_relu(xs[src] + xd[dst], 0.2) * self.att).sum(-1)
        # softmax over the edges that end at each node
        idx = dst.unsqueeze(1).expand(-1, H)
        e_max = torch.full((n_dst, H), float("-inf"), device=e_EH.device).scatter_reduce(0, idx, e_EH, "amax")
        a_EH = torch.exp(e_EH - e_max[dst])
        alpha_EH = a_EH / torch.zeros(n_dst, H, device=a_EH.device).index_add(0, dst, a_EH)[dst]
        alpha_EH = F.dropout(alpha_EH, self.dropout, self.training)
        out = torch.zeros_like(xd).index_add(0, dst, alpha_EH.unsqueeze(-1) * xs[src])
        return out.reshape(n_dst, -1) + self.bias


class HeteroLayer(nn.Module):
    """A GATv2 per relation; per node type the mean over the relations that end there; ReLU."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.convs = nn.ModuleDict({"__".join(r): GATv2(dim, heads, dropout, r in SELF_LOOPS) for r in RELATIONS})

    def forward(self, h: dict[str, Tensor], edges: dict[tuple[str, str, str], Tensor]) -> dict[str, Tensor]:
        outs: dict[str, list[Tensor]] = {t: [] for t in NODE_TYPES}
        for r in RELATIONS:
            outs[r[2]].append(self.convs["__".join(r)](h[r[0]], h[r[2]], edges[r]))
        return {t: F.relu(torch.stack(o).mean(0)) for t, o in outs.items()}


class MemRewardGNN(nn.Module):
    """Projections per node type, ``num_layers`` hetero layers, the scaled dot-product scorer."""

    def __init__(
        self,
        embed_dim: int,
        feature_dim: int,
        hidden_dim: int,
        num_layers: int,
        heads: int,
        dropout: float,
        dot_dim: int,
    ):
        super().__init__()
        self.dot_dim = dot_dim
        self.proj = nn.ModuleDict({t: nn.Linear(embed_dim, hidden_dim) for t in NODE_TYPES})
        self.feature_mlp = nn.Sequential(nn.Linear(feature_dim, 64), nn.ReLU(), nn.Linear(64, hidden_dim))
        self.layers = nn.ModuleList(HeteroLayer(hidden_dim, heads, dropout) for _ in range(num_layers))
        self.query_head = nn.Sequential(nn.Linear(hidden_dim, dot_dim), nn.LayerNorm(dot_dim))
        self.response_head = nn.Sequential(nn.Linear(3 * hidden_dim, dot_dim), nn.LayerNorm(dot_dim))
        self.score_bias = nn.Parameter(torch.zeros(1))

    def forward(self, g: RolloutGraph) -> Tensor:
        """Logit s_r of every rollout, [R]."""
        h = {t: self.proj[t](g.x[t].float()) for t in NODE_TYPES}
        for layer in self.layers:
            h = layer(h, g.edges)
        q = self.query_head(h["query"][g.query_of_R])
        r = self.response_head(torch.cat([h["think"], h["answer"], self.feature_mlp(g.features_RF.float())], dim=-1))
        return (q * r).sum(-1) / self.dot_dim**0.5 + self.score_bias


def fit(model: MemRewardGNN, g: RolloutGraph, labels_R: Tensor, epochs: int, lr: float) -> list[float]:
    """``epochs`` full-batch steps of a fresh Adam on BCE(s_r, label_r) over every rollout of ``g``; the losses."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    model.train()
    losses = []
    for _ in range(epochs):
        loss = F.binary_cross_entropy_with_logits(model(g), labels_R.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses

"""CLIPO: Contrastive Learning in Policy Optimization (Cui et al. 2026, arXiv 2603.10101; mechanism
and defaults read from the authors' code, https://github.com/Qwen-Applications/CLIPO:
``ContrastiveHead``, ``supcon_loss`` and ``compute_contrastive_rewards`` in their ``ray_trainer.py``,
defaults in their ``hf_model.yaml`` and training scripts).

A lightweight contrastive head ``z = normalize(W h)`` (no bias; ``head: mlp`` puts a hidden layer
of the backbone's width and a ReLU before it) reads each row's pooled hidden state ``h`` (need
``pooled_hidden``: the mean of the policy's last-layer hidden states that predicted the row's
generated tokens). Within each group, every correct row i (reward > ``correct_threshold``) that has
another correct row and an incorrect one is an anchor; one positive p is drawn uniformly from the
group's other correct rows, and all other rows of the group are the denominator (InfoNCE):

    s_ij  = z_i . z_j                                              (cosine similarity)
    l_i   = -( s_ip / tau - log sum_{a in G(i), a != i} exp(s_ia / tau) )      (anchors; 0 otherwise)
    L     = mean over anchors of l_i                              (the head's loss, one AdamW step per step)
    r'_i  = r_i + max(c - lambda * l_i, r_min)                   (c = ``constant_reward``, r_min = ``min_reward``)

so a successful rollout that looks like the group's other successes gets a larger reward than one
that does not. The shaped rewards ``r'`` go to the ``base`` estimator (the paper's runs: ``grpo``),
whose declared needs become clipo's. The head's loss is computed before its update and the rewards
come from that forward pass, as in the authors' code; the hidden states are detached, so the
policy learns only through the rewards. The head and its optimizer live in clipo's state, saved
with every checkpoint and restored on resume. Called without the need (row tensors alone), clipo is
its base estimator.

Choices where the paper and code leave room (also in ``docs/objectives.md``):
- pooling: the authors mean-pool the sampler's (SGLang's) last-layer hidden states of the generated
  tokens during the rollout; we recompute them with the policy before the update (the same
  weights), averaging the hidden states at the positions that predict each loss token;
- the positive's draw uses a generator seeded by (``seed``, step), so a resumed run draws the same.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from agent_rl.algorithms.advantages.common import is_correct
from agent_rl.algorithms.needs import NEEDS, register_need
from agent_rl.algorithms.registry import (
    ADVANTAGES,
    AdvantageInputs,
    AdvantageOutput,
    ComponentConfig,
    record_choice,
    register_advantage,
)
from agent_rl.algorithms.value_basis import map_last_hidden


def pooled_hidden_states(model: torch.nn.Module, batch: Any, rows_per_call: int = 8) -> torch.Tensor:
    """``[B, H]`` fp32: per row, the mean of the last-layer hidden states at positions t - 1 for the
    loss tokens t (the states that predicted the generated tokens); zeros for a row without any."""

    def pool(rows: slice, hidden_BTH: torch.Tensor) -> torch.Tensor:
        mask_BT = batch.loss_mask_BT[rows].float()
        predicts_BT = torch.cat([mask_BT[:, 1:], torch.zeros_like(mask_BT[:, :1])], dim=1)  # h_{t-1} predicts token t
        return ((hidden_BTH * predicts_BT[..., None]).sum(1) / predicts_BT.sum(1, keepdim=True).clamp(min=1.0)).cpu()

    return map_last_hidden(model, batch, pool, rows_per_call)


if "pooled_hidden" not in NEEDS:
    register_need(
        "pooled_hidden",
        "one vector per row: the mean of the policy's last-layer hidden states that predicted its generated tokens",
        compute=lambda ctx: pooled_hidden_states(ctx.policy, ctx.batch),
        to_batch=False,
    )


class ClipoConfig(ComponentConfig):
    base: str = Field(
        "grpo",
        description="the advantage estimator that receives the shaped rewards (paper: grpo)",
    )
    base_options: dict[str, Any] = Field(default_factory=dict, description="the base estimator's config fields")
    head: Literal["linear", "mlp"] = Field(
        "linear",
        description="contrastive head: one linear map, or linear-ReLU-linear (code: linear)",
    )
    output_size: int = Field(
        512,
        ge=1,
        description="embedding width of the head (code: 512 on GSM8K, 2048 on MATH)",
    )
    temperature: float = Field(
        0.05,
        gt=0.0,
        description="InfoNCE temperature tau of the cosine similarities (code: 0.05)",
    )
    reward_coef: float = Field(
        0.2,
        ge=0.0,
        description="lambda: contrastive reward = constant_reward - lambda * l_i (code: 0.2)",
    )
    constant_reward: float = Field(0.0, description="c, added to every row's contrastive reward (code: 0)")
    min_reward: float = Field(-0.5, description="lower clamp of the contrastive reward (code: -0.5)")
    lr: float = Field(1e-3, gt=0.0, description="AdamW learning rate of the head (code: 1e-3)")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW weight decay of the head (code: 0.01)")
    correct_threshold: float = Field(0.5, description="a row is correct (a positive) when its reward is above this")
    seed: int = Field(
        0,
        description="seed of the head's initialization and of the positives' draw (with the step)",
    )

    @model_validator(mode="after")
    def _base_is_a_stateless_estimator(self) -> ClipoConfig:
        entry = ADVANTAGES.get(self.base)  # an unknown name fails here, naming the allowed ones
        if self.base == "clipo" or entry.state is not None:
            raise ValueError(
                f"clipo: base must be a stateless advantage estimator other than clipo (got '{self.base}')"
            )
        entry.config(**self.base_options)
        return self

    def base_config(self) -> ComponentConfig:
        return ADVANTAGES.get(self.base).config(name=self.base, **self.base_options)


def make_head(kind: str, hidden_size: int, output_size: int) -> torch.nn.Module:
    if kind == "linear":
        return torch.nn.Linear(hidden_size, output_size, bias=False)
    return torch.nn.Sequential(
        torch.nn.Linear(hidden_size, hidden_size, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden_size, output_size, bias=False),
    )


def infonce_per_row(
    z_BD: torch.Tensor,
    correct_B: torch.Tensor,
    group_index_B: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's InfoNCE loss ``l_i`` (0 for rows that are not anchors) and the anchor mask.

    ``z_BD``: unit embeddings; the positive of anchor i is one other correct row of its group,
    drawn uniformly; the denominator runs over every other row of the group."""
    B = z_BD.shape[0]
    eye = torch.eye(B, dtype=torch.bool, device=z_BD.device)
    same_group = group_index_B[:, None] == group_index_B[None, :]
    correct = correct_B.bool()
    positives = same_group & correct[:, None] & correct[None, :] & ~eye
    others = same_group & ~eye
    negatives = others & ~positives
    anchor_B = correct & positives.any(1) & negatives.any(1)
    logits_BB = (z_BD @ z_BD.T) / temperature
    log_denominator_B = torch.logsumexp(logits_BB.masked_fill(~others, float("-inf")), dim=1)
    weights = (
        positives.double() + (~positives.any(1, keepdim=True)).double() * eye.double()
    )  # a row without positives draws itself
    pick_B = torch.multinomial(weights, 1, generator=generator).squeeze(1)
    loss_B = -(logits_BB.gather(1, pick_B[:, None]).squeeze(1) - log_denominator_B)
    return torch.where(anchor_B, loss_B, torch.zeros_like(loss_B)), anchor_B


class ClipoState:
    """The contrastive head and its AdamW optimizer, made on the first step (the width comes from
    the hidden states), checkpointed with the run."""

    def __init__(self) -> None:
        self.head: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.shape: tuple[str, int, int] | None = None
        self.hyper: dict[str, float] = {}

    def ensure(self, cfg: ClipoConfig, hidden_size: int) -> torch.nn.Module:
        if self.head is None:
            self.shape = (cfg.head, hidden_size, cfg.output_size)
            with torch.random.fork_rng(devices=[]):  # the head's initialization, reproducible, the run's RNG untouched
                torch.manual_seed(cfg.seed)
                self.head = make_head(*self.shape)
            self.hyper = {"lr": cfg.lr, "weight_decay": cfg.weight_decay}
            self.optimizer = torch.optim.AdamW(self.head.parameters(), **self.hyper)
        return self.head

    def state_dict(self) -> dict[str, Any]:
        if self.head is None:
            return {}
        state = {
            "shape": self.shape,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "hyper": self.hyper,
        }
        return copy.deepcopy(state)  # a snapshot: later steps do not move it

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self.shape = tuple(state["shape"])
        self.head = make_head(*self.shape)
        self.head.load_state_dict(state["head"])
        self.hyper = dict(state["hyper"])
        self.optimizer = torch.optim.AdamW(self.head.parameters(), **self.hyper)
        self.optimizer.load_state_dict(state["optimizer"])


def _config_needs(cfg: ClipoConfig) -> set[str]:
    return {"pooled_hidden", *ADVANTAGES.get(cfg.base).needs_for(cfg.base_config())}


def _contrastive_step(x: AdvantageInputs, cfg: ClipoConfig, hidden_BH: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Each row's InfoNCE loss under the head before its step, then the head's AdamW step on their mean."""
    state = x.state if x.state is not None else ClipoState()
    head = state.ensure(cfg, int(hidden_BH.shape[-1]))
    correct_B = is_correct(x.rewards_B, cfg.correct_threshold).bool().cpu()
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + x.step)
    head.train()
    with torch.enable_grad():
        z_BD = F.normalize(head(hidden_BH.detach().float().cpu()), dim=-1)
        loss_B, anchor_B = infonce_per_row(z_BD, correct_B, x.group_index_B.cpu(), cfg.temperature, generator)
        num_anchors = int(anchor_B.sum())
        if num_anchors:
            state.optimizer.zero_grad(set_to_none=True)
            (loss_B.sum() / num_anchors).backward()
            state.optimizer.step()
    return loss_B.detach().double(), num_anchors


@register_advantage(
    "clipo",
    config=ClipoConfig,
    state=ClipoState,
    config_needs=_config_needs,
    status="paper",
    evidence="mechanism and defaults from the authors' code (Qwen-Applications/CLIPO "
    "ray_trainer.py, hf_model.yaml); 3 recorded choices; hand-computed in "
    "tests/algorithms/test_clipo.py",
)
def clipo(x: AdvantageInputs, cfg: ClipoConfig) -> AdvantageOutput:
    """CLIPO contrastive reward shaping (Cui et al. 2026), then the base estimator (default grpo).

    z = normalize(W h); l_i = -(s_ip / tau - log sum_{a in G, a != i} exp(s_ia / tau)) for correct anchors;
    r'_i = r_i + max(c - lambda l_i, r_min); the head takes one AdamW step on mean_anchors l_i.
    """
    hidden_BH = x.extras.get("pooled_hidden")
    if hidden_BH is None:  # called with row tensors alone: no contrastive reward, the base estimator
        loss_B, num_anchors = torch.zeros(x.rewards_B.shape[0], dtype=torch.float64), 0
    else:
        loss_B, num_anchors = _contrastive_step(x, cfg, hidden_BH)
    bonus_B = (cfg.constant_reward - cfg.reward_coef * loss_B.detach().double()).clamp(min=cfg.min_reward)
    shaped_B = x.rewards_B.double() + bonus_B.to(x.rewards_B.device)
    base_x = dataclasses.replace(x, rewards_B=shaped_B.to(torch.float32), state=None)
    out = ADVANTAGES.get(cfg.base).fn(base_x, cfg.base_config())
    out.metrics.update(
        {
            "clipo/loss": float(loss_B.sum() / max(num_anchors, 1)),
            "clipo/anchors": float(num_anchors),
            "clipo/reward_mean": float(bonus_B.mean()),
        }
    )
    return out


record_choice(
    "clipo",
    "where the pooled hidden states come from",
    (
        "recomputed with the policy before the update (the rollout's weights): mean of the last-layer states "
        "predicting the generated tokens (the authors pool SGLang's decode states)"
    ),
)
record_choice(
    "clipo",
    "which positive an anchor uses",
    (
        "one other correct row of its group drawn uniformly (as the authors' infonce_loss), by a generator seeded "
        "with (seed, step) so a resumed run draws the same"
    ),
)
record_choice(
    "clipo",
    "what the shaped reward feeds",
    "the configured base estimator (default grpo, the authors' runs); its declared needs become clipo's",
)

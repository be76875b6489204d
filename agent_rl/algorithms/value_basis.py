"""SARPO's value read from the policy itself (Liang et al. 2026, "SAPO: Single-Rollout Autoregressive
Policy Optimization for Agentic Reinforcement Learning", arXiv 2608.19842; the catalog's key is
``sarpo``, as ``sapo`` is Soft Adaptive PO).

Two entries of the LM head are the *value basis* w+ and w-; the policy's logit difference at a
context c, squashed, is a value in [-R_max, R_max]:

    p(c) = clip((z_{w+}(c) - z_{w-}(c)) / tau_v, -1, 1)
    V(s_k)      = R_max p(c_k^s)    read at the last token before turn k's response (its state)
    Q(s_k, a_k) = R_max p(c_k^sa)   read at the last token of turn k's response (state and action)

Our choice of w+ / w-: the two last rows of the LM head (ids V-1 and V-2), which the tokenizers of
the usual checkpoints leave unused (embedding padding); the paper reserves two vocabulary entries
and renormalizes the policy over the others, we do not renormalize (those ids are never sampled by
the tokenizer's text, and their logits move only through the value losses).

Here: the turn boundaries of each row and the logit differences before the update (need
``value_basis``), the captured hidden states of the learner's own forward pass (need
``policy_hidden``), and the trajectory-level GAE over turns that the advantage and the loss share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agent_rl.algorithms.needs import NEEDS, register_need

# columns of the ``value_basis`` need, per row and turn: [B, K, 5]
V_POS, Q_POS, VALID, Z_V, Z_Q = range(5)


def basis_direction(head: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | float]:
    """w = W[V-1] - W[V-2] and the bias difference: z_{w+} - z_{w-} = h . w + b."""
    weight = head.weight
    if hasattr(weight, "to_local"):  # a sharded (FSDP2) head outside its forward: rows are not addressable
        raise ValueError("sarpo reads two rows of the LM head, which learner ranks shard: use learner.world_size: 1")
    bias = getattr(head, "bias", None)
    return weight[-1] - weight[-2], (bias[-1] - bias[-2]) if bias is not None else 0.0


def turn_boundaries(
    loss_mask_BT: torch.Tensor, turn_index_BT: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row and turn (responses in order): the hidden position read for V (the token before the
    response's first token), for Q (the response's last token), and 1 on real turns: ``[B, K]`` each.
    A turn is a run of loss tokens with one turn index (without turn indices: consecutive loss tokens)."""
    B = loss_mask_BT.shape[0]
    turns: list[list[tuple[int, int]]] = []
    for b in range(B):
        spans: list[tuple[int, int]] = []
        prev_t, prev_turn = -2, None
        for t in torch.nonzero(loss_mask_BT[b] > 0).flatten().tolist():
            turn = int(turn_index_BT[b, t]) if turn_index_BT is not None else None
            if spans and t == prev_t + 1 and turn == prev_turn:
                spans[-1] = (spans[-1][0], t)
            else:
                spans.append((t, t))
            prev_t, prev_turn = t, turn
        turns.append(spans)
    K = max((len(s) for s in turns), default=0) or 1
    v_pos, q_pos, valid = torch.zeros(B, K, dtype=torch.long), torch.zeros(B, K, dtype=torch.long), torch.zeros(B, K)
    for b, spans in enumerate(turns):
        for k, (first, last) in enumerate(spans):
            v_pos[b, k], q_pos[b, k], valid[b, k] = first - 1, last, 1.0
    return v_pos, q_pos, valid


@torch.no_grad()
def map_last_hidden(
    model: torch.nn.Module, batch: Any, fn: Callable[[slice, torch.Tensor], torch.Tensor], rows_per_call: int = 8
) -> torch.Tensor:
    """``fn(rows, hidden_BTH)`` on the last-layer hidden states of ``rows_per_call`` rows at a time (eval mode,
    no gradient), concatenated over the batch's rows."""
    was_training = model.training
    model.eval()
    out = []
    for s in range(0, batch.input_ids_BT.shape[0], rows_per_call):
        rows = slice(s, s + rows_per_call)
        hidden_BTH = model(
            input_ids=batch.input_ids_BT[rows],
            attention_mask=batch.attention_mask_BT[rows],
            position_ids=batch.position_ids_BT[rows],
            use_cache=False,
            output_hidden_states=True,
        ).hidden_states[-1]
        out.append(fn(rows, hidden_BTH.float()))
    model.train(was_training)
    return torch.cat(out)


def value_basis(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """``[B, K, 5]`` float64: V position, Q position, valid, and the logit differences at both, under ``model``."""
    v_pos, q_pos, valid = turn_boundaries(
        batch.loss_mask_BT.cpu(), None if batch.turn_index_BT is None else batch.turn_index_BT.cpu()
    )
    w_H, b = basis_direction(model.get_output_embeddings())
    z = map_last_hidden(model, batch, lambda rows, h_BTH: (h_BTH @ w_H.float() + b).double().cpu())
    out = torch.zeros(*v_pos.shape, 5, dtype=torch.float64)
    out[..., V_POS], out[..., Q_POS], out[..., VALID] = v_pos.double(), q_pos.double(), valid.double()
    out[..., Z_V] = z.gather(1, v_pos.clamp(min=0)) * valid
    out[..., Z_Q] = z.gather(1, q_pos) * valid
    return out


def squash(z: torch.Tensor, r_max: float, tau_v: float) -> torch.Tensor:
    """R_max * clip(z / tau_v, -1, 1)."""
    return r_max * (z / tau_v).clamp(-1.0, 1.0)


def old_turn_values(
    basis_BK5: torch.Tensor, r_max: float, tau_v: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(v_pos, q_pos, valid, V_old, Q_old) of the ``value_basis`` need."""
    valid = basis_BK5[..., VALID]
    v_old = squash(basis_BK5[..., Z_V], r_max, tau_v) * valid
    q_old = squash(basis_BK5[..., Z_Q], r_max, tau_v) * valid
    return basis_BK5[..., V_POS].long(), basis_BK5[..., Q_POS].long(), valid, v_old, q_old


def turn_rewards(rewards_B: torch.Tensor, valid_BK: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The outcome reward on each row's last turn (0 on the others) and the done flags (1 on the last turn)."""
    K = valid_BK.shape[1]
    last_B = (valid_BK * torch.arange(1, K + 1, dtype=valid_BK.dtype)).argmax(-1)
    done_BK = torch.zeros_like(valid_BK)
    done_BK[torch.arange(valid_BK.shape[0]), last_B] = 1.0
    done_BK = done_BK * valid_BK
    return done_BK * rewards_B.to(valid_BK.dtype)[:, None], done_BK


def turn_gae(
    rewards_BK: torch.Tensor,
    done_BK: torch.Tensor,
    v_old_BK: torch.Tensor,
    valid_BK: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """delta_k = r_k + gamma (1 - d_k) V_{k+1} - V_k;  A_k = delta_k + gamma lam (1 - d_k) A_{k+1}  (0 on padding turns)."""
    B, K = rewards_BK.shape
    adv_BK = torch.zeros_like(rewards_BK)
    next_v, next_a = torch.zeros(B, dtype=rewards_BK.dtype), torch.zeros(B, dtype=rewards_BK.dtype)
    for k in reversed(range(K)):
        cont = 1.0 - done_BK[:, k]
        delta = rewards_BK[:, k] + gamma * cont * next_v - v_old_BK[:, k]
        a = (delta + gamma * lam * cont * next_a) * valid_BK[:, k]
        adv_BK[:, k] = a
        keep = valid_BK[:, k] > 0
        next_v = torch.where(keep, v_old_BK[:, k], next_v)
        next_a = torch.where(keep, a, next_a)
    return adv_BK


def sarsa_targets(
    rewards_BK: torch.Tensor, done_BK: torch.Tensor, q_old_BK: torch.Tensor, valid_BK: torch.Tensor, gamma: float
) -> torch.Tensor:
    """y^Q_k = r_k + gamma (1 - d_k) Q_old(s_{k+1}, a_{k+1}) (on-policy SARSA; turns are consecutive within a row)."""
    next_q = torch.cat([q_old_BK[:, 1:], torch.zeros_like(q_old_BK[:, :1])], dim=1)
    return (rewards_BK + gamma * (1.0 - done_BK) * next_q) * valid_BK


def turn_tokens(v_pos_BK: torch.Tensor, q_pos_BK: torch.Tensor, valid_BK: torch.Tensor, T: int) -> torch.Tensor:
    """``[B, K, T]`` float64: 1 on the positions v_pos + 1 .. q_pos of each real turn."""
    t_T = torch.arange(T, device=v_pos_BK.device)
    return ((t_T > v_pos_BK[..., None]) & (t_T <= q_pos_BK[..., None]) & (valid_BK[..., None] > 0)).double()


def spread_over_turns(
    per_turn_BK: torch.Tensor, v_pos_BK: torch.Tensor, q_pos_BK: torch.Tensor, valid_BK: torch.Tensor, T: int
) -> torch.Tensor:
    """``[B, T]``: each turn's value on its response positions (v_pos + 1 .. q_pos)."""
    return (turn_tokens(v_pos_BK, q_pos_BK, valid_BK, T).to(per_turn_BK.dtype) * per_turn_BK[..., None]).sum(1)


if "value_basis" not in NEEDS:
    register_need(
        "value_basis",
        "per row and turn: the V / Q read positions and the policy's value-basis logit differences z_{w+} - z_{w-} there, before the update",
        compute=lambda ctx: value_basis(ctx.policy, ctx.batch),
    )
if "policy_hidden" not in NEEDS:
    register_need(
        "policy_hidden",
        "the last-layer hidden states of the learner's own forward pass (with gradient) and its LM head",
        when="in_update",
        forward="capture",
    )

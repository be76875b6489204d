"""SARPO: turn boundaries, the turn-level GAE and SARSA targets by hand, the batch-normalized advantage,
the value losses and their gradient into the shared hidden states, and a short ``agent-rl train``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agent_rl.algorithms import value_basis as vb
from agent_rl.algorithms.advantages.sarpo import SarpoAdvantageConfig, sarpo
from agent_rl.algorithms.losses.sarpo import SarpoLossConfig, sarpo_loss
from agent_rl.algorithms.registry import AdvantageInputs, LossInputs

# one row, two assistant turns (tokens 1-2 and 5-6) around an observation (3-4)
MASK = torch.tensor([[0.0, 1, 1, 0, 0, 1, 1, 0]])
TURNS = torch.tensor([[-1, 0, 0, -1, -1, 1, 1, -1]])


def test_turn_boundaries_read_v_before_and_q_at_the_end_of_each_response():
    v_pos, q_pos, valid = vb.turn_boundaries(MASK, TURNS)
    assert v_pos.tolist() == [[0, 4]] and q_pos.tolist() == [[2, 6]] and valid.tolist() == [[1.0, 1.0]]
    # a change of turn index without a gap is a new turn; rows with fewer turns are padded
    v_pos, q_pos, valid = vb.turn_boundaries(
        torch.tensor([[0.0, 1, 1, 1], [0, 1, 0, 0]]), torch.tensor([[-1, 0, 1, 1], [-1, 0, -1, -1]])
    )
    assert (
        v_pos.tolist() == [[0, 1], [0, 0]] and q_pos.tolist() == [[1, 3], [1, 0]] and valid.tolist() == [[1, 1], [1, 0]]
    )


def test_turn_gae_and_sarsa_targets_by_hand():
    valid = torch.ones(1, 2, dtype=torch.float64)
    r, done = vb.turn_rewards(torch.tensor([1.0]), valid)
    assert r.tolist() == [[0.0, 1.0]] and done.tolist() == [[0.0, 1.0]]
    # V_old = [0.5, 0.2], gamma 1, lambda 0.5: A_1 = 1 - 0.2 = 0.8; A_0 = (0 + 0.2 - 0.5) + 0.5 * 0.8 = 0.1
    adv = vb.turn_gae(r, done, torch.tensor([[0.5, 0.2]], dtype=torch.float64), valid, gamma=1.0, lam=0.5)
    assert torch.allclose(adv, torch.tensor([[0.1, 0.8]], dtype=torch.float64))
    # gamma 0.5: A_0 = (0 + 0.5 * 0.2 - 0.5) + 0.25 * 0.8 = -0.2
    adv = vb.turn_gae(r, done, torch.tensor([[0.5, 0.2]], dtype=torch.float64), valid, gamma=0.5, lam=0.5)
    assert torch.allclose(adv[0, 0], torch.tensor(-0.2, dtype=torch.float64))
    # SARSA: Q_old = [0.4, 0.7]: y_0 = 0 + 0.7, y_1 = 1 (terminal)
    y = vb.sarsa_targets(r, done, torch.tensor([[0.4, 0.7]], dtype=torch.float64), valid, gamma=1.0)
    assert torch.allclose(y, torch.tensor([[0.7, 1.0]], dtype=torch.float64))


def _basis(z_v, z_q, v_pos=((0, 4),), q_pos=((2, 6),)):
    out = torch.zeros(len(v_pos), len(v_pos[0]), 5, dtype=torch.float64)
    out[..., vb.V_POS], out[..., vb.Q_POS], out[..., vb.VALID] = (
        torch.tensor(v_pos).double(),
        torch.tensor(q_pos).double(),
        1.0,
    )
    out[..., vb.Z_V], out[..., vb.Z_Q] = torch.tensor(z_v), torch.tensor(z_q)
    return out


def test_advantage_is_the_turn_gae_normalized_over_the_batch_by_hand():
    # two rows of two turns; tau_v 2 halves the logit differences: V_old = [0.5, 0.2] and [0, 0]
    basis = torch.cat([_basis([[1.0, 0.4]], [[0.0, 0.0]]), _basis([[0.0, 0.0]], [[0.0, 0.0]])])
    x = AdvantageInputs(
        rewards_B=torch.tensor([1.0, 0.0]),
        loss_mask_BT=MASK.expand(2, 8),
        group_index_B=torch.tensor([0, 1]),
        turn_index_BT=TURNS.expand(2, 8),
        extras={"value_basis": basis},
    )
    out = sarpo(x, SarpoAdvantageConfig(lam=0.5, value_temperature=2.0))
    turns = [0.1, 0.8, 0.0, 0.0]  # row 0 as in the hand example above; row 1: no reward, V = 0
    mean = sum(turns) / 4
    std = math.sqrt(sum((a - mean) ** 2 for a in turns) / 4)
    a = [(t - mean) / (std + 1e-6) for t in turns]
    expected = torch.tensor([[0, a[0], a[0], 0, 0, a[1], a[1], 0], [0, a[2], a[2], 0, 0, a[3], a[3], 0]])
    assert torch.allclose(out.advantages_BT, expected.float(), atol=1e-5)
    # without the need the values are 0: plain returns, normalized
    x.extras = {}
    assert torch.isfinite(sarpo(x, SarpoAdvantageConfig()).advantages_BT).all()


def test_value_losses_and_their_gradient_reach_the_shared_hidden_states():
    H, V = 3, 6
    head = torch.nn.Linear(H, V, bias=False)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[-1] = torch.tensor([1.0, 0.0, 0.0])  # z_{w+} - z_{w-} = h[0] - h[1]
        head.weight[-2] = torch.tensor([0.0, 1.0, 0.0])
    hidden = torch.zeros(1, 8, H)
    hidden[0, 0, 0], hidden[0, 4, 0], hidden[0, 2, 1], hidden[0, 6, 0] = (
        0.3,
        0.1,
        0.2,
        0.9,
    )  # V = [0.3, 0.1], Q = [-0.2, 0.9]
    hidden.requires_grad_(True)
    basis = _basis([[0.5, 0.2]], [[0.4, 0.7]])  # old values (tau_v 1, R_max 1)
    x = LossInputs(
        logprobs_BT=torch.zeros(1, 8),
        old_logprobs_BT=torch.zeros(1, 8),
        advantages_BT=torch.zeros(1, 8),
        loss_mask_BT=MASK,
        rewards_B=torch.tensor([1.0]),
        extras={"value_basis": basis, "policy_hidden": hidden, "lm_head": head},
    )
    cfg = SarpoLossConfig(lam=0.5, value_clip=None, value_coef=1.0, q_coef=2.0)
    out = sarpo_loss(x, cfg)
    # targets: y^V = V_old + A = [0.5 + 0.1, 0.2 + 0.8] = [0.6, 1.0]; y^Q = [0.7, 1.0]
    l_v = [0.5 * (0.3 - 0.6) ** 2, 0.5 * (0.1 - 1.0) ** 2]
    l_q = [0.5 * (-0.2 - 0.7) ** 2, 0.5 * (0.9 - 1.0) ** 2]
    per_turn = [l_v[k] + 2.0 * l_q[k] for k in range(2)]
    # the policy term is 0 (zero advantages); each turn's loss is spread over its 2 tokens
    assert torch.allclose(
        out.loss_BT,
        torch.tensor([[0, per_turn[0] / 2, per_turn[0] / 2, 0, 0, per_turn[1] / 2, per_turn[1] / 2, 0]]),
        atol=1e-6,
    )
    out.loss_BT.sum().backward()
    g = hidden.grad[0]
    # d/dh at V's read position of turn 0 = c_V (V - y^V) (w+ - w-) = (0.3 - 0.6) * [1, -1, 0]
    assert torch.allclose(g[0], torch.tensor([-0.3, 0.3, 0.0]), atol=1e-6)
    assert torch.allclose(g[2], 2.0 * (-0.2 - 0.7) * torch.tensor([1.0, -1.0, 0.0]), atol=1e-6)  # Q of turn 0
    assert torch.allclose(g[6], 2.0 * (0.9 - 1.0) * torch.tensor([1.0, -1.0, 0.0]), atol=1e-6)
    assert g[1].abs().sum() == 0 and g[7].abs().sum() == 0
    # without the needs the loss is ppo_clip; hidden states without the targets (per-turn rows) are refused
    x.extras = {}
    assert torch.equal(sarpo_loss(x, cfg).loss_BT, torch.zeros(1, 8))
    x.extras = {"policy_hidden": hidden, "lm_head": head}
    with pytest.raises(ValueError, match="rollout.layout: concat"):
        sarpo_loss(x, cfg)


def test_packed_rows_are_refused_with_the_setting_to_change():
    from agent_rl.learner.hidden import head_inputs

    with (
        pytest.raises(ValueError, match="learner.packing: false"),
        head_inputs(torch.nn.Linear(2, 2), True, packed=True),
    ):
        pass


def test_a_sharded_lm_head_is_refused_with_the_setting_to_change():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="learner.world_size: 1"):
        vb.basis_direction(SimpleNamespace(weight=SimpleNamespace(to_local=lambda: None)))


def test_agent_rl_train_with_sarpo(tmp_path, tiny_model_dir):
    from agent_rl.cli import main
    from tests.conftest import ROOT
    from tests.test_trainer import SMALL

    rc = main(
        [
            "train",
            str(ROOT / "configs" / "quickstart.yaml"),
            f"model.path={tiny_model_dir}",
            f"run.dir={tmp_path / 'run'}",
            *SMALL,
            "trainer.steps=1",
            "tracking.loggers=[]",
            "algorithm.advantage.name=sarpo",
            "algorithm.loss.name=sarpo",
            "learner.packing=false",
        ]
    )
    assert rc in (0, None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "sarpo/value_loss" in r)
    assert math.isfinite(step["sarpo/value_loss"]) and math.isfinite(step["sarpo/q_loss"]) and step["sarpo/turns"] >= 4

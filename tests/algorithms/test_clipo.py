"""CLIPO: the InfoNCE of a group's correct rows by hand, the shaped rewards handed to GRPO, the head's
training step, its checkpoint, the pooled hidden states, and a short ``agent-rl train`` with resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agent_rl.algorithms.advantages.clipo import (
    ClipoConfig,
    ClipoState,
    clipo,
    infonce_per_row,
    pooled_hidden_states,
)
from agent_rl.algorithms.registry import ADVANTAGES, AdvantageInputs

# one group of three: rows 0 and 1 correct, row 2 incorrect; unit embeddings with s01 = 0.6, s02 = 0, s12 = 0.8
Z = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
CORRECT = torch.tensor([True, True, False])
GROUP = torch.tensor([0, 0, 0])
L0 = math.log(1 + math.exp(-1.2))  # tau 0.5: -(1.2 - log(e^1.2 + e^0))
L1 = math.log(1 + math.exp(0.4))  # -(1.2 - log(e^1.2 + e^1.6))


def test_infonce_by_hand():
    loss_B, anchor_B = infonce_per_row(Z, CORRECT, GROUP, temperature=0.5)
    assert anchor_B.tolist() == [True, True, False]
    assert torch.allclose(loss_B, torch.tensor([L0, L1, 0.0]), atol=1e-6)


def test_anchors_need_a_positive_and_a_negative_in_their_own_group():
    # all correct (no negative), a lone correct row (no positive), and the two groups do not mix
    z = torch.nn.functional.normalize(torch.randn(6, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    loss_B, anchor_B = infonce_per_row(
        z,
        torch.tensor([1, 1, 1, 1, 0, 0]).bool(),
        torch.tensor([0, 0, 0, 1, 1, 1]),
        0.05,
    )
    assert anchor_B.tolist() == [False] * 6 and loss_B.abs().max() == 0


def _inputs(hidden_BH, rewards=(1.0, 1.0, 0.0), step=0, state=None):
    return AdvantageInputs(
        rewards_B=torch.tensor(rewards),
        loss_mask_BT=torch.ones(len(rewards), 2),
        group_index_B=GROUP[: len(rewards)],
        extras={"pooled_hidden": hidden_BH},
        step=step,
        state=state,
    )


def _identity_head_state(cfg: ClipoConfig) -> ClipoState:
    state = ClipoState()
    head = state.ensure(cfg, hidden_size=2)
    with torch.no_grad():
        head.weight.copy_(torch.eye(2))
    return state


def test_shaped_rewards_go_to_grpo_by_hand():
    cfg = ClipoConfig(output_size=2, temperature=0.5)
    out = clipo(
        _inputs(Z * 3.0, state=_identity_head_state(cfg)), cfg
    )  # the head normalizes: the scale does not matter
    shaped = [
        1.0 - 0.2 * L0,
        1.0 - 0.2 * L1,
        0.0,
    ]  # c = 0; incorrect row: max(0, -0.5) = 0
    mean = sum(shaped) / 3
    std = math.sqrt(sum((r - mean) ** 2 for r in shaped) / 2)
    expected = torch.tensor([(r - mean) / (std + 1e-6) for r in shaped])
    assert torch.allclose(out.advantages_BT, expected[:, None].expand(3, 2), atol=1e-5)
    assert out.metrics["clipo/anchors"] == 2 and abs(out.metrics["clipo/loss"] - (L0 + L1) / 2) < 1e-5
    # the clamp: lambda 10 makes row 1's contrastive reward -9.13, clamped to -0.5
    cfg = ClipoConfig(output_size=2, temperature=0.5, reward_coef=10.0)
    out = clipo(_inputs(Z, state=_identity_head_state(cfg)), cfg)
    assert abs(out.metrics["clipo/reward_mean"] - (-0.5 - 0.5 + 0.0) / 3) < 1e-6


def test_the_head_trains_and_the_hidden_states_get_no_gradient():
    cfg = ClipoConfig(output_size=4, temperature=0.5, lr=5e-2)
    hidden = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [1.0, 1.0, -1.0]], requires_grad=True)
    state = ClipoState()
    losses = [clipo(_inputs(hidden, step=s, state=state), cfg).metrics["clipo/loss"] for s in range(30)]
    assert losses[-1] < losses[0] - 0.1  # the two correct rows are pulled together, away from the incorrect one
    assert hidden.grad is None
    # the gradient of the step is the InfoNCE's: recompute it by autograd on a copy of the head
    head = torch.nn.Linear(3, 4, bias=False)
    head.load_state_dict(state.head.state_dict())
    z = torch.nn.functional.normalize(head(hidden.detach()), dim=-1)
    loss_B, anchor_B = infonce_per_row(z, CORRECT, GROUP, 0.5)
    (loss_B.sum() / anchor_B.sum()).backward()
    assert head.weight.grad.abs().sum() > 0


def test_the_head_is_checkpointed_and_restored():
    cfg = ClipoConfig(output_size=4, temperature=0.5)
    hidden = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    a = ClipoState()
    clipo(_inputs(hidden, step=0, state=a), cfg)
    b = ClipoState()
    b.load_state_dict(a.state_dict())
    out_a, out_b = (
        clipo(_inputs(hidden, step=1, state=a), cfg),
        clipo(_inputs(hidden, step=1, state=b), cfg),
    )
    assert torch.equal(out_a.advantages_BT, out_b.advantages_BT)
    assert all(torch.equal(p, q) for p, q in zip(a.head.parameters(), b.head.parameters(), strict=True))
    assert ClipoState().state_dict() == {}  # nothing to save before the first step


def test_config_names_the_base_and_composes_its_needs():
    with pytest.raises(ValueError, match="unknown advantage 'nope'"):
        ClipoConfig(base="nope")
    with pytest.raises(ValueError, match="stateless"):
        ClipoConfig(base="dcpo_smooth")
    entry = ADVANTAGES.get("clipo")
    assert entry.needs_for(ClipoConfig()) == {"pooled_hidden"}
    assert entry.needs_for(ClipoConfig(base="gae")) == {"pooled_hidden", "values"}
    # without the need (row tensors alone) clipo is its base estimator
    x = _inputs(Z)
    x.extras = {}
    plain = ADVANTAGES.get("grpo").fn(_inputs(Z), ADVANTAGES.get("grpo").config())
    assert torch.equal(clipo(x, ClipoConfig()).advantages_BT, plain.advantages_BT)


def test_pooled_hidden_states_average_the_states_that_predict_generated_tokens(
    tiny_model_dir,
):
    from agent_rl.core.types import TrainBatch
    from agent_rl.models.loading import load_model

    model = load_model(tiny_model_dir, "float32", "cpu")
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 9, 10, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    loss = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 0, 0]])
    batch = TrainBatch(
        ids,
        attn,
        loss,
        torch.arange(5).expand(2, 5),
        torch.zeros(2, 5),
        None,
        torch.zeros(2),
        torch.zeros(2),
        -torch.ones(2, 5),
        torch.zeros(2),
    )
    pooled = pooled_hidden_states(model, batch, rows_per_call=1)
    with torch.no_grad():
        h = model(input_ids=ids[:1, :4], output_hidden_states=True).hidden_states[-1][0]
    assert torch.allclose(pooled[0], (h[1] + h[2]) / 2, atol=1e-5)  # tokens 2 and 3 are predicted at positions 1 and 2
    with torch.no_grad():
        h = model(input_ids=ids[1:, :3], output_hidden_states=True).hidden_states[-1][0]
    assert torch.allclose(pooled[1], (h[0] + h[1]) / 2, atol=1e-5)


def test_agent_rl_train_with_clipo_checkpoints_and_resumes_the_head(tmp_path, tiny_model_dir):
    from agent_rl.cli import main
    from tests.conftest import ROOT
    from tests.test_trainer import SMALL

    args = [
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.path={tiny_model_dir}",
        f"run.dir={tmp_path / 'run'}",
        *SMALL,
        "tracking.loggers=[]",
        "algorithm.advantage.name=clipo",
        "algorithm.advantage.output_size=8",
    ]
    assert main([*args, "trainer.steps=1"]) in (0, None)
    saved = torch.load(
        tmp_path / "run" / "checkpoints" / "step_000001" / "trainer.pt",
        weights_only=False,
    )["states"]["advantage"]
    assert saved["shape"][2] == 8 and "weight" in saved["head"]
    assert main([*args, "trainer.steps=2", "--resume", str(tmp_path / "run")]) in (
        0,
        None,
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in rows if "clipo/anchors" in r]) == 2
    resumed = torch.load(
        tmp_path / "run" / "checkpoints" / "step_000002" / "trainer.pt",
        weights_only=False,
    )["states"]["advantage"]
    assert (
        resumed["optimizer"]["state"] or not rows[-1]["clipo/anchors"]
    )  # AdamW moments carried on (when there were anchors)

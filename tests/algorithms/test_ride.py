"""ride: representation distillation toward base + alpha (teacher - base), by hand; the layer
outputs it reads equal the model's own hidden states; a short agent-rl train run with a teacher."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agent_rl.algorithms.losses.ride import RideConfig, relative_sq_error, ride, to_predicted_tokens
from agent_rl.algorithms.registry import LossInputs


def inputs(student_layers, teacher, base, mask):
    B, T = mask.shape
    zeros = torch.zeros(B, T, dtype=torch.float64)
    return LossInputs(
        logprobs_BT=zeros.clone(),
        old_logprobs_BT=zeros,
        advantages_BT=zeros,
        loss_mask_BT=mask,
        extras={"policy_layers": student_layers, "teacher_layers": teacher, "ref_layers": base},
    )


def test_ride_loss_by_hand():
    # one row, 3 positions, one layer, H = 2; base 1, teacher 2 everywhere, alpha 2 -> target 1 + 2 (2 - 1) = 3
    base = torch.ones(1, 3, 1, 2, dtype=torch.float64)
    teacher = torch.full((1, 3, 1, 2), 2.0, dtype=torch.float64)
    h = torch.tensor([[[2.0, 3.0], [3.0, 3.0], [1.0, 5.0]]], dtype=torch.float64, requires_grad=True)  # [B, T, H]
    mask = torch.tensor([[0.0, 1.0, 1.0]], dtype=torch.float64)
    cfg = RideConfig(teacher_path="t", alpha=2.0, coef=0.5, eps=1e-12)
    out = ride(inputs([h], teacher, base, mask), cfg)
    # relative error per state: mean_h (h - 3)^2 / mean_h 3^2 = [(1 + 0)/2, 0, (4 + 4)/2] / 9
    # state t - 1 predicts token t: token 1 <- state 0, token 2 <- state 1; token 0 has no state before it
    assert out.loss_BT[0].tolist() == pytest.approx([0.0, 0.5 * 0.5 / 9, 0.0])
    assert out.metrics["loss/ride_rel_sq_error"] == pytest.approx(0.5 / 9 / 2)
    assert out.metrics["ride/teacher_shift"] == pytest.approx(1 / 9)  # mean_h (2 - 1)^2 / mean_h 3^2
    out.loss_BT.sum().backward()
    # d/dh of 0.5 * mean_h (h - 3)^2 / 9 at state 0 = 0.5 * 2 (h - 3) / (2 * 9)
    assert h.grad.flatten().tolist() == pytest.approx([0.5 * 2 * (2 - 3) / 18, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_alpha_one_is_the_teacher_and_layers_pick_the_captured_ones():
    torch.manual_seed(0)
    captured = [torch.randn(2, 4, 3, dtype=torch.float64) for _ in range(3)]
    teacher = torch.stack([captured[2] * 0.5, captured[0]], dim=2)  # targets for layers [2, 0]
    base = torch.randn(2, 4, 2, 3, dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.float64)
    out = ride(inputs(captured, teacher, base, mask), RideConfig(teacher_path="t", alpha=1.0, layers=[2, 0]))
    expected = to_predicted_tokens(relative_sq_error(torch.stack([captured[2], captured[0]], dim=2), teacher, 1e-6))
    assert torch.allclose(out.loss_BT, expected)
    # layer 0's student equals its target: only layer 2 contributes (error (0.5 h)^2 / (0.5 h)^2 = 1 per state, halved by the layer mean)
    assert torch.allclose(out.loss_BT[:, 1:], torch.full((2, 3), 0.5, dtype=torch.float64), atol=1e-5)


def test_shapes_must_match_and_one_teacher_only():
    x = inputs([torch.zeros(1, 2, 4)], torch.zeros(1, 2, 1, 3), torch.zeros(1, 2, 1, 3), torch.ones(1, 2))
    with pytest.raises(ValueError, match="the teacher must have the student's depth and width"):
        ride(x, RideConfig(teacher_path="t"))
    with pytest.raises(ValueError, match="one teacher_path"):
        RideConfig(teacher_path=["a", "b"])


def test_layer_states_are_the_models_hidden_states(tiny_model_dir):
    from agent_rl.learner import hidden
    from agent_rl.models.loading import load_model

    model = load_model(str(tiny_model_dir))
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    batch = type("Rows", (), {})()
    batch.input_ids_BT, batch.attention_mask_BT = ids, torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    batch.position_ids_BT = torch.arange(4)[None].expand(2, 4)
    states = hidden.layer_states(model, batch)
    with torch.no_grad():
        ref = model(
            input_ids=ids,
            attention_mask=batch.attention_mask_BT,
            position_ids=batch.position_ids_BT,
            output_hidden_states=True,
        )
    n = model.config.num_hidden_layers
    assert states.shape == (2, 4, n, model.config.hidden_size)
    # hidden_states[l + 1] is layer l's output (the last one also goes through the final norm)
    for layer in range(n - 1):
        assert torch.equal(states[:, :, layer], ref.hidden_states[layer + 1])
    assert torch.equal(
        hidden.layer_states(model, batch, (-1, 0)), torch.stack([states[:, :, -1], states[:, :, 0]], dim=2)
    )


def test_agent_rl_train_with_ride(tmp_path, tiny_model_dir):
    from agent_rl.cli import main
    from agent_rl.models.loading import load_model, load_tokenizer
    from tests.conftest import ROOT
    from tests.test_trainer import SMALL

    teacher = load_model(str(tiny_model_dir))  # the base moved a little: a teacher with a shift to extrapolate
    torch.manual_seed(0)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.02 * torch.randn_like(p))
    teacher.save_pretrained(tmp_path / "teacher")
    load_tokenizer(str(tiny_model_dir)).save_pretrained(tmp_path / "teacher")
    rc = main(
        [
            "train",
            str(ROOT / "configs" / "quickstart.yaml"),
            f"model.path={tiny_model_dir}",
            f"run.dir={tmp_path / 'run'}",
            *SMALL,
            "trainer.steps=1",
            "tracking.loggers=[]",
            "learner.packing=false",
            f"algorithm.loss={{name: ride, teacher_path: {tmp_path / 'teacher'}}}",
        ]
    )
    assert rc in (0, None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "loss/ride_rel_sq_error" in r)
    # the student is the base at step 1 (same weights): its error to base + 1.25 (teacher - base) is
    # 1.25^2 times the teacher's shift on the same scale
    assert step["ride/teacher_shift"] > 0 and math.isfinite(step["loss/ride_rel_sq_error"])
    assert step["loss/ride_rel_sq_error"] == pytest.approx(1.25**2 * step["ride/teacher_shift"], rel=1e-3)

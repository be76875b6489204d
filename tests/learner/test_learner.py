"""The learner's update: independent of micro-batch size and of the number of FSDP2 ranks."""

from __future__ import annotations

import math

import pytest
import torch

from agent_rl.learner import fsdp
from agent_rl.learner.learner import Learner, lr_lambda
from agent_rl.models.loading import load_model
from tests.learner.helpers import learner_cfg, parts, run_ranks, step_batch


def one_step(model_dir: str, aggregation: str, micro_batch_size: int, rows: int = 6, **cfg_kw) -> dict:
    """Gradients, metrics and weights after one update on the hand-made batch."""
    torch.manual_seed(0)
    model = load_model(model_dir, "float32", "cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # adam_eps 1e-6: with 1e-8, gradients that are ~1e-9 by symmetry make Adam's first step
    # lr * g / (|g| + eps) a coin flip of summation order (the gradients themselves agree to 1e-5)
    cfg = learner_cfg(micro_batch_size=micro_batch_size, adam_eps=1e-6, **cfg_kw)
    learner = Learner(model, cfg, temperature=0.9)
    batch, adv_BT = step_batch(model.config.vocab_size, B=rows)
    metrics = learner.update(batch, adv_BT, parts(aggregation))
    grads = {
        n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        for n, p in learner.model.named_parameters()
    }
    after = fsdp.full_state_dict(learner.model)
    return {"metrics": metrics, "grads": grads, "update": {k: after[k] - before[k] for k in after}}


def rel_diff(a: dict, b: dict) -> float:
    """max over tensors of ||a - b|| / ||b||."""
    return max(float((a[k] - b[k]).norm() / b[k].norm().clamp(min=1e-12)) for k in b)


def update_rel_diff(a: dict, b: dict) -> float:
    """||delta_a - delta_b|| / ||delta_b|| over the whole model's update. (Per tensor, Adam's first
    step lr * g / (|g| + eps) turns summation-order noise of gradients that are ~0 by symmetry,
    such as the key-projection bias, into steps of a visible fraction of the lr.)"""
    num = sum(float(((a[k] - b[k]) ** 2).sum()) for k in b)
    return math.sqrt(num / sum(float((b[k] ** 2).sum()) for k in b))


@pytest.mark.parametrize("aggregation", ["token_mean", "prompt_mean"])
def test_micro_batch_size_does_not_change_the_update(tiny_model_dir, aggregation):
    runs = {m: one_step(str(tiny_model_dir), aggregation, m) for m in (1, 2, 4)}
    for m in (1, 2):
        assert rel_diff(runs[m]["grads"], runs[4]["grads"]) <= 1e-5
        assert update_rel_diff(runs[m]["update"], runs[4]["update"]) <= 1e-5
        assert math.isclose(
            runs[m]["metrics"]["train/loss"], runs[4]["metrics"]["train/loss"], rel_tol=1e-5, abs_tol=1e-7
        )
    assert runs[4]["metrics"]["train/tokens"] == 9 + 6 + 4 + 9 + 2 + 7  # response tokens by hand
    assert 0 < runs[4]["metrics"]["train/update_ratio"] < 0.1


@pytest.mark.distributed
def test_two_fsdp_ranks_equal_one_process(tiny_model_dir, tmp_path):
    # prompt_mean: each group's token count is global, and the ranks split group 1 (rows 0-2 | 3-4);
    # 5 rows: rank 1 is padded with a zero-mask row
    single = one_step(str(tiny_model_dir), "prompt_mean", 2, 5)
    double = run_ranks(2, one_step, str(tiny_model_dir), "prompt_mean", 2, 5, tmp_dir=tmp_path)
    assert rel_diff(double["grads"], single["grads"]) <= 1e-5
    assert update_rel_diff(double["update"], single["update"]) <= 1e-5
    for k in ("train/loss", "train/grad_norm", "train/update_ratio", "train/mismatch_kl"):
        assert math.isclose(double["metrics"][k], single["metrics"][k], rel_tol=1e-5), k
    assert double["metrics"]["train/tokens"] == single["metrics"]["train/tokens"] == 9 + 6 + 4 + 9 + 2


def test_rows_of_rank_blocks():
    # 5 rows over 2 ranks: blocks of 3 (shard_rows pads rank 1 with a zero-mask copy of row 0)
    assert fsdp.rows_of_rank(5, 0, 2) == (0, 3) and fsdp.rows_of_rank(5, 1, 2) == (3, 5)


def test_lr_warmup_then_cosine():
    m = lr_lambda(warmup_steps=2, schedule="cosine", total_steps=6, min_lr_ratio=0.1)
    # warm-up 1/2, 2/2; then p = 0, 1/4, 1/2, 3/4, 1 -> 0.1 + 0.9 (1 + cos(pi p)) / 2
    expected = [
        0.5,
        1.0,
        1.0,
        0.1 + 0.45 * (1 + math.cos(math.pi / 4)),
        0.55,
        0.1 + 0.45 * (1 - math.cos(math.pi / 4)),
        0.1,
    ]
    assert [round(m(s), 12) for s in range(7)] == [round(e, 12) for e in expected]
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_lambda(0, "linear", 10, 0.0)


def test_activation_checkpointing_gives_the_same_gradients(tiny_model_dir):
    plain = one_step(str(tiny_model_dir), "token_mean", 6)
    recomputed = one_step(str(tiny_model_dir), "token_mean", 6, activation_checkpointing=True)
    assert rel_diff(recomputed["grads"], plain["grads"]) <= 1e-6


def bf16_offloaded_step(model_dir: str) -> dict:
    """One rank with FSDP2 bf16 mixed precision and CPU offload: fp32 master weights, a real step."""
    out = one_step(model_dir, "token_mean", 6, mixed_precision="bf16", cpu_offload=True)
    out["param_dtypes"] = {str(v.dtype) for v in out["update"].values()}
    return out


@pytest.mark.distributed
def test_bf16_mixed_precision_with_cpu_offload(tiny_model_dir, tmp_path):
    fp32 = one_step(str(tiny_model_dir), "token_mean", 6)
    bf16 = run_ranks(1, bf16_offloaded_step, str(tiny_model_dir), tmp_dir=tmp_path)
    assert bf16["param_dtypes"] == {"torch.float32"}  # the sharded master weights stay fp32
    # bf16 compute: close to the fp32 step, not equal
    assert 0 < rel_diff(bf16["grads"], fp32["grads"]) < 0.1
    assert math.isclose(bf16["metrics"]["train/loss"], fp32["metrics"]["train/loss"], rel_tol=0.05, abs_tol=1e-3)

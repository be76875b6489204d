"""Golden tests: dpo, rpo and kto equal TRL's losses and gradients on the same per-token logprobs.

``data/trl_preference_golden.json`` was written once by ``data/make_trl_preference_golden.py`` (TRL's
own ``_compute_loss`` code; the version is in the file). Offline layout: pair p is group p, its
chosen row has reward 1, its rejected row 0; a KTO sample's label is its reward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from losses_helpers import assert_close

from agent_rl.algorithms.aggregation import seq_mean_token_mean
from agent_rl.algorithms.losses import DpoConfig, KtoConfig, RpoConfig, dpo, kto, rpo
from agent_rl.algorithms.registry import AggregationInputs, ComponentConfig, LossInputs

GOLDEN = json.loads((Path(__file__).parent / "data" / "trl_preference_golden.json").read_text())
CASES = GOLDEN["cases"]
F64 = torch.float64


def test_golden_file_names_the_trl_version():
    assert GOLDEN["trl_version"] == "1.16.0"


def _ours(fn, cfg, case: dict, rewards: list[float], groups: list[int], **extra) -> tuple[float, torch.Tensor]:
    logp = torch.tensor(case["logprobs_BT"], dtype=F64, requires_grad=True)
    mask = torch.tensor(case["loss_mask_BT"], dtype=F64)
    # TRL gives the reference as sequence sums: put each on the row's first policy token
    ref = torch.zeros_like(mask)
    first = mask.argmax(dim=1)
    ref[torch.arange(mask.shape[0]), first] = torch.tensor(case["ref_seq_logps_B"], dtype=F64)
    x = LossInputs(
        logprobs_BT=logp, old_logprobs_BT=logp.detach(), advantages_BT=torch.zeros_like(mask), loss_mask_BT=mask,
        ref_logprobs_BT=ref, rewards_B=torch.tensor(rewards, dtype=F64), group_index_B=torch.tensor(groups), **extra,
    )  # fmt: skip
    agg = AggregationInputs(
        num_tokens=float(mask.sum()), num_sequences=float(mask.shape[0]), num_groups=float(max(groups) + 1)
    )
    loss = seq_mean_token_mean(fn(x, cfg).loss_BT, mask, agg, ComponentConfig())
    (grad,) = torch.autograd.grad(loss, [logp])
    return float(loss.detach()), grad


@pytest.mark.parametrize("name", [k for k, c in CASES.items() if c["trainer"] == "DPOTrainer"])
def test_dpo_and_rpo_equal_trl(name):
    case = CASES[name]
    pairs = len(case["logprobs_BT"]) // 2
    if case["loss_type"] == ["sigmoid"]:
        fn, cfg = dpo, DpoConfig(beta=case["beta"], label_smoothing=case["label_smoothing"])
    else:
        assert case["loss_type"] == ["sigmoid", "sft"] and case["loss_weights"][0] == 1.0
        fn, cfg = rpo, RpoConfig(beta=case["beta"], alpha=case["loss_weights"][1])
    loss, grad = _ours(fn, cfg, case, [1.0] * pairs + [0.0] * pairs, list(range(pairs)) * 2)
    assert loss == pytest.approx(case["loss"], abs=1e-6)
    assert_close(grad, case["grad_BT"], atol=1e-6)


@pytest.mark.parametrize("name", [k for k, c in CASES.items() if c["trainer"] == "KTOTrainer"])
def test_kto_equals_trl(name):
    case = CASES[name]
    # TRL's reference point: max(0, mean of the mismatched pairs' log-ratios), the value we hand in
    kl = torch.tensor(case["kl_seq_logps_B"], dtype=F64) - torch.tensor(case["ref_kl_seq_logps_B"], dtype=F64)
    assert float(kl.mean().clamp(min=0)) == pytest.approx(case["kl"], abs=1e-6)
    cfg = KtoConfig(
        beta=case["beta"], desirable_weight=case["desirable_weight"], undesirable_weight=case["undesirable_weight"]
    )
    rows = len(case["labels_B"])
    rewards = [1.0 if label else 0.0 for label in case["labels_B"]]
    z0 = torch.full((rows,), case["kl"], dtype=F64)
    loss, grad = _ours(kto, cfg, case, rewards, list(range(rows)), extras={"kto_z0": z0})
    assert loss == pytest.approx(case["loss"], abs=1e-6)
    assert_close(grad, case["grad_BT"], atol=1e-6)

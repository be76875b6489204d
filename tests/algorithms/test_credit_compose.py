"""Every credit method feeds any policy loss: ppo_clip, cispo and gspo on its advantages.

At ratio 1 (logprobs = old logprobs) the three losses share one gradient identity under
token_mean: d loss / d logp_t = -A_t m_t / N, with m the mask the credit method trains with
(its ``loss_mask_BT`` when it returns one) and N = sum m. Off ratio 1, ppo_clip's per-token
clip acts on each token's own advantage sign (segmented advantages mix signs within a row).
"""

from __future__ import annotations

import math

import pytest
import torch
from credit_helpers import (
    arpo_tree,
    cbpo_tree,
    group,
    inputs,
    run,
    traj,
    two_episode_example,
    vine_tree,
)

from agent_rl.algorithms import AGGREGATIONS, CREDITS, POLICY_LOSSES
from agent_rl.algorithms.registry import AggregationInputs, LossInputs


def spo_example():
    return [
        group(traj(f"e{k}", [r], task=k, turn_len=2 + i)) for i, (k, r) in enumerate({"a": 1, "b": 0, "c": 1}.items())
    ]


def values_for(groups):
    x = inputs(groups)
    return {"values_BT": torch.linspace(0.1, 0.9, x.loss_mask_BT.numel()).view_as(x.loss_mask_BT)}


EXAMPLES = {
    "gigpo": (two_episode_example, {}),
    "g2po": (two_episode_example, {}),
    "multiscale": (two_episode_example, {}),
    "turn_gae": (two_episode_example, {"values": True}),
    "spo": (spo_example, {}),
    "spo_pp": (spo_example, {}),
    "cbpo": (cbpo_tree, {}),
    "arpo": (arpo_tree, {"attribution": "hard"}),
    "vineppo": (vine_tree, {}),
}


def test_every_credit_method_has_a_composition_example():
    assert sorted(EXAMPLES) == CREDITS.names()


def credit(name: str):
    build, cfg = EXAMPLES[name]
    groups = build()
    cfg = dict(cfg)
    x = inputs(groups, **(values_for(groups) if cfg.pop("values", False) else {}))
    out = run(name, groups, x=x, **cfg)
    mask = out.loss_mask_BT if out.loss_mask_BT is not None else x.loss_mask_BT
    return out.advantages_BT.double(), mask.double()


def token_mean_loss(loss_name: str, adv_BT, mask_BT, log_ratio: float):
    old = torch.full(adv_BT.shape, -1.0, dtype=torch.float64)
    logp = (old + log_ratio * mask_BT).requires_grad_(True)
    x = LossInputs(logprobs_BT=logp, old_logprobs_BT=old, advantages_BT=adv_BT, loss_mask_BT=mask_BT)
    loss_cfg = POLICY_LOSSES.parse_config(loss_name)
    out = POLICY_LOSSES(loss_cfg)(x, loss_cfg)
    agg_cfg = AGGREGATIONS.parse_config("token_mean")
    agg = AggregationInputs(num_tokens=float(mask_BT.sum()), num_sequences=float(mask_BT.shape[0]), num_groups=1.0)
    loss = AGGREGATIONS(agg_cfg)(out.loss_BT, mask_BT, agg, agg_cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    return float(loss.detach()), grad


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("loss_name", ["ppo_clip", "cispo", "gspo"])
def test_credit_advantages_drive_the_policy_gradient(name, loss_name):
    adv_BT, mask_BT = credit(name)
    assert adv_BT.abs().sum() > 0
    n = float(mask_BT.sum())
    loss, grad = token_mean_loss(loss_name, adv_BT, mask_BT, 0.0)
    torch.testing.assert_close(grad, -adv_BT * mask_BT / n, atol=1e-12, rtol=0)
    if loss_name != "cispo":  # cispo's value is -A logp (here logp = -1), the others' -A r
        assert loss == pytest.approx(-float((adv_BT * mask_BT).sum()) / n)
    else:
        assert loss == pytest.approx(float((adv_BT * mask_BT).sum()) / n)


@pytest.mark.parametrize("name", ["cbpo", "gigpo"])
def test_ppo_clip_clips_each_token_by_its_own_advantage_sign(name):
    adv_BT, mask_BT = credit(name)
    r = math.exp(0.5)  # 1.6487 > 1 + 0.28: A > 0 tokens are clipped (no gradient), A < 0 tokens keep -A r / N
    _, grad = token_mean_loss("ppo_clip", adv_BT, mask_BT, 0.5)
    n = float(mask_BT.sum())
    expected = torch.where(adv_BT < 0, -adv_BT * r / n, torch.zeros_like(adv_BT)) * mask_BT
    assert (adv_BT > 0).any() and (adv_BT < 0).any()
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)


def test_every_credit_entry_names_its_paper_formula_and_fields():
    for entry in CREDITS.entries():
        assert entry.summary and len(entry.doc.splitlines()) >= 3, (
            f"credit '{entry.name}': docstring needs paper + formula"
        )
        for field_name, field in entry.config.model_fields.items():
            if field_name != "name":
                assert field.description, f"credit '{entry.name}': config field '{field_name}' has no description"

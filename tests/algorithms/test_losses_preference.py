"""dpo, rpo, kto: pairs from rollout groups, hand-computed losses and gradients, the plan they need."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from losses_helpers import assert_close, inputs

from agent_rl.algorithms.aggregation import seq_mean_token_mean
from agent_rl.algorithms.losses import DpoConfig, KtoConfig, RpoConfig, dpo, kto, preference_pairs, rpo
from agent_rl.algorithms.losses.preference import _kto_reference_point
from agent_rl.algorithms.needs import NeedContext
from agent_rl.algorithms.plan import make_plan
from agent_rl.algorithms.registry import AggregationInputs, ComponentConfig
from agent_rl.config import load_config


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def softplus(v: float) -> float:  # -log sigmoid(-v)
    return math.log1p(math.exp(v))


def loss_and_grad(fn, cfg, x):
    """seq_mean_token_mean over the call (the aggregation these losses require), and d/d logprobs."""
    mask = x.loss_mask_BT
    agg = AggregationInputs(num_tokens=float(mask.sum()), num_sequences=float(mask.shape[0]), num_groups=1.0)
    out = fn(x, cfg)
    loss = seq_mean_token_mean(out.loss_BT, mask, agg, ComponentConfig())
    (grad,) = torch.autograd.grad(loss, [x.logprobs_BT])
    return float(loss.detach()), grad, out.metrics


#  one group of three rows; rho_i = sum of (logp - ref) over the row's policy tokens
#  row 0: logp [-1, -2]   ref [-1.5, -2.5]  -> rho 1.0    reward 0
#  row 1: logp [-.5, pad] ref [-1,  pad]    -> rho 0.5    reward 1   (one policy token)
#  row 2: logp [-2, -1]   ref [-2, -1]      -> rho 0.0    reward 0
LOGP = [[-1.0, -2.0], [-0.5, 0.0], [-2.0, -1.0]]
REF = [[-1.5, -2.5], [-1.0, 0.0], [-2.0, -1.0]]
MASK = [[1, 1], [1, 0], [1, 1]]


def group(rewards=(0.0, 1.0, 0.0), groups=(0, 0, 0), logp=LOGP, ref=REF, mask=MASK, **extra):
    return inputs(
        logp, logp, [[0.0] * len(logp[0])] * len(logp), mask=mask, ref_logprobs_BT=ref,
        rewards_B=torch.tensor(rewards), group_index_B=torch.tensor(groups), **extra,
    )  # fmt: skip


def test_pairs_best_worst_and_pos_neg():
    rewards, groups = torch.tensor([0.0, 1.0, 0.0, 0.5, 0.5, 1.0, 0.2, 0.0]), torch.tensor([7, 7, 7, 3, 3, 5, 5, 5])
    # dense ids by sorted group index: 3 -> 0, 5 -> 1, 7 -> 2; group 3 (rows 3, 4) is flat: no pair
    chosen, rejected, g = preference_pairs(rewards, groups, "best_worst")
    assert chosen.tolist() == [5, 1] and rejected.tolist() == [7, 0] and g.tolist() == [1, 2]  # ties: first row
    #  group 5: mean .4, above {5}, below {6, 7};  group 7: mean 1/3, above {1}, below {0, 2}
    chosen, rejected, g = preference_pairs(rewards, groups, "pos_neg")
    assert chosen.tolist() == [5, 5, 1, 1] and rejected.tolist() == [6, 7, 0, 2] and g.tolist() == [1, 1, 2, 2]


def test_dpo_best_worst_by_hand():
    #  best row 1 vs first worst row 0: h = .1 (.5 - 1) = -.05, L = -log sigmoid(-.05) = softplus(.05)
    #  every row carries L -> seq_mean_token_mean = L
    #  dL/drho_1 = -.1 sigmoid(.05) = -.0512497, dL/drho_0 = +.0512497, on each policy token
    loss, grad, metrics = loss_and_grad(dpo, DpoConfig(), group())
    g = 0.1 * sigmoid(0.05)
    assert loss == pytest.approx(softplus(0.05), abs=1e-12)
    assert g == pytest.approx(0.0512497, abs=1e-7)
    assert_close(grad, [[g, g], [-g, 0.0], [0.0, 0.0]])
    assert metrics["loss/pref_pairs_per_row"] == 1 / 3 and metrics["loss/pref_accuracy"] == 0.0
    assert metrics["loss/pref_margin"] == pytest.approx(-0.05)


def test_dpo_pos_neg_all_correct_x_incorrect():
    #  pairs (1, 0): h = -.05 and (1, 2): h = .1 (.5 - 0) = .05;  J = (softplus(.05) + softplus(-.05)) / 2
    #  dJ/drho_1 = -.1 (sigmoid(.05) + sigmoid(-.05)) / 2 = -.05
    #  dJ/drho_0 = .1 sigmoid(.05) / 2,  dJ/drho_2 = .1 sigmoid(-.05) / 2
    loss, grad, metrics = loss_and_grad(dpo, DpoConfig(pairing="pos_neg"), group())
    assert loss == pytest.approx((softplus(0.05) + softplus(-0.05)) / 2, abs=1e-12)
    g0, g2 = 0.05 * sigmoid(0.05), 0.05 * sigmoid(-0.05)
    assert_close(grad, [[g0, g0], [-0.05, 0.0], [g2, g2]])
    assert metrics["loss/pref_accuracy"] == 0.5


def test_dpo_flat_groups_count_as_zero_and_label_smoothing():
    #  rows 3, 4 form a second group with equal rewards: no pair, J = 0, but both rows count:
    #  loss = (3 J_0 + 2 * 0) / 5
    logp, ref, mask = LOGP + [[-1.0, -1.0]] * 2, REF + [[-2.0, -2.0]] * 2, MASK + [[1, 1]] * 2
    x = group(rewards=(0.0, 1.0, 0.0, 1.0, 1.0), groups=(0, 0, 0, 1, 1), logp=logp, ref=ref, mask=mask)
    loss, grad, _ = loss_and_grad(dpo, DpoConfig(), x)
    assert loss == pytest.approx(3 * softplus(0.05) / 5, abs=1e-12)
    assert bool((grad[3:] == 0).all())
    #  cDPO, eps = .2: L = .8 softplus(.05) + .2 softplus(-.05)
    loss, _, _ = loss_and_grad(dpo, DpoConfig(label_smoothing=0.2), group())
    assert loss == pytest.approx(0.8 * softplus(0.05) + 0.2 * softplus(-0.05), abs=1e-12)


def test_rpo_adds_the_preferred_rows_nll():
    #  chosen row 0 (reward 1) vs worst row 1: h = .1 (1 - .5) = .05, L_dpo = softplus(-.05)
    #  NLL(y_w): token_mean -(-1 - 2) / 2 = 1.5;  sum: 3
    #  grad on row 0: -.1 sigmoid(-.05) - alpha / 2 (token_mean) or - alpha (sum) per token
    x = group(rewards=(1.0, 0.0, 0.0))
    loss, grad, metrics = loss_and_grad(rpo, RpoConfig(), x)
    g = 0.1 * sigmoid(-0.05)
    assert loss == pytest.approx(softplus(-0.05) + 1.5, abs=1e-12)
    assert_close(grad, [[-g - 0.5, -g - 0.5], [g, 0.0], [0.0, 0.0]])
    assert metrics["loss/rpo_nll"] == pytest.approx(1.5)
    loss, grad, _ = loss_and_grad(rpo, RpoConfig(alpha=0.5, nll="sum"), group(rewards=(1.0, 0.0, 0.0)))
    assert loss == pytest.approx(softplus(-0.05) + 0.5 * 3, abs=1e-12)
    assert_close(grad, [[-g - 0.5, -g - 0.5], [g, 0.0], [0.0, 0.0]])
    # alpha = 0 is DPO
    loss0, _, _ = loss_and_grad(rpo, RpoConfig(alpha=0.0), group(rewards=(1.0, 0.0, 0.0)))
    assert loss0 == pytest.approx(softplus(-0.05), abs=1e-12)


def test_kto_by_hand():
    #  rows 0 (reward 1, desirable) and 1 (reward 0): r = [1.0, .5], z0 = .2, beta .1
    #  L_0 = 1 - sigmoid(.1 (1 - .2)) = 1 - sigmoid(.08);  L_1 = 1 - sigmoid(.1 (.2 - .5)) = 1 - sigmoid(-.03)
    #  mean over the two rows;  dL_0/dr_0 = -.1 s(1 - s) at s = sigmoid(.08), dL_1/dr_1 = +.1 s(1 - s) at sigmoid(-.03)
    x = group(
        rewards=(1.0, 0.0),
        groups=(0, 1),
        logp=LOGP[:2],
        ref=REF[:2],
        mask=MASK[:2],
        extras={"kto_z0": torch.tensor([0.2, 0.2], dtype=torch.float64)},
    )
    loss, grad, metrics = loss_and_grad(kto, KtoConfig(), x)
    s0, s1 = sigmoid(0.08), sigmoid(-0.03)
    assert loss == pytest.approx(((1 - s0) + (1 - s1)) / 2, abs=1e-12)
    g0, g1 = -0.1 * s0 * (1 - s0) / 2, 0.1 * s1 * (1 - s1) / 2
    assert_close(grad, [[g0, g0], [g1, 0.0]])
    assert metrics["loss/kto_z0"] == pytest.approx(0.2) and metrics["loss/kto_desirable_frac"] == 0.5
    #  lambda_D = 2, lambda_U = .5, a scalar z0
    x = group(
        rewards=(1.0, 0.0),
        groups=(0, 1),
        logp=LOGP[:2],
        ref=REF[:2],
        mask=MASK[:2],
        extras={"kto_z0": torch.tensor(0.2, dtype=torch.float64)},
    )
    loss, _, _ = loss_and_grad(kto, KtoConfig(desirable_weight=2.0, undesirable_weight=0.5), x)
    assert loss == pytest.approx((2 * (1 - s0) + 0.5 * (1 - s1)) / 2, abs=1e-12)


def test_kto_reference_point_is_the_steps_clamped_mean_log_ratio():
    #  policy - ref per row: [.5 + .5] = 1.0 and [-.2 (masked: .7)] -> -.2;  mean .4;  then clamped at 0
    batch = SimpleNamespace(
        ref_logprobs_BT=torch.tensor([[-1.5, -2.5], [-0.3, -9.0]], dtype=torch.float64),
        loss_mask_BT=torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64),
    )
    policy = torch.tensor([[-1.0, -2.0], [-0.5, -8.3]], dtype=torch.float64)
    ctx = NeedContext(batch=batch, groups=[], step=0, policy=None, score=lambda model, b: (policy, None))
    assert_close(_kto_reference_point(ctx), [0.4, 0.4])
    ctx = NeedContext(batch=batch, groups=[], step=0, policy=None, score=lambda model, b: (policy - 1.0, None))
    assert_close(_kto_reference_point(ctx), [0.0, 0.0])  # mean -1.1 -> 0


def test_plan_builds_the_reference_and_requires_seq_mean_token_mean():
    def plan_of(*overrides):
        cfg = load_config(None, list(overrides))
        return make_plan(cfg.algorithm, cfg.rollout)

    with pytest.raises(ValueError, match="policy_loss 'dpo' needs algorithm.aggregation=seq_mean_token_mean"):
        plan_of("algorithm.loss.name=dpo")
    plan = plan_of("algorithm.loss.name=dpo", "algorithm.aggregation.name=seq_mean_token_mean")
    assert plan.builds == frozenset({"reference"}) and plan.precompute == ("ref_logprobs",)
    plan = plan_of("algorithm.loss.name=kto", "algorithm.aggregation.name=seq_mean_token_mean")
    assert plan.precompute == ("ref_logprobs", "kto_z0")

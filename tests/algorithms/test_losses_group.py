"""conspo, disco, vimpo, reco: group-based losses (positives/negatives by reward vs the group mean)."""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses import (
    ConspoConfig,
    DiscoConfig,
    RecoConfig,
    VimpoConfig,
    conspo,
    disco,
    reco,
    vimpo,
)

#  one group of three rows; rewards [1, 0, 0] -> row 0 positive, rows 1, 2 negative
#  row 0 logp [-1, -1] (s = -1); row 1 [-2, pad] (s = -2); row 2 [-3, -1] (s = -2)
LOGP = [[-1.0, -1.0], [-2.0, 0.0], [-3.0, -1.0]]
MASK = [[1, 1], [1, 0], [1, 1]]
GROUP = dict(rewards_B=torch.tensor([1.0, 0.0, 0.0]), group_index_B=torch.tensor([0, 0, 0]))
LSE = 10 * math.log(2 * math.exp(-0.2))  # tau log sum exp(s_j / tau) over the two negatives = 4.931472


def group_inputs(old=None, **extra):
    return inputs(LOGP, old if old is not None else LOGP, [[0.0, 0.0]] * 3, mask=MASK, **GROUP, **extra)


def test_conspo_saturating_contrast():
    #  d = s_0 - LSE - m = -1 - 4.931472 = -5.931472;  J = 10 log sigmoid(d / 10) = -10.330887
    #  every row carries -J, token_mean over 5 tokens = -J
    #  dJ/ds_0 = sigmoid(-d/10) = .644087;  dJ/ds_j = -.644087 * softmax_j = -.322043 (equal scores)
    #  ds/dlogp = 1/T: row 0 [.5, .5], row 1 [1], row 2 [.5, .5]
    x = group_inputs()
    loss, grad = loss_and_grad(conspo, ConspoConfig(), x)
    d = -1 - LSE
    g = 1 / (1 + math.exp(d / 10))  # sigmoid(-d/10)
    assert loss == pytest.approx(-10 * math.log(1 / (1 + math.exp(-d / 10))), abs=1e-9)
    assert g == pytest.approx(0.644087, abs=1e-6)
    assert_close(grad, [[-g / 2, -g / 2], [g / 2, 0.0], [g / 4, g / 4]])


def test_conspo_margin_schedule_and_flat_groups():
    # the margin grows with the step: m = min(0 + .5 * 4, 1) = 1 -> d = -6.931472
    x = group_inputs(step=4)
    loss, _ = loss_and_grad(conspo, ConspoConfig(margin_per_step=0.5, margin_max=1.0), x)
    assert loss == pytest.approx(-10 * math.log(1 / (1 + math.exp((1 + LSE + 1) / 10))), abs=1e-9)
    # a group whose rewards are all equal has no contrast: zero loss, zero gradient
    flat = inputs(LOGP, LOGP, [[0.0, 0.0]] * 3, mask=MASK, rewards_B=torch.ones(3), group_index_B=torch.zeros(3))
    loss, grad = loss_and_grad(conspo, ConspoConfig(), flat)
    assert loss == 0.0 and bool((grad == 0).all())


def test_disco_logsumexp_negatives_and_kl_constraint():
    #  J = s_0 - LSE = -5.931472; rows carry -J -> token_mean 5.931472
    #  dL/ds_0 = -1, dL/ds_j = softmax_j = .5 -> row 0 [-.5, -.5], row 1 [.5], row 2 [.25, .25]
    loss, grad = loss_and_grad(disco, DiscoConfig(), group_inputs())
    assert loss == pytest.approx(1 + LSE, abs=1e-9)
    assert_close(grad, [[-0.5, -0.5], [0.5, 0.0], [0.25, 0.25]])
    #  old = logp + .01: KL(old || new) = mean(old - logp) = .01 > delta = 1e-4, hinge .0099
    #  per token + 2 beta hinge (old - logp) = 19.8 * .01 = .198;  grad += -19.8 / 5 = -3.96 on every real token
    old = [[v + 0.01 for v in row] for row in LOGP]
    loss, grad = loss_and_grad(disco, DiscoConfig(), group_inputs(old=old))
    assert loss == pytest.approx(1 + LSE + 0.198, abs=1e-9)
    assert_close(grad, [[-0.5 - 3.96, -0.5 - 3.96], [0.5 - 3.96, 0.0], [0.25 - 3.96, 0.25 - 3.96]])


def test_vimpo_implicit_value_regression():
    #  beta .1, rewards [1, 0] -> centred [.5, -.5]
    #  row 0: logp ln .5, ref ln .25: log pi/ref = ln 2, k3 = .5 - 1 + ln 2, z = .1 (ln 2 - k3) = .1 * .5 = .05
    #         L_V = .5 (.05 - .5)^2 = .10125;  PPO with A = z = .05 at r = 1: -.05  -> .05125
    #         grad: -A + (z - .5) * beta = -.05 - .045 = -.095
    #  row 1: logp = ref = ln .5: z = 0, L_V = .5 * .25 = .125, A = 0;  grad (0 + .5) * .1 = .05
    x = inputs(
        [logs([0.5]), logs([0.5])], [logs([0.5]), logs([0.5])], [[0.0], [0.0]],
        ref_logprobs_BT=[logs([0.25]), logs([0.5])],
        rewards_B=torch.tensor([1.0, 0.0]), group_index_B=torch.tensor([3, 3]),
    )  # fmt: skip
    loss, grad = loss_and_grad(vimpo, VimpoConfig(), x)
    assert loss == pytest.approx((0.05125 + 0.125) / 2, abs=1e-9)
    assert_close(grad, [[-0.095 / 2], [0.05 / 2]])


def test_reco_occurrence_and_variance_scaling():
    #  G = 2.  row 0: sampler logp ln .9 -> expected count 2 * .9 = 1.8 -> c = 1/1.8;  q = .9 -> kappa = .36
    #          row 1: ln .2 -> .4 -> c = 1;  q = .5 -> kappa = 1
    #  r = 1: L = c (-A) = [-.555556, 1] (A = [1, -1]);  grad -c kappa A = [-.2, 1] -> / 2
    x = inputs(
        [logs([0.9]), logs([0.5])], [logs([0.9]), logs([0.5])], [[1.0], [-1.0]],
        rollout_logprobs_BT=[logs([0.9]), logs([0.2])], group_index_B=torch.tensor([0, 0]),
    )  # fmt: skip
    loss, grad = loss_and_grad(reco, RecoConfig(), x)
    assert loss == pytest.approx((-1 / 1.8 + 1) / 2, abs=1e-9)
    assert_close(grad, [[-0.1], [0.5]])


def test_reco_larger_update_at_non_saturated_positions():
    # same advantage, same off-policy move: the position with q = .5 gets a larger gradient than q = .99
    x = inputs([[math.log(0.5 * 1.1), math.log(0.9)]], [[math.log(0.5), math.log(0.99)]], [[1.0, 1.0]],
               group_index_B=torch.tensor([0]))  # fmt: skip
    _, grad = loss_and_grad(reco, RecoConfig(), x)
    assert abs(grad[0, 0].item()) > 10 * abs(grad[0, 1].item()) > 0

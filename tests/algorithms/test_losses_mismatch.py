"""sis, score_centering, bpo: corrections for sampler/learner mismatch (hand-computed examples)."""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad, t

from agent_rl.algorithms.losses import (
    BpoConfig,
    ScoreCenteringConfig,
    SisConfig,
    bpo,
    score_centering,
    sis,
)


def test_sis_expected_weight():
    #  token 0: old top-k [.5, .3, .1], current [.4, .36, .1] -> ratios [.8, 1.2, 1], M = 1.2
    #           sampled = candidate 0: r = .8, accept a = .8/1.2 = 2/3
    #           w = a * (1, grad 1) + (1 - a) * r -> value and gradient .933333; A = 1, inside the clip
    #  token 1: sampled token outside the top-k (old .05 < .1): w = r = 2, clipped at 1.28 (no grad)
    #  L = (-.933333 - 1.28) / 2;  grad [-.933333 / 2, 0]
    x = inputs(
        [logs([0.4, 0.1])],
        [logs([0.5, 0.05])],
        [[1.0, 1.0]],
        old_topk_logprobs_BTK=[logs([[0.5, 0.3, 0.1], [0.5, 0.3, 0.1]])],
        topk_logprobs_BTK=[logs([[0.4, 0.36, 0.1], [0.5, 0.3, 0.1]])],
    )
    w = 2 / 3 + (1 / 3) * 0.8
    loss, grad = loss_and_grad(sis, SisConfig(sample=False), x)
    assert loss == pytest.approx((-w - 1.28) / 2, abs=1e-9)
    assert_close(grad, [[-w / 2, 0.0]])


def test_sis_accepted_token_is_on_policy():
    #  the sampled token has the largest ratio (r = M = 1.2): accepted with probability 1, w = 1 -> L = -A,
    #  grad -A (ppo_clip would give -1.28 with no gradient)
    x = inputs(
        [logs([0.6])], [logs([0.5])], [[1.0]],
        old_topk_logprobs_BTK=[logs([[0.5, 0.3]])], topk_logprobs_BTK=[logs([[0.6, 0.3]])], step=3,
    )  # fmt: skip
    loss, grad = loss_and_grad(sis, SisConfig(sample=True), x)
    assert loss == pytest.approx(-1.0, abs=1e-12)
    assert grad.item() == pytest.approx(-1.0)


def _sc_inputs():
    #  token 0: q_H = [.6, .2], p_H = [.5, .3], sampled = candidate 0 (q_y .6, p_y .5)
    #  token 1: q_H = [.6, .1], p_H = [.4, .3], sampled = candidate 1 (q_y .1, p_y .3)
    topk = t([logs([[0.5, 0.3], [0.4, 0.3]])], requires_grad=True)
    x = inputs(
        [logs([0.5, 0.3])], [logs([0.5, 0.3])], [[1.0, 1.0]],
        rollout_logprobs_BT=[logs([0.6, 0.1])],
        rollout_topk_logprobs_BTK=[logs([[0.6, 0.2], [0.6, 0.1]])],
        topk_logprobs_BTK=topk,
    )  # fmt: skip
    return x, topk


def test_score_centering_with_truncation():
    #  C = 2.  Tails: 1 - .8 = .2 over .2 -> rho = 1, a = min(1, 2) = 1 for both tokens
    #  token 0: coef = q min(p/q, 2) - p = [.5 - .5, .3 - .3] = 0;  w(p_y/q_y) = .833333 -> L = -.833333 ln .5
    #  token 1: coef = [.4 - .4, .2 - .3] = [0, -.1];  w = min(3, 2) = 2 -> L = -(2 ln .3 + .1 ln .3)
    #  grads: logp_y: -w / 2 = [-.416667, -1];  top-k logps: +A coef / 2 = [[0, 0], [0, -.05]]
    x, topk = _sc_inputs()
    loss, grad, grad_topk = loss_and_grad(score_centering, ScoreCenteringConfig(), x, topk)
    assert loss == pytest.approx((-(0.5 / 0.6) * math.log(0.5) - 2.1 * math.log(0.3)) / 2, abs=1e-9)
    assert_close(grad, [[-(0.5 / 0.6) / 2, -1.0]])
    assert_close(grad_topk, [[[0.0, 0.0], [0.0, -0.05]]])


def test_score_centering_alone():
    #  C = None: w = 1, a = rho = 1, coef = q - p = [[.1, -.1], [.2, -.2]]
    #  L = -(logp_y - sum coef logp_v):
    #    token 0 -(ln .5 - (.1 ln .5 - .1 ln .3)),  token 1 -(ln .3 - (.2 ln .4 - .2 ln .3))
    x, topk = _sc_inputs()
    loss, grad, grad_topk = loss_and_grad(score_centering, ScoreCenteringConfig(cap=None), x, topk)
    l0 = -(math.log(0.5) - (0.1 * math.log(0.5) - 0.1 * math.log(0.3)))
    l1 = -(math.log(0.3) - (0.2 * math.log(0.4) - 0.2 * math.log(0.3)))
    assert loss == pytest.approx((l0 + l1) / 2, abs=1e-9)
    assert_close(grad, [[-0.5, -0.5]])
    assert_close(grad_topk, [[[0.05, -0.05], [0.1, -0.1]]])


def test_bpo_complementary_probability_weight():
    #  omega = (1.1 - mu) / (1.1 - pi):
    #   (mu .3, pi .35, A 1)    omega 1.066667 kept   L = -1.066667 ln .35
    #   (mu .5, pi .9,  A 1)    omega 3 > 1.28        dropped
    #   (mu .9, pi .5,  A -1)   omega .333333 < .8    dropped
    #   (mu .5, pi .9,  A -1)   omega 3, kept, min(3, C=3) = 3   L = 3 ln .9
    #   (mu .001, pi .01, A -1) omega 1.099/1.09 = 1.008257     L = 1.008257 ln .01
    #  grad = -A w / 5 on kept tokens
    mu, pi, adv = [0.3, 0.5, 0.9, 0.5, 0.001], [0.35, 0.9, 0.5, 0.9, 0.01], [1.0, 1.0, -1.0, -1.0, -1.0]
    x = inputs([logs(pi)], [logs(pi)], [adv], rollout_logprobs_BT=[logs(mu)])
    omega = [(1.1 - m) / (1.1 - p) for m, p in zip(mu, pi)]
    assert (
        omega[1] == pytest.approx(3.0)
        and omega[2] == pytest.approx(1 / 3)
        and omega[4] == pytest.approx(1.008257, abs=1e-6)
    )
    w = [omega[0], 0.0, 0.0, 3.0, omega[4]]
    loss, grad = loss_and_grad(bpo, BpoConfig(), x)
    assert loss == pytest.approx(sum(-a * wi * math.log(p) for a, wi, p in zip(adv, w, pi)) / 5, abs=1e-9)
    assert_close(grad, [[-a * wi / 5 for a, wi in zip(adv, w)]])
    # without sampler logprobs, mu falls back to pi_old
    x_old = inputs([logs(pi)], [logs(mu)], [adv])
    assert_close(bpo(x_old, BpoConfig()).loss_BT.detach(), bpo(x, BpoConfig()).loss_BT.detach())


def test_topk_losses_raise_without_topk():
    x = inputs([[-1.0]], [[-1.0]], [[1.0]], rollout_logprobs_BT=torch.tensor([[-1.0]], dtype=torch.float64))
    for fn, cfg in [(sis, SisConfig()), (score_centering, ScoreCenteringConfig())]:
        with pytest.raises(ValueError, match="topk_logprobs_BTK|rollout_topk_logprobs_BTK"):
            fn(x, cfg)

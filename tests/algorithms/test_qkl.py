"""qkl: a k3 KL on the query tokens' likelihood, reference-weighted; no gradient on the response."""

from __future__ import annotations

import math

import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses.query_kl import QklConfig, qkl, query_mask


def test_query_mask_is_the_tokens_before_the_first_policy_token():
    #  P  P  P  a  a  o  a
    mask = torch.tensor([[0, 0, 0, 1, 1, 0, 1]])
    assert query_mask(mask).tolist() == [[0, 1, 1, 0, 0, 0, 0]]


def test_qkl_gradient_flows_only_through_the_query_by_hand():
    #  token        P0   P1   P2   a    a
    #  pi           -    .5   .25  .5   .5
    #  ref          -    .25  .25  -    -
    #  r = ref/pi        .5   1    -> k3 = .5 - 1 - ln .5 = .19315, 0
    #  w = exp(mean(ln .25, ln .25)) = .25; token_mean over the 2 response tokens: L = w QKL / 2
    #  dL/dlogp_1 = w (1 - r_1) / 2 = .0625; the response tokens (A = 0) get nothing
    lp = [[0.0, *logs([0.5, 0.25, 0.5, 0.5])]]
    ref = [[0.0, *logs([0.25, 0.25]), 0.0, 0.0]]
    x = inputs(lp, lp, [[0.0] * 5], mask=[[0, 0, 0, 1, 1]], ref_logprobs_BT=ref)
    loss, grad = loss_and_grad(qkl, QklConfig(coef=1.0), x)
    assert abs(loss - 0.25 * (0.5 - 1 - math.log(0.5)) / 2) < 1e-9
    assert_close(grad, [[0.0, 0.0625, 0.0, 0.0, 0.0]])

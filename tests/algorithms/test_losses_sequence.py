"""gspo, gmpo, tic_grpo, ctpo, pnpo, dhpo, sspo, kimi: hand-computed losses and gradients.

Sequence-level losses broadcast their per-row term to the row's tokens; reductions are token_mean.
gspo and gmpo numbers match verl 0.9.1 (``gspo``; ``geo_mean`` with equal row lengths, where its
mean over rows equals token_mean), on the gspo example and gmpo's row 0 below (checked by running
verl: 0.262943 and -1.142631, same gradients) and on random inputs: max abs diff 0 for gspo,
6e-10 (loss) / 3e-10 (grad) for gmpo, from verl's 1e-8 in the row-length denominator.
"""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses import (
    CtpoConfig,
    DhpoConfig,
    GmpoConfig,
    GspoConfig,
    KimiConfig,
    PnpoConfig,
    SspoConfig,
    TicGrpoConfig,
    ctpo,
    dhpo,
    gmpo,
    gspo,
    kimi,
    pnpo,
    sspo,
    tic_grpo,
)

E = math.exp


def test_gspo_sequence_clip():
    #  row 0: log r = [.2, -.1, pad], A = 1:  s = e^.05 = 1.051271 > 1.0004 -> -1.0004 per token, no gradient
    #  row 1: log r = [.1, .1, .1],  A = -1: s = e^.1 = 1.105171;  max(1.105171, 1.0004) -> 1.105171, grad -A s
    #  token_mean over 5: (2*-1.0004 + 3*1.105171) / 5 = 0.262943;  grad row 1: 1.105171 / 5 = 0.221034
    old = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    x = inputs([[-0.8, -1.1, -1.0], [-0.9, -0.9, -0.9]], old, [[1.0] * 3, [-1.0] * 3], mask=[[1, 1, 0], [1, 1, 1]])
    loss, grad = loss_and_grad(gspo, GspoConfig(), x)
    assert loss == pytest.approx((2 * -1.0004 + 3 * E(0.1)) / 5, abs=1e-9)
    assert_close(grad, [[0.0, 0.0, 0.0], [E(0.1) / 5] * 3])


def test_gspo_gradient_is_sequence_ratio_times_advantage_over_length():
    # grad of the objective J = -L w.r.t. logp_t is s_i * A_i / T_i on every token of the row
    torch.manual_seed(0)
    old = torch.log(torch.rand(1, 4, dtype=torch.float64) * 0.8 + 0.1)
    lp = old + 0.3 * torch.randn(1, 4, dtype=torch.float64)
    x = inputs(lp.tolist(), old.tolist(), [[0.7] * 4])
    _, grad = loss_and_grad(gspo, GspoConfig(eps_low=10.0, eps_high=10.0), x)
    s = torch.exp((lp - old).mean()).item()
    assert_close(-grad, [[s * 0.7 / 4] * 4])


def test_gmpo_clips_each_token_before_the_geometric_mean():
    #  row 0: A = 1, log r = [2, 0, 0];  per-token clip to +-0.4 on A's side: c = [0.4, 0, 0]
    #         R = e^(0.4/3) = 1.142631, l = -1.142631; token 0 clipped (no grad), tokens 1, 2: dl/dlogp = -R/3
    #  row 1: A = -2, log r = [-1, .3, pad]: c = [max(-1, -.4) = -.4 (clipped), .3] -> R = e^-.05 = 0.951229,
    #         l = 2 * 0.951229 = 1.902459; token 1: dl/dlogp = -A R / 2 = 0.951229
    #  token_mean over 5 (l broadcast): (3 l0 + 2 l1) / 5 = 0.075405
    #  grads: row 0 (3/5)(-R0/3) = -0.228526 ; row 1 token 1: (2/5)(0.951229) = 0.380492
    x = inputs(
        [[-1.0, -3.0, -3.0], [-4.0, -2.7, -3.0]],
        [[-3.0] * 3, [-3.0] * 3],
        [[1.0] * 3, [-2.0] * 3],
        mask=[[1, 1, 1], [1, 1, 0]],
    )
    loss, grad = loss_and_grad(gmpo, GmpoConfig(), x)
    r0, r1 = E(0.4 / 3), E(-0.05)
    assert loss == pytest.approx((3 * -r0 + 2 * 2 * r1) / 5, abs=1e-9)
    assert_close(grad, [[0.0, -r0 / 5, -r0 / 5], [0.0, 2 * r1 / 5, 0.0]])
    # GSPO clips after the mean: s = e^(2/3) = 1.947734 > 1.4, the whole row loses its gradient
    one = inputs([[-1.0, -3.0, -3.0]], [[-3.0] * 3], [[1.0] * 3])
    _, grad_gspo = loss_and_grad(gspo, GspoConfig(eps_low=0.4, eps_high=0.4), one)
    assert_close(grad_gspo, [[0.0, 0.0, 0.0]])


def test_tic_grpo_trajectory_ratio_upper_clip_only():
    #  row 0: log r = [.1, .2], A = 1:  rho = e^.3 = 1.349859 > 1.2 -> l = -1.2, no gradient
    #  row 1: log r = [-.2, .1], A = -1: rho = e^-.1 = 0.904837 -> l = 0.904837, dl/dlogp_t = rho (each token)
    #  token_mean over 4: (2*-1.2 + 2*0.904837) / 4 = -0.147581; grad row 1: (2/4) * 0.904837 = 0.452419
    x = inputs([[-0.9, -0.8], [-1.2, -0.9]], [[-1.0] * 2] * 2, [[1.0] * 2, [-1.0] * 2])
    loss, grad = loss_and_grad(tic_grpo, TicGrpoConfig(), x)
    assert loss == pytest.approx((-2.4 + 2 * E(-0.1)) / 4, abs=1e-9)
    assert_close(grad, [[0.0, 0.0], [E(-0.1) / 2] * 2])


def test_ctpo_cumulative_ratio_with_position_adaptive_clip():
    #  log r = [.1, -.3, .2] -> cumulative c = [.1, -.2, 0], w = [1.105171, 0.818731, 1]
    #  log bounds t^.5: t=1 [-.025, .05], t=2 [-.035355, .070711], t=3 [-.043301, .086603]
    #  A = 1: t1 clipped at e^.05 = 1.051271 (no grad); t2 below its bound but A > 0 keeps -w = -0.818731; t3 -1
    #  mean (-1.051271 - 0.818731 - 1) / 3 = -0.956667; grad -A w / 3 = [0, -0.272910, -0.333333]
    old = [[-1.0, -1.0, -1.0]]
    lp = [[-0.9, -1.3, -0.8]]
    loss, grad = loss_and_grad(ctpo, CtpoConfig(), inputs(lp, old, [[1.0] * 3]))
    assert loss == pytest.approx((-E(0.05) - E(-0.2) - 1.0) / 3, abs=1e-9)
    assert_close(grad, [[0.0, -E(-0.2) / 3, -1 / 3]])
    #  A = -1: t1 max(1.105171, 1.051271), then dual clip min(., e^(.05*1)) = 1.051271 (no grad);
    #  t2 clipped up to e^-.035355 = 0.965263 (no grad); t3 w = 1, grad -A w / 3 = 1/3
    loss, grad = loss_and_grad(ctpo, CtpoConfig(), inputs(lp, old, [[-1.0] * 3]))
    assert loss == pytest.approx((E(0.05) + E(-0.05 * math.sqrt(2) / 2) + 1.0) / 3, abs=1e-6)
    assert_close(grad, [[0.0, 0.0, 1 / 3]])


@pytest.mark.parametrize("fn,cfg", [(ctpo, CtpoConfig()), (ctpo, CtpoConfig(mode="geomean")), (pnpo, PnpoConfig())])
def test_prefix_weights_are_causal(fn, cfg):
    # perturbing a later token changes nothing at earlier positions (loss and gradient)
    old = [[-1.0, -1.2, -0.7, -2.0]]
    base = [[-0.9, -1.3, -0.8, -1.9]]
    later = [[-0.9, -1.3, -0.8, -0.2]]
    a = fn(inputs(base, old, [[1.0] * 4]), cfg).loss_BT[0, :3]
    b = fn(inputs(later, old, [[1.0] * 4]), cfg).loss_BT[0, :3]
    assert_close(a.detach(), b.detach(), atol=1e-12)


def test_pnpo_prefix_geometric_mean():
    #  log r = [.1, -.3, .2]: w_t = exp(mean_{k<=t}) = [e^.1, e^-.1, 1] = [1.105171, 0.904837, 1.0]
    #  A = 1, clip [0.9997, 1.0004]: t1 clipped at -1.0004 (no grad); t2 below but A > 0: -0.904837; t3 -1
    #  mean -0.968412; grad [0, -0.904837/3, -1/3]
    loss, grad = loss_and_grad(pnpo, PnpoConfig(), inputs([[-0.9, -1.3, -0.8]], [[-1.0] * 3], [[1.0] * 3]))
    assert loss == pytest.approx((-1.0004 - E(-0.1) - 1.0) / 3, abs=1e-9)
    assert_close(grad, [[0.0, -E(-0.1) / 3, -1 / 3]])


def test_dhpo_mixes_token_and_sequence_ratios():
    #  log r = [.2, -.2] -> s = e^0 = 1, r = [1.221403, 0.818731], A = 1, nothing clipped
    #  fixed w = .5: m = [.5*1.221403 + .5, .5*.818731 + .5] = [1.110701, 0.909365]; dm/dlogp = m
    x = inputs([[-0.8, -1.2]], [[-1.0, -1.0]], [[1.0, 1.0]], entropy_BT=[[1.0, 3.0]])
    loss, grad = loss_and_grad(dhpo, DhpoConfig(), x)
    m = [0.5 * E(0.2) + 0.5, 0.5 * E(-0.2) + 0.5]
    assert loss == pytest.approx(-(m[0] + m[1]) / 2, abs=1e-9)
    assert_close(grad, [[-m[0] / 2, -m[1] / 2]])
    #  entropy mix: H = [1, 3], row mean 2 -> w = H / (H + 2) = [1/3, 3/5]
    #  m = [(1/3) 1.221403 + 2/3, .6 * .818731 + .4] = [1.073801, 0.891239]
    loss, grad = loss_and_grad(dhpo, DhpoConfig(mix="entropy"), x)
    m = [E(0.2) / 3 + 2 / 3, 0.6 * E(-0.2) + 0.4]
    assert loss == pytest.approx(-(m[0] + m[1]) / 2, abs=1e-9)
    assert_close(grad, [[-m[0] / 2, -m[1] / 2]])


def test_sspo_soft_sequence_gate():
    #  tau .4, log r = [.4, -.4]: gates .4 atan(+-1) = +-0.314159 -> mean 0, W = 1, l = -A W = -1
    #  dl/dlogp_t = -A W (1/T) / (1 + (log r/tau)^2) = -(1/2)/2 = -0.25 (token_mean of the broadcast = l)
    loss, grad = loss_and_grad(sspo, SspoConfig(), inputs([[-0.6, -1.4]], [[-1.0, -1.0]], [[1.0, 1.0]]))
    assert loss == pytest.approx(-1.0, abs=1e-12)
    assert_close(grad, [[-0.25, -0.25]])
    # at r = 1 the gate is inactive: GSPO/GMPO's -A/T
    _, grad = loss_and_grad(sspo, SspoConfig(), inputs([[-1.0, -1.0]], [[-1.0, -1.0]], [[1.0, 1.0]]))
    assert_close(grad, [[-0.5, -0.5]])


def test_kimi_sequence_reinforce_with_squared_log_ratio():
    #  logp = [ln .5, ln .25], old = [ln .4, ln .5] -> log r = [.223144, -.693147], L = sum = -0.470004
    #  l = -A sum logp + tau/2 L^2 = 2.079442 + 0.05 * 0.220903 = 2.090487 (A = 1, tau = .1)
    #  token_mean of the broadcast = l; dl/dlogp_t = -A + tau L = -1.047000
    x = inputs([logs([0.5, 0.25])], [logs([0.4, 0.5])], [[1.0, 1.0]])
    loss, grad = loss_and_grad(kimi, KimiConfig(), x)
    big_l = math.log(0.5 / 0.4) + math.log(0.25 / 0.5)
    assert loss == pytest.approx(-math.log(0.5 * 0.25) + 0.05 * big_l**2, abs=1e-9)
    assert_close(grad, [[-1 + 0.1 * big_l] * 2])

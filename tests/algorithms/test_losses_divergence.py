"""clip_cov, kl_cov (covariance-selected tokens) and dppo, drpo, bandpo (divergence trust regions).

clip_cov, kl_cov, dppo (tv and kl) numbers match verl 0.9.1 (``clip_cov`` when the candidates are no
more than the tokens to drop, ``kl_cov``, ``dppo_tv``, ``dppo_kl``): verl gives -0.65, -0.248634 and
-0.030010 (both dppo variants) with the same gradients on the examples below, and max abs diff 0 on
random inputs.
"""

import math

import pytest
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses import (
    BandpoConfig,
    ClipCovConfig,
    DppoConfig,
    DrpoConfig,
    KlCovConfig,
    band_bounds,
    bandpo,
    clip_cov,
    dppo,
    drpo,
    kl_cov,
)

#  A = [2, 1, -1, -2], logp = [-.2, -.8, -1.2, -1.7] (mean -.975), r = [1.5, 1.1, .9, .9]
#  cov_t = (A - 0)(logp + .975) = [1.55, .175, .225, 1.45]
ADV = [[2.0, 1.0, -1.0, -2.0]]
LOGP = [[-0.2, -0.8, -1.2, -1.7]]
RATIO = [1.5, 1.1, 0.9, 0.9]
OLD = [[lp - math.log(r) for lp, r in zip(LOGP[0], RATIO)]]


def test_clip_cov_detaches_high_covariance_tokens():
    #  candidates: 1 < cov < 5 and not PPO-clipped: token 0 is clipped (r 1.5 > 1.2, A > 0), token 3 is one
    #  drop max(1, int(2e-4 * 4)) = 1 token -> token 3
    #  L: max(-3, -2.4) = -2.4 (no grad) | -1.1 | .9 | 0 (dropped) -> sum -2.6 / 4 = -.65
    #  grad: [0, -1.1/4, .9/4, 0]
    x = inputs(LOGP, OLD, ADV)
    loss, grad = loss_and_grad(clip_cov, ClipCovConfig(), x)
    assert loss == pytest.approx(-0.65, abs=1e-9)
    assert_close(grad, [[0.0, -0.275, 0.225, 0.0]])
    assert clip_cov(x, ClipCovConfig()).metrics["loss/cov_dropped_frac"] == 0.25


def test_clip_cov_random_choice_is_seeded():
    # with r = 1 both high-covariance tokens (0 and 3) are candidates and one is dropped, the same one per (seed, step)
    x = inputs(LOGP, LOGP, ADV, step=7)
    first = clip_cov(x, ClipCovConfig()).loss_BT.detach()
    again = clip_cov(x, ClipCovConfig()).loss_BT.detach()
    assert_close(first, again, atol=0.0)
    assert int((first[0, [0, 3]] == 0).sum()) == 1 and bool((first[0, [1, 2]] != 0).all())


def test_kl_cov_penalizes_top_covariance_tokens():
    #  k = max(1, int(4 * .25)) = 1 -> token 0 (cov 1.55)
    #  L = -A r + |log r| [sel]: -3 + ln 1.5 | -1.1 | .9 | 1.8 -> sum -0.994535 / 4
    #  grad: -A r + sign(log r) = -3 + 1 | -1.1 | .9 | 1.8 -> / 4
    x = inputs(LOGP, OLD, ADV)
    loss, grad = loss_and_grad(kl_cov, KlCovConfig(kl_ratio=0.25, kl_coef=1.0), x)
    assert loss == pytest.approx((-3 + math.log(1.5) - 1.1 + 0.9 + 1.8) / 4, abs=1e-9)
    assert_close(grad, [[-0.5, -0.275, 0.225, 0.45]])


#  tokens (q = pi_old, p = pi, A), tv bound .2:
#  (.5, .6, 1) in | (.2, .5, 1) p-q = .3 > .2 | (.6, .3, -1) p-q = -.3 < -.2 | (.5, .4, -1) in
Q = [0.5, 0.2, 0.6, 0.5]
P = [0.6, 0.5, 0.3, 0.4]
A4 = [[1.0, 1.0, -1.0, -1.0]]


@pytest.mark.parametrize(
    "cfg", [DppoConfig(divergence="tv"), DppoConfig(divergence="kl", delta_low=0.1, delta_high=0.1)]
)
def test_dppo_masks_tokens_outside_the_trust_region(cfg):
    #  tv: tokens 1, 2 leave the region.  kl (delta .1): binary KL = [.020411, .192745, .192042, .020411],
    #      tokens 1 (p > q, A > 0) and 2 (p < q, A < 0) leave it -> the same mask
    #  L = -A min(r, 20) logp: -1.2 ln .6 = .612991 | 0 | 0 | -.8 ln .4 = -.733033 -> sum -.120042 / 4
    #  grad -A r / 4 on kept tokens: [-1.2/4, 0, 0, .8/4]
    x = inputs([logs(P)], [logs(Q)], A4)
    loss, grad = loss_and_grad(dppo, cfg, x)
    assert loss == pytest.approx((-1.2 * math.log(0.6) + 0.8 * math.log(0.4)) / 4, abs=1e-9)
    assert_close(grad, [[-0.3, 0.0, 0.0, 0.2]])


def test_drpo_quadratic_beyond_the_region_instead_of_a_mask():
    #  lambda 10, delta .2, tv.  Inside tokens as DPPO.  Token 1: e = .3 - .2 = .1, w = r = 2.5:
    #     L = -2.5 ln .5 + .5*10*1*.01 = 1.732868 + .05;  grad -A w + lambda |A| e dp/dlogp = -2.5 + 10*.1*.5 = -2
    #  Token 2: e = (q - p) - .2 = .1, w = .5: L = .5 ln .3 + .05;  grad -A w + lambda e (-p) = .5 - .3 = .2
    #  sum = .612991 + 1.782868 - .551986 - .733033 = 1.110840 / 4
    x = inputs([logs(P)], [logs(Q)], A4)
    loss, grad = loss_and_grad(drpo, DrpoConfig(), x)
    expected = -1.2 * math.log(0.6) + (-2.5 * math.log(0.5) + 0.05) + (0.5 * math.log(0.3) + 0.05) + 0.8 * math.log(0.4)
    assert loss == pytest.approx(expected / 4, abs=1e-9)
    assert_close(grad, [[-0.3, -0.5, 0.05, 0.2]])


def test_drpo_gradient_is_continuous_at_the_boundary():
    # just inside and just outside the TV bound the gradients agree (DPPO's would jump to 0)
    eps = 1e-7
    inside = inputs([logs([0.7 - eps])], [logs([0.5])], [[1.0]])
    outside = inputs([logs([0.7 + eps])], [logs([0.5])], [[1.0]])
    _, g_in = loss_and_grad(drpo, DrpoConfig(), inside)
    _, g_out = loss_and_grad(drpo, DrpoConfig(), outside)
    assert g_in.item() == pytest.approx(g_out.item(), abs=1e-5)
    _, g_dppo = loss_and_grad(dppo, DppoConfig(), outside)
    assert g_dppo.item() == 0.0


@pytest.mark.parametrize(
    "method,p,expected",
    [
        ("tv", 0.01, (0.0, 6.0)),
        ("tv", 0.2, (0.75, 1.25)),
        ("tv", 0.9, (0.9444, 1.0556)),
        ("chi2", 0.01, (0.0, 3.2249)),
        ("chi2", 0.2, (0.5528, 1.4472)),
        ("chi2", 0.9, (0.9255, 1.0745)),
        ("kl", 0.01, (0.0025, 7.8098)),
        ("kl", 0.2, (0.4759, 1.7177)),
        ("kl", 0.9, (0.8666, 1.0764)),
    ],
)
def test_band_bounds_table(method, p, expected):
    #  delta .05; tv 1 -+ delta/p, chi2 1 -+ sqrt(delta(1-p)/p), kl by bisection; clamped to [0, 1/p]
    low, high = band_bounds(inputs([[math.log(p)]], [[math.log(p)]], [[1.0]]).old_logprobs_BT, method, 0.05)
    assert (low.item(), high.item()) == (pytest.approx(expected[0], abs=1e-4), pytest.approx(expected[1], abs=1e-4))


def test_bandpo_probability_aware_clip():
    #  kl bands, relaxed: q = .2 -> [.4759, 1.7177];  q = .9 -> [min(.8666, .8), max(1.0764, 1.28)] = [.8, 1.28]
    #  (q, r, A): (.2, 1.5, 1) in | (.2, 2.0, 1) clipped at u | (.9, 1.1, 1) in | (.9, .7, -1) clipped at .8
    #  L = -1.5 - u - 1.1 + .8;  grad [-1.5, 0, -1.1, 0] / 4   (ppo_clip would have clipped 1.5 at 1.28)
    q, r = [0.2, 0.2, 0.9, 0.9], [1.5, 2.0, 1.1, 0.7]
    x = inputs([logs([a * b for a, b in zip(q, r)])], [logs(q)], [[1.0, 1.0, 1.0, -1.0]])
    loss, grad = loss_and_grad(bandpo, BandpoConfig(), x)
    upper = band_bounds(x.old_logprobs_BT, "kl", 0.05)[1][0, 0].item()
    assert upper == pytest.approx(1.7177, abs=1e-4)
    assert loss == pytest.approx((-1.5 - upper - 1.1 + 0.8) / 4, abs=1e-9)
    assert_close(grad, [[-0.375, 0.0, -0.275, 0.0]])

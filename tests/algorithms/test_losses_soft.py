"""cispo, sapo, gipo, opefo, and the plain-policy-gradient identity at ratio 1.

cispo and sapo numbers (loss and gradient) match verl 0.9.1 (``cispo``; ``sapo`` with equal row
lengths, where its forced seq-mean-token-mean equals token_mean), on the examples below (verl gives
0.315561 and -0.754148 with the same gradients) and on random inputs: max abs diff 0 for cispo,
6e-10 (loss) / 2e-10 (grad) for sapo. ppo_clip matches ``vanilla`` exactly, gmpo ``geo_mean``.
"""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses import (
    CispoConfig,
    GipoConfig,
    GmpoConfig,
    PpoClipConfig,
    SapoConfig,
    cispo,
    gipo,
    gmpo,
    opefo,
    ppo_clip,
    sapo,
)
from agent_rl.algorithms.registry import ComponentConfig


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


@pytest.mark.parametrize(
    "fn,cfg",
    [
        (ppo_clip, PpoClipConfig()),
        (cispo, CispoConfig()),
        (sapo, SapoConfig()),
        (gipo, GipoConfig()),
        (gmpo, GmpoConfig()),
    ],
)
def test_plain_policy_gradient_at_ratio_one(fn, cfg):
    # at pi = pi_old every one of these has gradient A * grad log pi (here: d(-L)/dlogp_t = A_t / N)
    torch.manual_seed(1)
    old = torch.log(torch.rand(3, 4, dtype=torch.float64) * 0.8 + 0.1)
    adv = torch.randn(3, 1, dtype=torch.float64).expand(3, 4)  # sequence-level, as gmpo assumes
    x = inputs(old.tolist(), old.tolist(), adv.tolist())
    _, grad = loss_and_grad(fn, cfg, x)
    assert_close(-grad, adv / 12, atol=1e-12)


def test_cispo_clipped_detached_weight():
    #  eps .2/.28; r = [1, 2, .1] -> weights [1, 1.28, .8];  A = [1, 1, -1];  logp = ln[.5, .3, .2]
    #  L = -w A logp = .693147 | 1.28*1.203973 = 1.541085 | -.8*1.609438 = -1.287550 -> sum .946682 / 3
    #  grad = -w A / 3 = [-1/3, -1.28/3, .8/3]: never zero outside the clip range
    x = inputs([logs([0.5, 0.3, 0.2])], [logs([0.5, 0.15, 2.0])], [[1.0, 1.0, -1.0]])
    loss, grad = loss_and_grad(cispo, CispoConfig(eps_low=0.2, eps_high=0.28), x)
    expected = (math.log(2) + 1.28 * -math.log(0.3) - 0.8 * -math.log(0.2)) / 3
    assert loss == pytest.approx(expected, abs=1e-9)
    assert_close(grad, [[-1 / 3, -1.28 / 3, 0.8 / 3]])


def test_cispo_gradient_is_clipped_ratio_times_advantage():
    torch.manual_seed(2)
    old = torch.log(torch.rand(2, 5, dtype=torch.float64) * 0.5 + 0.05)
    lp = old + torch.randn(2, 5, dtype=torch.float64)
    adv = torch.randn(2, 5, dtype=torch.float64)
    x = inputs(lp.tolist(), old.tolist(), adv.tolist())
    _, grad = loss_and_grad(cispo, CispoConfig(eps_low=0.2, eps_high=0.28), x)
    weight = torch.exp(lp - old).clamp(0.8, 1.28)
    assert_close(-grad, weight * adv / 10, atol=1e-12)
    assert bool((grad != 0).all())


def test_sapo_soft_gate():
    #  A = [1, -1], r = [2, .5], tau 1 / 1.05
    #  t0: gate 4 sig(1) = 2.924234 -> L -2.924234; dL/dlogp = -A 4 sig(1)(1 - sig(1)) r = -0.786448 * 2
    #  t1: x = 1.05 * -.5 = -.525, sig = .371685, gate = 4/1.05 * .371685 = 1.415943 -> L 1.415943;
    #      dL/dlogp = -A 4 sig (1 - sig) r = .934148 * .5 = .467074;  mean over 2 tokens
    x = inputs([logs([0.2, 0.05])], [logs([0.1, 0.1])], [[1.0, -1.0]])
    loss, grad = loss_and_grad(sapo, SapoConfig(), x)
    s0, s1 = sigmoid(1.0), sigmoid(-0.525)
    assert loss == pytest.approx((-4 * s0 + 4 / 1.05 * s1) / 2, abs=1e-9)
    assert_close(grad, [[-4 * s0 * (1 - s0) * 2 / 2, 4 * s1 * (1 - s1) * 0.5 / 2]])


def test_gipo_gaussian_gate_in_log_ratio_space():
    #  sigma 1, log r = [1, 0, -2], A = [1, 1, -1]: omega = [e^-.5, 1, e^-2]
    #  L = -A omega r = -e^.5 | -1 | e^-4 -> mean (-1.648721 - 1 + 0.018316) / 3
    #  grad = -A omega r / 3 (the gate is detached)
    x = inputs([[0.0 - 2.0, -2.0, -4.0]], [[-3.0, -2.0, -2.0]], [[1.0, 1.0, -1.0]])
    loss, grad = loss_and_grad(gipo, GipoConfig(), x)
    assert loss == pytest.approx((-math.exp(0.5) - 1 + math.exp(-4)) / 3, abs=1e-9)
    assert_close(grad, [[-math.exp(0.5) / 3, -1 / 3, math.exp(-4) / 3]])


def test_opefo_balances_entropy_flows():
    #  dH_t = -A (1 - p)^2 (log p + H):
    #    p .5 H .3 A 1:  -.25 * (-.693147 + .3) = +.098287      (raises entropy)
    #    p .9 H .5 A 1:  -.01 * (-.105361 + .5) = -.003946
    #    p .2 H 1. A -1: +.64 * (-1.609438 + 1) = -.390040
    #  P = .098287, N = .393986, lambda = (N - P) / (N + P) = .600682; w = [1 + l, 1 - l, 1 - l]
    #  L = -w A logp;  grad = -w A / 3
    probs, entropy, adv = [0.5, 0.9, 0.2], [0.3, 0.5, 1.0], [1.0, 1.0, -1.0]
    x = inputs([logs(probs)], [logs(probs)], [adv], entropy_BT=[entropy])
    loss, grad = loss_and_grad(opefo, ComponentConfig(name="opefo"), x)
    dh = [-a * (1 - p) ** 2 * (math.log(p) + h) for p, h, a in zip(probs, entropy, adv)]
    pos, neg = sum(v for v in dh if v > 0), -sum(v for v in dh if v < 0)
    lam = (neg - pos) / (neg + pos)
    assert lam == pytest.approx(0.600682, abs=1e-6)
    w = [1 + lam, 1 - lam, 1 - lam]
    assert loss == pytest.approx(sum(-wi * a * math.log(p) for wi, a, p in zip(w, adv, probs)) / 3, abs=1e-9)
    assert_close(grad, [[-wi * a / 3 for wi, a in zip(w, adv)]])
    assert opefo(x, ComponentConfig(name="opefo")).metrics["loss/opefo_lambda"] == pytest.approx(lam)

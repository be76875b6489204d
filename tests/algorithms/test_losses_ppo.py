"""ppo_clip, reinforce, dcpo, bapo, wapo, kimi_k3: hand-computed losses and gradients.

All reductions are token_mean over the call; "grad" is d loss / d logp_t of that mean.
ppo_clip and reinforce numbers (loss and gradient) match verl 0.9.1 (``vanilla``,
``compute_policy_loss_reinforce``) on these inputs (verl: 0.08 and 0.0, same gradients) and on
random ones (max abs diff 0).
"""

import math

import pytest
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms import POLICY_LOSSES
from agent_rl.algorithms.losses import (
    BapoConfig,
    BapoState,
    DcpoConfig,
    KimiK3Config,
    PpoClipConfig,
    WapoConfig,
    bapo,
    dcpo,
    kimi_k3,
    ppo_clip,
    reinforce,
    wapo,
)
from agent_rl.algorithms.registry import ComponentConfig


def test_ppo_clip_asymmetric_and_dual_clip():
    #  r     1.5   0.5   1.1   5.0      A  1  -1  2  -1     eps 0.2 / 0.28, dual c = 3
    #  L  max(-1.5,-1.28)=-1.28 | max(0.5,0.8)=0.8 | -2.2 | max(5,1.28)=5 -> min(5, 3)=3
    #  sum 0.32 / 4 = 0.08;  grad: only token 2 unclipped, -A r / 4 = -2.2 / 4 = -0.55
    x = inputs([logs([0.15, 0.05, 0.11, 0.5])], [logs([0.1, 0.1, 0.1, 0.1])], [[1.0, -1.0, 2.0, -1.0]])
    loss, grad = loss_and_grad(ppo_clip, PpoClipConfig(), x)
    assert loss == pytest.approx(0.08, abs=1e-9)
    assert_close(grad, [[0.0, 0.0, -0.55, 0.0]])
    metrics = ppo_clip(x, PpoClipConfig()).metrics
    assert metrics["loss/clip_frac_low"] == 0.25 and metrics["loss/clip_frac_high"] == 0.25
    assert metrics["loss/ratio_max"] == pytest.approx(5.0)


def test_reinforce_is_minus_advantage_times_logprob():
    #  logp  ln .5 = -0.693147, ln .25 = -1.386294;  A 2, -1
    #  L = -A logp = 1.386294, -1.386294 -> mean 0;  grad -A / 2 = -1, 0.5
    x = inputs([logs([0.5, 0.25])], [logs([0.4, 0.4])], [[2.0, -1.0]])
    loss, grad = loss_and_grad(reinforce, ComponentConfig(name="reinforce"), x)
    assert loss == pytest.approx(0.0, abs=1e-12)
    assert_close(grad, [[-1.0, 0.5]])


def test_dcpo_bounds_follow_the_old_probability():
    #  q = 0.5: low = .5 + .5 sqrt(max(1 - 4*.2/.5, 0)) = 0.5, high = .5 + .5 sqrt(1 + 4*.28/.5) = .5 + .5*1.8 = 1.4
    #  q = 0.9: low = .5 + .5 sqrt(1 - .8/.9) = 0.666667,    high = .5 + .5 sqrt(1 + 1.12/.9) = 1.249074
    #  r  1.3 (in) 1.5 (> 1.4, A>0 clipped) 0.7 (in) 0.6 (< 0.6667, A<0 clipped);  A 1 1 -1 -1
    #  L -1.3  -1.4  0.7  0.666667 -> sum -1.333333 / 4 = -0.333333;  grad -A r / 4 = -0.325, 0, 0.175, 0
    q = [0.5, 0.5, 0.9, 0.9]
    r = [1.3, 1.5, 0.7, 0.6]
    x = inputs([logs([a * b for a, b in zip(q, r)])], [logs(q)], [[1.0, 1.0, -1.0, -1.0]])
    loss, grad = loss_and_grad(dcpo, DcpoConfig(), x)
    assert loss == pytest.approx(-1.0 / 3.0, abs=1e-6)
    assert_close(grad, [[-0.325, 0.0, 0.175, 0.0]])
    # a rare token (q = 0.01) may grow to 5.815x: high = .5 + .5 sqrt(1 + 112) = 5.815073, ratio 5 is not clipped
    x = inputs([logs([0.05])], [logs([0.01])], [[1.0]])
    loss, grad = loss_and_grad(dcpo, DcpoConfig(), x)
    assert loss == pytest.approx(-5.0, abs=1e-9) and grad.item() == pytest.approx(-5.0)


def test_bapo_raises_bounds_until_positive_share_reached():
    #  A  1     1    -1    -1    -1        r  1.45  1.0  1.0  0.5  0.72
    #  step k: c_low = .6 + .05k, c_high = 1.2 + .1k;  P = sum_{A>0, r<=c_high} r A, N = sum_{A<0, r>=c_low} r|A|
    #  k=0..2: P = 1 (1.45 > c_high), N = 1 + 0.72 = 1.72 -> share 0.3676 < 0.5
    #  k=3: c_low .75, c_high 1.5: P = 2.45, N = 1.0 (0.72 < .75) -> share 2.45/3.45 = 0.710145, stop
    #  L with [.75, 1.5]: -1.45 -1 +1 +max(.5,.75) +max(.72,.75) = 0.05 / 5 = 0.01
    #  grad -A r / 5 on unclipped: -0.29 -0.2 0.2 0 0
    r = [1.45, 1.0, 1.0, 0.5, 0.72]
    state = POLICY_LOSSES.get("bapo").make_state()
    assert isinstance(state, BapoState)
    x = inputs([logs([0.1 * v for v in r])], [logs([0.1] * 5)], [[1.0, 1.0, -1.0, -1.0, -1.0]], state=state)
    loss, grad = loss_and_grad(bapo, BapoConfig(), x)
    assert loss == pytest.approx(0.01, abs=1e-9)
    assert_close(grad, [[-0.29, -0.2, 0.2, 0.0, 0.0]])
    assert (state.c_low, state.c_high) == (pytest.approx(0.75), pytest.approx(1.5))
    assert state.positive_share == pytest.approx(2.45 / 3.45) and state.calls == 1
    restored = BapoState()
    restored.load_state_dict(state.state_dict())
    assert restored.state_dict() == state.state_dict()


def test_bapo_needs_its_state():
    x = inputs([[-1.0]], [[-1.0]], [[1.0]])
    with pytest.raises(ValueError, match="bapo"):
        bapo(x, BapoConfig())


def test_wapo_trains_winners_only():
    #  r 1.5 0.5 2.0, A 1 1 -1:  L -min(1.5,1.2) = -1.2 | -0.5 | 0 (A<0) -> sum -1.7 / 3 = -0.566667
    #  grad: token 0 capped (0), token 1 -r/3 = -0.166667, token 2 0
    x = inputs([logs([0.15, 0.05, 0.2])], [logs([0.1, 0.1, 0.1])], [[1.0, 1.0, -1.0]])
    loss, grad = loss_and_grad(wapo, WapoConfig(), x)
    assert loss == pytest.approx(-1.7 / 3, abs=1e-9)
    assert_close(grad, [[0.0, -0.5 / 3, 0.0]])


def test_kimi_k3_clip_plus_log_ratio_penalty():
    #  alpha .8 beta 1.28 tau .1;  r 1, 2, .5;  A 1, 1, -1;  (ln 2)^2 = 0.480453
    #  L: -1 | -1.28 + .1*.480453 = -1.231955 | .8 + .048045 = .848045 -> sum -1.383910 / 3 = -0.461303
    #  grad: -A r (inside) + 2 tau log r:  -1 | 0 + .2*.693147 = .138629 | 0 - .138629  -> /3
    x = inputs([logs([0.1, 0.2, 0.05])], [logs([0.1, 0.1, 0.1])], [[1.0, 1.0, -1.0]])
    loss, grad = loss_and_grad(kimi_k3, KimiK3Config(), x)
    ln2sq = math.log(2) ** 2
    assert loss == pytest.approx((-1 - 1.28 + 0.1 * ln2sq + 0.8 + 0.1 * ln2sq) / 3, abs=1e-9)
    assert_close(grad, [[-1 / 3, 0.2 * math.log(2) / 3, -0.2 * math.log(2) / 3]])

"""KL estimators: hand examples in both directions, exact expectations, extremes, CoKL.

Hand example: pi(y) = 0.5, pi_ref(y) = 0.25, so log r = log(pi_ref/pi) = -ln 2 = -0.6931472, r = 0.5.
The reverse k1, abs, k2 and low_var_kl values (and k3 below 10) also match verl 0.9.1
``kl_penalty`` (checked outside CI; verl is not a test dependency). verl has no forward direction.
"""

from __future__ import annotations

import math

import pytest
import torch

from agent_rl.algorithms import KLS
from agent_rl.algorithms.kl import KlConfig
from agent_rl.algorithms.registry import KlInputs

LN2 = math.log(2)
PLAIN = ["k1", "abs", "k2", "k3", "low_var_kl"]


def kl(key: str, logp, ref, x: KlInputs | None = None, **cfg) -> torch.Tensor:
    entry = KLS.get(key)
    return entry.fn(
        torch.as_tensor(logp, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64), entry.config(**cfg), x
    )


@pytest.mark.parametrize(
    "key, reverse, forward",
    [
        # reverse: -log r, |log r|, (log r)^2/2, r - log r - 1
        # forward: r log r, r |log r|, r (log r)^2/2, r log r - r + 1
        ("k1", LN2, -0.5 * LN2),
        ("abs", LN2, 0.5 * LN2),
        ("k2", 0.5 * LN2**2, 0.25 * LN2**2),
        ("k3", 0.5 + LN2 - 1, -0.5 * LN2 + 0.5),
        ("low_var_kl", 0.5 + LN2 - 1, -0.5 * LN2 + 0.5),
    ],
)
def test_hand_example_both_directions(key, reverse, forward):
    logp, ref = [math.log(0.5)], [math.log(0.25)]
    assert kl(key, logp, ref).item() == pytest.approx(reverse, abs=1e-12)
    assert kl(key, logp, ref, direction="forward").item() == pytest.approx(forward, abs=1e-12)
    assert (reverse, forward) == pytest.approx({"k1": (0.6931472, -0.3465736), "abs": (0.6931472, 0.3465736),
                                                "k2": (0.2402265, 0.1201133), "k3": (0.1931472, 0.1534264),
                                                "low_var_kl": (0.1931472, 0.1534264)}[key], abs=1e-7)  # fmt: skip


@pytest.mark.parametrize("key", ["k1", "k3"])
def test_unbiased_in_both_directions_exact_expectation(key):
    # categorical pi = (0.5, 0.3, 0.2), ref = (0.2, 0.2, 0.6); E_pi[k] computed exactly by summing
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    reverse = (p * kl(key, p.log(), q.log())).sum()
    forward = (p * kl(key, p.log(), q.log(), direction="forward")).sum()
    assert reverse.item() == pytest.approx(
        (p * (p / q).log()).sum().item(), abs=1e-12
    )  # KL(pi || ref) = 0.5 ln 2.5 + 0.3 ln 1.5 + 0.2 ln(1/3) = 0.3601
    assert forward.item() == pytest.approx(
        (q * (q / p).log()).sum().item(), abs=1e-12
    )  # KL(ref || pi) = 0.2 ln 0.4 + 0.2 ln(2/3) + 0.6 ln 3 = 0.3948
    assert reverse.item() == pytest.approx(0.3601, abs=1e-4) and forward.item() == pytest.approx(0.3948, abs=1e-4)


@pytest.mark.parametrize("key", PLAIN)
@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_zero_when_policies_match_and_finite_on_extremes(key, direction):
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(16, 8, generator=g, dtype=torch.float64) * 80
    assert torch.equal(kl(key, logp, logp, direction=direction), torch.zeros_like(logp))
    ref = -torch.rand(16, 8, generator=g, dtype=torch.float64) * 80
    live = logp.clone().requires_grad_(True)
    entry = KLS.get(key)
    out = entry.fn(live, ref, entry.config(direction=direction))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(live.grad).all()
    if key != "k1":
        assert (out >= 0).all()


def test_k3_is_unclamped_low_var_kl_clamps_at_10():
    # log r = -50 is clamped to -20 first: k3 = e^-20 + 20 - 1 = 19.000000002; low_var_kl = 10 (verl: 10 for both)
    assert kl("k3", [0.0], [-50.0]).item() == pytest.approx(19.0, abs=1e-6)
    assert kl("low_var_kl", [0.0], [-50.0]).item() == 10.0
    assert kl("low_var_kl", [0.0], [-50.0], clamp=5.0).item() == 5.0


def test_every_kl_config_keeps_the_base_fields():
    for entry in KLS.entries():
        assert issubclass(entry.config, KlConfig)
        cfg = entry.config()
        assert cfg.coef == 0.0 and cfg.placement == "in_loss"


#                 row  group  reward  s = sum(ref - logp)
#                 0    0      1       ln 2
#                 1    0      1       0
#                 2    0      0       (any: incorrect rows are not regularized)
#                 3    1      1       alone among correct rows of group 1 -> 0
COKL_MASK = torch.tensor([[0.0, 1, 0], [0, 1, 1], [0, 1, 1], [0, 1, 0]], dtype=torch.float64)
COKL_LOGP = torch.tensor([[9.0, -LN2, 9], [9, -0.5, -0.5], [9, -3, -1], [9, -2, 9]], dtype=torch.float64)
COKL_REF = torch.tensor([[0.0, 0, 0], [0, -0.7, -0.3], [0, 0, 0], [0, 0, 0]], dtype=torch.float64)
COKL_X = KlInputs(
    loss_mask_BT=COKL_MASK, rewards_B=torch.tensor([1.0, 1, 0, 1]), group_index_B=torch.tensor([0, 0, 0, 1])
)


def test_cokl_forward_hand_example():
    # w = softmax(ln 2, 0) = (2/3, 1/3); KL(w || uniform) = 2/3 ln(4/3) + 1/3 ln(2/3) = 0.0566330
    # per-row c_i = w_i ln w_i + ln(2)/2: (-0.2703101 + 0.3465736, -0.3662041 + 0.3465736) = (0.0762636, -0.0196305)
    out = kl("cokl", COKL_LOGP, COKL_REF, COKL_X)
    c0, c1 = 2 / 3 * math.log(2 / 3) + LN2 / 2, 1 / 3 * math.log(1 / 3) + LN2 / 2
    torch.testing.assert_close(out, torch.tensor([[0, c0, 0], [0, c1, c1], [0, 0, 0], [0, 0, 0]], dtype=torch.float64))
    assert (
        c0 + c1
        == pytest.approx(2 / 3 * math.log(4 / 3) + 1 / 3 * math.log(2 / 3))
        == pytest.approx(0.0566330, abs=1e-7)
    )


def test_cokl_reverse_hand_example():
    # log mean exp(s) - mean s = ln(3/2) - ln(2)/2 = 0.0588915; c_i = (ln 3 - ln 2 - s_i)/2
    out = kl("cokl", COKL_LOGP, COKL_REF, COKL_X, direction="reverse")
    c0, c1 = (math.log(3) - LN2 - LN2) / 2, (math.log(3) - LN2) / 2
    torch.testing.assert_close(out, torch.tensor([[0, c0, 0], [0, c1, c1], [0, 0, 0], [0, 0, 0]], dtype=torch.float64))
    assert c0 + c1 == pytest.approx(0.0588915, abs=1e-7)


def test_cokl_is_zero_when_relative_allocation_matches_and_needs_inputs():
    # s = 0.6 on both correct rows of group 0 (pi and ref split the correct mass alike) -> 0 in both directions
    ref = COKL_LOGP + COKL_MASK * 0.6 / COKL_MASK.sum(-1, keepdim=True)
    for direction in ("forward", "reverse"):
        assert kl("cokl", COKL_LOGP, ref, COKL_X, direction=direction).abs().max().item() < 1e-12
    with pytest.raises(ValueError, match="KlInputs"):
        kl("cokl", COKL_LOGP, COKL_REF)
    g = torch.Generator().manual_seed(1)
    logp = (-torch.rand(4, 3, generator=g, dtype=torch.float64) * 200).requires_grad_(True)
    out = KLS.get("cokl").fn(logp, COKL_REF, KLS.get("cokl").config(), COKL_X)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(logp.grad).all()

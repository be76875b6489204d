"""SPO / SPO++: hand-computed worked examples, tracker decay,
sampling weights, checkpoint round trip and the task sampler's use of the weights."""

from __future__ import annotations

import math

import pytest
import torch
from credit_helpers import group, inputs, run, traj

from agent_rl.algorithms import CREDITS
from agent_rl.algorithms.credit.spo import (
    PromptValueTracker,
    SpoConfig,
    adaptive_rho,
    offline_prior,
    spo_sampling_weights,
    token_measure_normalize,
)
from agent_rl.train.task_sampler import TaskSampler

RHO = 0.875


def tracker_with(evidence: dict[str, tuple[float, float]]) -> PromptValueTracker:
    tracker = PromptValueTracker()
    tracker.load_state_dict(
        {
            "alpha": {k: a for k, (a, _) in evidence.items()},
            "beta": {k: b for k, (_, b) in evidence.items()},
            "version": {k: 0 for k in evidence},
        }
    )
    return tracker


SPEC = {"a": (4.0, 4.0), "b": (6.0, 2.0), "c": (1.0, 7.0), "d": (2.0, 6.0)}  # v = 0.5, 0.75, 0.125, 0.25


def single_stream(rewards: dict[str, float], turn_lens: dict[str, int] | None = None):
    """One sample per prompt (group_size 1): one group per task."""
    turn_lens = turn_lens or {}
    return [group(traj(f"e-{k}", [r], task=k, turn_len=turn_lens.get(k, 2))) for k, r in rewards.items()]


def test_spo_spec_example_single_stream():
    tracker = tracker_with(SPEC)
    groups = single_stream({"a": 1, "b": 1, "c": 0, "d": 1})
    out = run("spo", groups, state=tracker)
    # A = r - v = [0.5, 0.25, -0.125, 0.75]; batch mean 0.34375, unbiased std 0.37326
    assert out.advantages_BT[:, 2].tolist() == pytest.approx([0.4186, -0.2512, -1.2558, 1.0884], abs=1e-4)
    assert out.advantages_BT[:, :2].abs().sum() == 0  # prompt tokens
    # the tracker absorbed r after use with the constant rho: a -> alpha 0.875*4 + 1 = 4.5, beta 3.5, v 0.5625
    assert (tracker.alpha["a"], tracker.beta["a"]) == pytest.approx((4.5, 3.5))
    assert tracker.value("a") == pytest.approx(0.5625)
    assert (tracker.alpha["c"], tracker.beta["c"]) == pytest.approx((0.875, 7 * 0.875 + 1))


def test_spo_forgetting_factor_and_offline_prior():
    # D = 0.03: 2^(-0.5) = 0.7071 -> clipped up to 0.875; D = 0.001: 0.9885 -> clipped down to 0.96
    assert adaptive_rho(0.03, RHO) == RHO
    assert 2 ** (-0.001 / 0.06) == pytest.approx(0.9885, abs=1e-4) and adaptive_rho(0.001, RHO) == 0.96
    # 3 of 8 offline successes: N0 = 8, alpha0 = 8 * 3.5 / 9, beta0 = 8 * 5.5 / 9
    assert offline_prior(3, 8, RHO) == pytest.approx((3.1111, 4.8889), abs=1e-4)
    assert offline_prior(0, 0, RHO) == (0.5, 0.5)
    t = PromptValueTracker()
    t.seed("x", 3, 8)
    assert t.value("x") == pytest.approx(0.3889, abs=1e-4)
    # decay: after k failures from (alpha, beta) = (1, 1): alpha = rho^k, beta = rho^k + sum_{i<k} rho^i
    t = tracker_with({"x": (1.0, 1.0)})
    for _ in range(3):
        t.update("x", 0.0, RHO)
    assert t.alpha["x"] == pytest.approx(RHO**3)
    assert t.beta["x"] == pytest.approx(RHO**3 + 1 + RHO + RHO**2)


def test_spo_sampling_weights():
    tracker = tracker_with(SPEC)
    # sqrt(v (1 - v)) + 0.05 for v = 0.5, 0.75, 0.125, 0.25; an unseen prompt has v = 0.5
    w = spo_sampling_weights(tracker, ["a", "b", "c", "d", "new"], SpoConfig())
    assert w == pytest.approx([0.55, 0.4830, 0.3807, 0.4830, 0.55], abs=1e-4)
    # gamma = 1 divides by N_eff = alpha + beta = 8
    w1 = spo_sampling_weights(tracker, ["a"], SpoConfig(sampling_gamma=1.0))
    assert w1 == pytest.approx([0.5 / 8 + 0.05])


def test_task_sampler_draws_with_the_spo_weights():
    entry, cfg = CREDITS.get("spo"), SpoConfig()
    tracker = tracker_with({"easy": (99.0, 1e-9), "hard": (4.0, 4.0)})  # v ~ 1 -> weight ~ 0.05; v = 0.5 -> 0.55
    sampler = TaskSampler(0, 2, [(entry, cfg, tracker)])
    for seed, task in zip(sampler.pool_seeds, ["easy", "hard"], strict=True):
        sampler.observe(seed, task)
    assert sampler.weights().tolist() == pytest.approx(
        [math.sqrt(99 / (99 + 1e-9) * (1e-9 / (99 + 1e-9))) + 0.05, 0.55]
    )
    assert entry.sampler is spo_sampling_weights and CREDITS.get("spo_pp").sampler is spo_sampling_weights


def test_spo_pp_token_measure_normalisation():
    adv = token_measure_normalize(torch.tensor([0.5, -0.5, 0.3]), torch.tensor([100.0, 10.0, 50.0]), 1e-8)
    # mu_tok = 0.375, sigma_tok = 0.24443
    assert adv.tolist() == pytest.approx([0.5114, -3.5797, -0.3068], abs=1e-4)
    assert float((adv * torch.tensor([100.0, 10.0, 50.0])).sum()) == pytest.approx(0.0, abs=1e-9)


def test_spo_pp_entry_normalises_under_the_token_measure():
    tracker = tracker_with({"a": (1.0, 1.0), "b": (1.0, 1.0), "c": (1.0, 1.0)})  # v = 0.5 everywhere
    groups = single_stream({"a": 1, "b": 0, "c": 1}, turn_lens={"a": 3, "b": 1, "c": 2})
    out = run("spo_pp", groups, state=tracker)
    # A = [0.5, -0.5, 0.5], L = [3, 1, 2]: mu = 2/6, sigma^2 = (3 (1/6)^2 + (5/6)^2 + 2 (1/6)^2) / 5 = 1/6
    sigma = math.sqrt(1 / 6)
    expected = [(0.5 - 1 / 3) / sigma, (-0.5 - 1 / 3) / sigma, (0.5 - 1 / 3) / sigma]
    assert out.advantages_BT[:, 2].tolist() == pytest.approx(expected, abs=1e-6)
    assert float((out.advantages_BT.double()).sum()) == pytest.approx(0.0, abs=1e-5)  # sum_i L_i A_i = 0


def test_spo_pp_event_time_memory():
    # alpha0 = beta0 = 4 at event 0; R = 1 generated at event 3, R = 0 at event 5; dispatch at event 6
    t = tracker_with({"x": (4.0, 4.0)})
    t.absorb("x", 1.0, 3, RHO)
    t.absorb("x", 0.0, 5, RHO)
    alpha6, beta6 = 4 * RHO**6 + RHO**3, 4 * RHO**6 + RHO**1  # 2.4651, 2.6702
    assert (alpha6, beta6) == pytest.approx((2.4651, 2.6702), abs=1e-4)
    assert t.value("x") == pytest.approx(0.4800, abs=1e-4)
    assert t.n_eff("x", version=6, rho=RHO) == pytest.approx(alpha6 + beta6)
    # receipt order does not matter
    u = tracker_with({"x": (4.0, 4.0)})
    u.absorb("x", 0.0, 5, RHO)
    u.absorb("x", 1.0, 3, RHO)
    assert (u.alpha["x"], u.beta["x"]) == pytest.approx((t.alpha["x"], t.beta["x"]))


def test_spo_pp_baseline_is_frozen_at_dispatch():
    # two samples of one prompt in one batch both read v = 0.5 (neither sees the other's outcome)
    tracker = tracker_with({"x": (1.0, 1.0)})
    groups = [group(traj("e1", [1], task="x", versions=[2]), traj("e2", [0], task="x", versions=[2]))]
    out = run("spo_pp", groups, state=tracker)
    assert out.metrics["credit/spo_baseline_mean"] == 0.5
    # both absorbed at version 2: the prior decays by rho^2 first
    assert (tracker.alpha["x"], tracker.beta["x"]) == pytest.approx((RHO**2 + 1, RHO**2 + 1))
    assert tracker.version["x"] == 2


def test_tracker_state_round_trip_and_missing_task_ids():
    tracker = tracker_with(SPEC)
    run("spo", single_stream({"a": 1, "b": 0}), state=tracker)
    restored = PromptValueTracker()
    restored.load_state_dict(tracker.state_dict())
    assert restored.state_dict() == tracker.state_dict()
    groups = single_stream({"a": 1, "b": 0})
    x = inputs(groups)
    x.task_ids_B = None
    with pytest.raises(ValueError, match="'spo' needs task_ids_B"):
        run("spo", groups, x=x)

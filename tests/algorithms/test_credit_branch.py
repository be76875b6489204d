"""Branch-based credit: CBPO, ARPO, VinePPO on hand-built branch trees, and their branch planners.

Trees are built by hand: a child copies its parent's tokens [0, branch_point) and carries
``parent_id`` / ``branch_point``, as the engine's ``fork`` produces them.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from credit_helpers import arpo_tree, cbpo_tree, group, inputs, run, traj, vine_tree

from agent_rl.algorithms import CREDITS
from agent_rl.algorithms.credit.arpo import (
    ArpoConfig,
    branch_probability,
    plan_arpo,
    segment_entropy,
)
from agent_rl.algorithms.credit.cbpo import (
    CbpoConfig,
    balanced_priority,
    cbv_z,
    modulate,
    parent_segments,
    plan_cbpo,
)

A = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # GRPO advantage of rewards [1, 0, 1, 0] (unbiased std sqrt(1/3))


# ----------------------------------------------------------------------------------------------
# CBPO


def test_cbpo_contrastive_branch_values_spec_example():
    # CBV = population std: [0.5, 0, 0.4714]; standardised with a population std across the nodes
    assert cbv_z([[1, 0, 1, 0], [1, 1, 1], [0, 1, 0]], 1e-6, 1e-6) == pytest.approx([0.7686, -1.4124, 0.6438], abs=1e-4)
    assert cbv_z([[1, 0], [0, 1]], 1e-6, 1e-6) == [0.0, 0.0]  # sigma_CBV < 1e-6


@pytest.mark.parametrize(
    ("a", "z", "expected"), [(0.8, 1.2, 0.88), (-0.5, 1.2, -0.55), (0.8, -0.9, 0.72), (0.1, 1.2, 0.11)]
)
def test_cbpo_modulation_spec_table(a, z, expected):
    assert modulate(a, z, CbpoConfig()) == pytest.approx(expected)


def test_cbpo_never_flips_an_advantage_sign():
    rng = random.Random(0)
    for eta, phi in [(0.2, 2.0), (1.9, 2.0), (0.0, 1.0)]:
        cfg = CbpoConfig(eta=eta, phi=phi)
        for _ in range(2000):
            a, z = rng.uniform(-3, 3), rng.uniform(-50, 50)
            out = modulate(a, z, cfg)
            assert math.copysign(1, out) == math.copysign(1, a)
            assert 1 - eta / phi - 1e-12 <= out / a <= 1 + eta / phi + 1e-12
    assert modulate(0.0, 5.0, CbpoConfig()) == 0.0
    with pytest.raises(ValueError, match="eta must be < phi"):
        CbpoConfig(eta=2.0, phi=2.0)


def test_cbpo_budget_decay_spec_example():
    cfg = CbpoConfig()
    assert [balanced_priority(0.4, n, n, cfg) for n in range(3)] == pytest.approx([0.4, 0.3031, 0.2578], abs=1e-4)


def test_cbpo_parent_segments_spec_example():
    # 300 action tokens, nodes at 64 and 192: [0,64) shared_1, [64,192) (final_1 + shared_2)/2, [192,300) final_2
    assert parent_segments([64, 192], [0.1, 0.3], [0.5, 0.7]) == [(0, 0.1), (64, 0.4), (192, 0.7)]


def test_cbpo_credit_on_a_branch_tree():
    groups = cbpo_tree()
    out = run("cbpo", groups)
    # base A = +-A over [1, 0, 1, 0]; nodes (p,4) rewards [1, 0] CBV 0.5, (p,6) rewards [1, 1] CBV 0 -> Z = [+1, -1]
    # |Z| > |A|/phi = 0.433 -> C = +-A/2: node 1: p 1.1 A, c1 -1.1 A; node 2: p 0.9 A, c2 0.9 A
    # shared_1 = mean(A, -A) = 0, shared_2 = mean(A, A) = A
    z1 = 0.25 / (0.25 + 1e-6)
    assert z1 > A / 2
    seg = 0.5 * (1.1 * A + A)
    #         P  P  a  a  a    a    a       a       a       a
    parent = [0, 0, 0, 0, seg, seg, 0.9 * A, 0.9 * A, 0.9 * A, 0.9 * A]
    child1 = [0] * 4 + [-1.1 * A] * 6  # copied prefix [0, 4) leaves the loss
    child2 = [0] * 6 + [0.9 * A] * 4
    fallback = [0, 0] + [-A] * 8
    assert out.advantages_BT.tolist() == [pytest.approx(r, abs=1e-5) for r in [parent, child1, child2, fallback]]
    assert out.loss_mask_BT[1].tolist() == [0] * 4 + [1] * 6 and out.loss_mask_BT[2].tolist() == [0] * 6 + [1] * 4
    # node (p,4): rewards 1 vs 0 differ; node (p,6): 1 vs 1 agree
    assert out.metrics == {
        "credit/cbpo_branches": 2.0,
        "credit/branch_points": 2.0,
        "credit/branch_outcome_differs_frac": 0.5,
    }


def test_cbpo_segments_never_overlap_each_token_trained_once():
    rng = random.Random(1)
    for _ in range(20):
        p = traj("p", [rng.choice([0.0, 1.0])], turn_len=12)
        kids = [
            traj(f"c{k}", [rng.choice([0.0, 1.0])], turn_len=12, parent=p, branch_point=rng.randrange(3, 14))
            for k in range(4)
        ]
        groups = [group(p, *kids, traj("q", [rng.choice([0.0, 1.0])], turn_len=12))]
        out = run("cbpo", groups)
        mask = out.loss_mask_BT
        # the tree's tokens in the loss: the parent's 12 + each branch's own suffix + the other root's 12
        assert int(mask.sum()) == 12 + sum(14 - c.branch_point for c in kids) + 12
        # the parent's advantage is piecewise constant, changing only at its nodes
        points = sorted({c.branch_point for c in kids})
        row = out.advantages_BT[0].tolist()
        changes = [t for t in range(3, 14) if row[t] != row[t - 1]]
        assert set(changes) <= set(points)
        starts = [s for s, _ in parent_segments(points, [0.0] * len(points), [0.0] * len(points))]
        assert starts == sorted(set(starts))  # strictly increasing: no two segments share a token


def topk_row(ks: list[int]) -> list[list[float]]:
    """Top-k logprobs of a uniform distribution over k candidates at each token (entropy log k)."""
    return [[-math.log(k)] * k for k in ks]


def test_cbpo_plan_spec_loop():
    # 6 action tokens; per-token top-k entropy / log 16: 0, 0, 1, 1, 0.5, 0.5 -> windows of 2 from 0, 2, 4: 0, 1, 0.5
    #        P  P  a  a  a   a   a  a
    ks = [1, 1, 1, 1, 16, 16, 4, 4]
    p = traj("p", [0], turn_len=6, topk_logprobs_TK=topk_row(ks))
    cfg = CbpoConfig(total_rollouts=6, window=2, d_min=2, gamma=0.2)
    # P_raw: b=2: 0.2 + 0.2 * 1 = 0.4; b=4: 0.2 + 0.2 * 0.5 = 0.3 (kappa 0.25)
    # picks: b2 (0.4), b2 (0.4/2^0.4 = 0.3031 > 0.3/2^0.2 = 0.2612), b2 (0.2578 > 0.2408); b2 is then full
    # (B_node 3) and b4 at 0.3/4^0.2 = 0.2275 < kappa stops the loop: 5 - 3 = 2 fresh rollouts
    plan = plan_cbpo([group(p)], cfg, vocab_size=16)
    assert [(b.trajectory.episode_id, b.at_token, b.n) for b in plan.branches] == [("p", 4, 3)]
    assert plan.fresh == {"t-g": 2}
    # a higher alpha makes every candidate eligible: the path budget B_path = 4 caps the branches
    plan = plan_cbpo([group(p)], CbpoConfig(total_rollouts=16, window=2, d_min=2, gamma=0.2, alpha=0.9), vocab_size=16)
    assert sum(b.n for b in plan.branches) == 4 and plan.fresh == {"t-g": 11}
    with pytest.raises(ValueError, match="set rollout.topk"):
        plan_cbpo([group(traj("x", [0], turn_len=6))], cfg, vocab_size=16)


# ----------------------------------------------------------------------------------------------
# ARPO


def test_arpo_hard_attribution_shared_prefix_gets_the_mean():
    groups = arpo_tree()
    out = run("arpo", groups, attribution="hard")
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO over [1, 0]
    #                                      P  P  a  a  o  a  a
    assert out.advantages_BT[0].tolist() == pytest.approx([0, 0, 0, 0, 0, a, a], abs=1e-6)  # mean(a, -a) = 0
    assert out.advantages_BT[1].tolist() == pytest.approx([0, 0, 0, 0, 0, -a, -a], abs=1e-6)
    assert out.loss_mask_BT[1].tolist() == [0, 0, 0, 0, 0, 1, 1]


def test_arpo_soft_attribution_sums_to_the_hard_gradient_times_the_set_size():
    groups = arpo_tree()
    soft = run("arpo", groups)
    assert soft.loss_mask_BT is None
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert soft.advantages_BT[:, 2].tolist() == pytest.approx([a, -a], abs=1e-6)
    # the shared prefix (columns 2, 3) is in both rows with +a and -a: summed over the copies, 0 = 2 x hard's 0
    assert float(soft.advantages_BT[:, 2:4].sum()) == pytest.approx(0.0, abs=1e-6)


def test_arpo_segment_entropy_and_probability():
    # first turn: two tokens with 4 uniform candidates -> (2 log 4) / log 16 = 1 (summed over tokens, not averaged)
    p = traj("p", [0, 0], topk_logprobs_TK=topk_row([1, 1, 4, 4, 1, 16, 16]))
    assert segment_entropy(p, 0, ArpoConfig(), 16) == pytest.approx(1.0)
    assert segment_entropy(p, 1, ArpoConfig(), 16) == pytest.approx(2.0)
    assert branch_probability(1.0, ArpoConfig()) == pytest.approx(0.7)
    assert branch_probability(-5.0, ArpoConfig()) == 0.0 and branch_probability(5.0, ArpoConfig()) == 1.0


def test_arpo_plan_branches_after_tool_calls_within_the_global_budget():
    roots = [traj(f"r{j}", [0, 0, 0], topk_logprobs_TK=topk_row([1] * 10)) for j in range(2)]
    # p = 1: every draw branches; beam 3 -> 2 per rollout per round; 2 roots, 2 tool rounds; 5 slots
    cfg = ArpoConfig(total_rollouts=7, base_prob=1.0, beam_size=3)
    plan = plan_arpo([group(*roots)], cfg, vocab_size=16)
    # round 1: r0 +2 at turn 1 (column 5), r1 +2; round 2: r0 +1 (the last slot) at turn 2 (column 8)
    assert [(b.trajectory.episode_id, b.at_token, b.n) for b in plan.branches] == [
        ("r0", 5, 2),
        ("r1", 5, 2),
        ("r0", 8, 1),
    ]
    assert plan.fresh == {}
    never = plan_arpo([group(*roots)], ArpoConfig(total_rollouts=7, base_prob=0.0, entropy_weight=0.0), vocab_size=16)
    assert never.branches == [] and never.fresh == {"t-g": 5}
    assert plan_arpo([group(*roots)], ArpoConfig(total_rollouts=7, base_prob=0.5, seed=3), 16, step=1) == plan_arpo(
        [group(*roots)], ArpoConfig(total_rollouts=7, base_prob=0.5, seed=3), 16, step=1
    )


# ----------------------------------------------------------------------------------------------
# VinePPO


def test_vineppo_monte_carlo_values_from_continuations():
    groups = vine_tree()  # main m: P P a a o a a, R 1; V(s_0) = 0.5 at column 2, V(s_1) = 0.75 at column 5
    out = run("vineppo", groups)
    # turn 0: V(s_1) - V(s_0) = 0.25; turn 1: R - V(s_1) = 0.25; continuations are value samples only
    assert out.advantages_BT[0].tolist() == pytest.approx([0, 0, 0.25, 0.25, 0, 0.25, 0.25])
    assert out.loss_mask_BT[1:].sum() == 0 and out.loss_mask_BT[0].tolist() == [0, 0, 1, 1, 0, 1, 1]
    # with train_on_branches a continuation's own tokens get R - mean of its siblings: y3 (R 0) -> 0 - 1 = -1
    out = run("vineppo", groups, train_on_branches=True)
    assert out.advantages_BT[8].tolist() == pytest.approx([0, 0, 0, 0, 0, -1, -1])


def test_vineppo_plan_forks_every_turn_start():
    m = traj("m", [0, 0, 1])
    plan = CREDITS.get("vineppo").branch_planner([group(m)], CREDITS.get("vineppo").config(), 16, 0)
    assert [(b.at_token, b.n) for b in plan.branches] == [(2, 4), (5, 4), (8, 4)] and plan.fresh == {}


def test_branch_credit_leaves_an_orphan_branch_in_the_loss():
    # the parent was dropped (infra error): nobody else trains on the copied prefix, so the child keeps it
    p = traj("p", [1], turn_len=4)
    c = traj("c", [0], turn_len=4, parent=p, branch_point=4)
    groups = [group(c, traj("q", [1], turn_len=4))]
    out = run("cbpo", groups)
    assert out.loss_mask_BT.tolist() == inputs(groups).loss_mask_BT.tolist()
    assert torch.all(out.advantages_BT[0, 2:] != 0)

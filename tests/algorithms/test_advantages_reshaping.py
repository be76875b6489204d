"""Advantage estimators that reweight or reshape a group baseline's advantages: hand-computed vectors
for difficulty and tail reweighting, DCPO's per-prompt history and the token-level reshapers."""

from __future__ import annotations

import math

import pytest
import torch
from advantages_helpers import assert_tensor, run

from agent_rl.algorithms import ADVANTAGES
from agent_rl.algorithms.registry import AdvantageInputs

# ---------------------------------------------------------------------------------------------
# Difficulty / tail reweighting (hand-computed test vectors).


def one_group(rewards: list[float]) -> AdvantageInputs:
    n = len(rewards)
    return AdvantageInputs(
        rewards_B=torch.tensor(rewards), loss_mask_BT=torch.ones(n, 2), group_index_B=torch.zeros(n, dtype=torch.long)
    )


@pytest.mark.parametrize(
    "rewards, expected",
    [
        # sorted (0.2, 0.5, 0.5, 1): w = (0.05, 0.15, 0.15, 0.65), mean 0.25, A = 4*(w - 0.25)
        ([0.2, 0.5, 0.5, 1.0], [-0.8, -0.4, -0.4, 1.6]),
        # binary, p = 1/4: MaxRL (b - p)/p
        ([0, 0, 1, 0], [-1, -1, 3, -1]),
        # sorted (0, 0.1, 0.3, 0.9): w = (0, 0.1/3, 0.1/3 + 0.1, 0.1333 + 0.6), mean 0.225
        ([0.9, 0.1, 0.3, 0.0], [2.0333333, -0.7666667, -0.3666667, -0.9]),
    ],
)
def test_tailrl_spec_vectors(rewards, expected):
    assert_tensor(run("tailrl", one_group(rewards)).advantages_BT[:, 0], expected, atol=1e-6)


def test_tailrl_maps_rewards_to_unit_interval():
    # rewards in [0, 10] with reward_max 10 give the same as (0, 0, 1, 0)
    out = run("tailrl", one_group([0, 0, 10, 0]), reward_max=10.0)
    assert out.advantages_BT[:, 0].tolist() == pytest.approx([-1, -1, 3, -1])


def test_da3po_spec_vector():
    # G = 16, 2 correct: mean 0.125, std = sqrt(16/15 * 0.125 * 0.875) = 0.3415650
    # GRPO: correct 0.875/0.3415650 = 2.5617, wrong -0.125/0.3415650 = -0.3660; p = 0.125 < 0.5 -> x2
    out = run("da3po", one_group([1.0, 1.0] + [0.0] * 14))
    adv = out.advantages_BT[:, 0]
    assert adv[0].item() == pytest.approx(5.1235, abs=1e-3)
    assert adv[2].item() == pytest.approx(-0.3660, abs=1e-3)
    # an easy prompt (p = 14/16 >= 0.5) is not amplified: correct rows keep 0.125/0.3415650 = 0.3660
    easy = run("da3po", one_group([1.0] * 14 + [0.0, 0.0])).advantages_BT[:, 0]
    assert easy[0].item() == pytest.approx(0.3660, abs=1e-3)


def test_mmpo_spec_vector():
    # 8 samples, 2 correct: p = 0.25, w = 1 + 2*0.75 + 3*0.75^2 + 4*0.75^3 = 5.875
    # correct 5.875*0.75 = 4.40625, wrong -5.875*0.25 = -1.46875
    out = run("mmpo", one_group([1.0, 1.0] + [0.0] * 6))
    assert out.advantages_BT[:, 0].tolist() == pytest.approx([4.40625] * 2 + [-1.46875] * 6)
    # p = 0.5: w = 1 + 1 + 0.75 + 0.5 = 3.25 -> +-1.625
    assert run("mmpo", one_group([1.0, 0.0])).advantages_BT[:, 0].tolist() == pytest.approx([1.625, -1.625])


# ---------------------------------------------------------------------------------------------
# Per-prompt history (DCPO).


def test_dcpo_smooth_history_and_state_dict():
    entry = ADVANTAGES.get("dcpo_smooth")
    state = entry.make_state()
    mask = torch.ones(2, 3)

    def step(rewards):
        x = AdvantageInputs(
            rewards_B=torch.tensor(rewards),
            loss_mask_BT=mask,
            group_index_B=torch.tensor([0, 0]),
            task_ids_B=["a", "a"],
            state=state,
        )
        return entry.fn(x, entry.config()).advantages_BT[:, 0].tolist()

    # step 1 (i = 1): rewards (1, 0): std sqrt(0.5) -> A_new = A_total = +-0.5/0.7071078 = +-0.7071058
    assert step([1.0, 0.0]) == pytest.approx([0.7071058, -0.7071058], abs=1e-6)
    # step 2 (i = 2): rewards (1, 1): A_new = 0; history (1, 0, 1, 1): mean 0.75, std 0.5
    # A_total = 0.25/0.500001 = 0.5; S_new = 0.5*0 + 0.5*0.5 = 0.25 = S_total -> 0.25 (not 0)
    assert step([1.0, 1.0]) == pytest.approx([0.25, 0.25], abs=1e-5)
    saved = state.state_dict()
    # step 3 (i = 3): rewards (0, 0): history (1, 0, 1, 1, 0, 0): mean 0.5, std sqrt(1.5/5) = 0.5477226
    # A_total = -0.5/0.5477236 = -0.9128692; S_new = A_total/3 = -0.3042897, S_total = 2/3 A_total -> S_new
    assert step([0.0, 0.0]) == pytest.approx([-0.3042897] * 2, abs=1e-5)
    restored = entry.make_state()
    restored.load_state_dict(saved)
    state = restored
    assert step([0.0, 0.0]) == pytest.approx([-0.3042897] * 2, abs=1e-5)


# ---------------------------------------------------------------------------------------------
# Token-level reshaping. Two rows of one group, rewards (1, 0): GRPO A = +-0.5/(0.7071068 + 1e-6)
A_POS = 0.5 / (math.sqrt(0.5) + 1e-6)


def pair(mask, **fields) -> AdvantageInputs:
    return AdvantageInputs(
        rewards_B=torch.tensor([1.0, 0.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0, 0]), **fields
    )


def test_a3po_amplifies_low_prob_positive_and_high_prob_negative_tokens():
    mask = torch.tensor([[0.0, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    logp = torch.tensor([[-9.0, -0.1, -2.0, -0.5, -3.0, -1.0], [-9.0, -0.1, -2.0, -0.5, -3.0, -1.0]])
    # 20% of 5 tokens = 1 per polarity: row 0's lowest (-3.0, col 4), row 1's highest (-0.1, col 1)
    out = run("a3po", pair(mask, old_logprobs_BT=logp, step=0))
    expected = [[0, A_POS, A_POS, A_POS, 2 * A_POS, A_POS], [0, -2 * A_POS, -A_POS, -A_POS, -A_POS, -A_POS]]
    assert_tensor(out.advantages_BT, expected, atol=1e-6)
    # the multiplier decays: max(2 - 0.005*100, 1) = 1.5, and is 1 from step 200 on
    assert run("a3po", pair(mask, old_logprobs_BT=logp, step=100)).advantages_BT[0, 4].item() == pytest.approx(
        1.5 * A_POS, abs=1e-6
    )
    assert run("a3po", pair(mask, old_logprobs_BT=logp, step=300)).metrics["adv/a3po_multiplier"] == 1.0


def test_erpo_hand_example():
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 1]])
    ref = torch.zeros(2, 3)
    old = torch.tensor([[5.0, 0.2, 0.0], [5.0, 0.0, -0.2]])  # drift s = old - ref on the loss tokens
    ent = torch.tensor([[7.0, 1.0, 1.0], [7.0, 1.0, 1.0]])
    out = run("erpo", pair(mask, old_logprobs_BT=old, ref_logprobs_BT=ref, entropy_BT=ent), num_buckets=1, eta=0.2)
    # one bucket: s = (0.2, 0, 0, -0.2), std sqrt(0.08/3) = 0.1632993 -> z = (1.2247449, 0, 0, -1.2247449)
    # B = H sign(A) z = (1.2247, 0 | 0, 1.2247); std of B = sqrt(4*0.6124^2/3) = 0.7071068 -> Psi = (1.7320508, 0 | 0, 1.7320508)
    # C = A + 0.2 Psi = (A + 0.3464102, A | -A, -A + 0.3464102), A = 0.7071058
    c = torch.tensor([A_POS + 0.3464102, A_POS, -A_POS, -A_POS + 0.3464102], dtype=torch.float64)
    final = (c - c.mean()) / (c.std() + 1e-6)  # normalized over the group's 4 tokens
    assert out.advantages_BT[:, 1:].flatten().tolist() == pytest.approx(final.tolist(), abs=1e-5)
    assert final.tolist() == pytest.approx([1.0472, 0.6351, -1.0472, -0.6351], abs=1e-3)


def test_erpo_all_equal_group_stays_zero():
    mask = torch.ones(2, 3)
    x = AdvantageInputs(
        rewards_B=torch.tensor([1.0, 1.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0, 0]),
        old_logprobs_BT=torch.randn(2, 3), ref_logprobs_BT=torch.randn(2, 3), entropy_BT=torch.rand(2, 3),
    )  # fmt: skip
    assert torch.equal(run("erpo", x).advantages_BT, torch.zeros(2, 3))


def test_fipo_hand_example():
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 1]])
    rollout = torch.zeros(2, 3)
    # Delta = old - rollout; row 1's middle token has ratio e^3 > 10 and is left out of F
    old = torch.tensor([[0.1, 0.0, 0.2], [-0.1, 3.0, 0.0]])
    out = run("fipo", pair(mask, old_logprobs_BT=old, rollout_logprobs_BT=rollout), gamma=0.5)
    # row 0: F3 = 0.2, F2 = 0 + 0.5*0.2 = 0.1, F1 = 0.1 + 0.5*0.1 = 0.15
    #        f = clip(exp(F), 1, 1.2) = (1.1618342, 1.1051709, 1.2)
    # row 1: F3 = 0, F2 = 0 (masked out by the cap), F1 = -0.1 -> f = 1 everywhere
    expected = [[A_POS * math.exp(0.15), A_POS * math.exp(0.1), A_POS * 1.2], [-A_POS] * 3]
    assert_tensor(out.advantages_BT, expected, atol=1e-6)


def test_opsa_hand_example():
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 1]])
    ent = torch.tensor([[50.0, 1.0, 3.0], [50.0, 2.0, 2.0]])
    # mean entropy over the 4 loss tokens = 2 -> A = -H/2
    out = run("opsa", pair(mask, entropy_BT=ent))
    assert_tensor(out.advantages_BT, [[0, -0.5, -1.5], [0, -1.0, -1.0]], atol=1e-6)
    raw = run("opsa", pair(mask, entropy_BT=ent), normalize=False, coef=0.1)
    assert_tensor(raw.advantages_BT, [[0, -0.1, -0.3], [0, -0.2, -0.2]], atol=1e-6)


def test_sc_grpo_hand_example():
    mask = torch.tensor([[0.0, 1, 1, 1], [0, 1, 1, 1]])
    old = torch.zeros(2, 4)
    teacher = torch.tensor([[9.0, 0.0, math.log(2), math.log(4)], [9.0, 0.0, 0.0, 0.0]])
    # D = r ln r - r + 1: r = 1 -> 0; r = 2 -> 2 ln 2 - 1 = 0.3862944; r = 4 -> 4 ln 4 - 3 = 2.5451774
    # f = D / max D = (0, 0.1517760, 1); row 1 has D = 0 everywhere -> f = 1 (plain GRPO)
    out = run("sc_grpo", pair(mask, old_logprobs_BT=old, teacher_logprobs_BT=teacher))
    d2, d4 = 2 * math.log(2) - 1, 4 * math.log(4) - 3
    assert_tensor(out.advantages_BT, [[0, 0, A_POS * d2 / d4, A_POS], [0, -A_POS, -A_POS, -A_POS]], atol=1e-6)

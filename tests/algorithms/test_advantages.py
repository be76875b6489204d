"""Advantage estimators: hand-computed examples of the group-baseline and token-return ones, plus
invariances over the whole registry (the reweighting and token-reshaping ones: ``test_advantages_reshaping.py``).

Unless a comment says otherwise the shared example is 6 rows in 3 groups; column 0 is the prompt
(mask 0) and row 3 has a tool observation at column 2:

    row  group  reward  mask           L
    0    0      3       0 1 1 1 0      3
    1    0      0       0 1 1 0 0      2
    2    0      0       0 1 1 1 1      4
    3    1      1       0 1 0 1 0      2
    4    1      1       0 1 1 1 1      4
    5    2      0.5     0 1 0 0 0      1

The expected numbers of grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, remax, passk
and gae also match verl 0.9.1 (``verl.trainer.ppo.core_algos``) on the same inputs (checked
outside CI, max |diff| < 1e-5; verl is not a test dependency).
"""

from __future__ import annotations

import math

import pytest
import torch
from advantages_helpers import assert_tensor, run

from agent_rl.algorithms import ADVANTAGES
from agent_rl.algorithms.registry import AdvantageInputs

MASK = torch.tensor(
    [[0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 1, 0, 1, 0], [0, 1, 1, 1, 1], [0, 1, 0, 0, 0]],
    dtype=torch.float32,
)
REWARDS = torch.tensor([3.0, 0.0, 0.0, 1.0, 1.0, 0.5])
GROUPS = torch.tensor([0, 0, 0, 1, 1, 2])

# optional AdvantageInputs field of each ``needs`` name
NEED_FIELDS = {
    "values": "values_BT",
    "greedy_rewards": "greedy_rewards_B",
    "task_ids": "task_ids_B",
    "entropy": "entropy_BT",
    "ref_logprobs": "ref_logprobs_BT",
    "old_logprobs": "old_logprobs_BT",
    "rollout_logprobs": "rollout_logprobs_BT",
    "teacher_logprobs": "teacher_logprobs_BT",
    "prm_logprobs": "prm_logprobs_BT",
}


def example(**extra) -> AdvantageInputs:
    return AdvantageInputs(rewards_B=REWARDS, loss_mask_BT=MASK, group_index_B=GROUPS, **extra)


def per_row(adv_BT: torch.Tensor) -> list[float]:
    """The advantage of each row, checking that it is constant over the row's loss tokens and 0 elsewhere."""
    rows = []
    for a_T, m_T in zip(adv_BT, MASK, strict=True):
        vals = a_T[m_T > 0]
        assert torch.allclose(vals, vals[0].expand_as(vals)), a_T
        assert torch.all(a_T[m_T == 0] == 0)
        rows.append(float(vals[0]))
    return rows


# ---------------------------------------------------------------------------------------------
# Group-baseline estimators on the shared example.


def test_grpo_hand_example():
    # group 0: mean 1, deviations (2, -1, -1), unbiased var (4+1+1)/2 = 3, std sqrt(3) = 1.7320508
    #   -> 2/(1.7320508+1e-6) = 1.1546999, -1/1.7320518 = -0.5773500
    # group 1: equal rewards -> 0; group 2 (one sample): mean 0, std 1 -> 0.5/(1+1e-6) = 0.4999995
    out = run("grpo", example())
    assert per_row(out.advantages_BT) == pytest.approx([1.1546999, -0.57735, -0.57735, 0.0, 0.0, 0.4999995], abs=1e-6)
    # of the 3 groups, group 1 (2 equal rewards); group 2's one sample has no spread to lose
    assert out.metrics["adv/zero_std_groups_frac"] == pytest.approx(1 / 3)


def test_grpo_equal_rewards_give_zero_advantages():
    x = AdvantageInputs(
        rewards_B=torch.full((6,), 0.7), loss_mask_BT=MASK, group_index_B=torch.tensor([0, 0, 0, 1, 1, 1])
    )
    assert torch.equal(run("grpo", x).advantages_BT, torch.zeros_like(MASK))


def test_dr_grpo_hand_example():
    # r - mean: group 0 (2, -1, -1), group 1 (0, 0), group of one keeps r = 0.5
    assert per_row(run("dr_grpo", example()).advantages_BT) == pytest.approx([2, -1, -1, 0, 0, 0.5])


def test_outcome_estimators_subtract_the_in_reward_kl():
    # kl.placement in_reward: row 0's penalty sums to 0.2 + 0.3 = 0.5 (0.9 sits off the mask), so the
    # group's rewards (1, 0) become (0.5, 0) and Dr. GRPO gives (0.25, -0.25)
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 1]])
    x = AdvantageInputs(
        rewards_B=torch.tensor([1.0, 0.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0, 0]),
        kl_penalty_BT=torch.tensor([[0.9, 0.2, 0.3], [0.9, 0.0, 0.0]]),
    )  # fmt: skip
    assert_tensor(run("dr_grpo", x).advantages_BT, [[0, 0.25, 0.25], [0, -0.25, -0.25]])


def test_rloo_hand_example():
    # r_i - mean of the others: 3 - 0 = 3, 0 - (3+0)/2 = -1.5 (twice); group 1: 0; alone: r = 0.5
    assert per_row(run("rloo", example()).advantages_BT) == pytest.approx([3, -1.5, -1.5, 0, 0, 0.5])


def test_kimi_hand_example():
    # r - group mean with the row itself in the mean; a group of one gets 0
    assert per_row(run("kimi", example()).advantages_BT) == pytest.approx([2, -1, -1, 0, 0, 0])


def test_laguna_loo_hand_example():
    # weights w = L = (3, 2, 4) in group 0
    # row 0: b = (2*0 + 4*0)/(2+4) = 0      -> 3
    # row 1: b = (3*3 + 4*0)/(3+4) = 9/7    -> -1.2857143
    # row 2: b = (3*3 + 2*0)/(3+2) = 1.8    -> -1.8
    # group 1: b = 1 -> 0; row 5 alone: b = 0 -> 0.5
    assert per_row(run("laguna_loo", example()).advantages_BT) == pytest.approx([3, -9 / 7, -1.8, 0, 0, 0.5], abs=1e-6)
    # length_power 0: plain leave-one-out mean, as rloo
    assert per_row(run("laguna_loo", example(), length_power=0.0).advantages_BT) == pytest.approx(
        [3, -1.5, -1.5, 0, 0, 0.5]
    )


def test_passk_hand_example():
    # group 0: only the best row: (3 - 0)/(sqrt(3) + 1e-6) = 1.7320498; group 1 tie at the top: 0;
    # group of one: 0 (verl raises there)
    assert per_row(run("passk", example()).advantages_BT) == pytest.approx([1.7320498, 0, 0, 0, 0, 0], abs=1e-6)
    assert per_row(run("passk", example(), norm_by_std=False).advantages_BT) == pytest.approx([3, 0, 0, 0, 0, 0])


def test_reinforce_pp_baseline_hand_example():
    # centered c = (2, -1, -1 | 0, 0 | 0.5) on L = (3, 2, 4 | 2, 4 | 1) tokens: 16 tokens
    # token mean = (6 - 2 - 4 + 0.5)/16 = 0.03125
    # sum of squares = 3*4 + 2*1 + 4*1 + 0.25 = 18.25; var = (18.25 - 16*0.03125^2)/15 = 1.215625
    # row 0: (2 - 0.03125)/sqrt(1.215625 + 1e-8) = 1.7856270
    std = math.sqrt(1.215625 + 1e-8)
    expected = [(c - 0.03125) / std for c in (2, -1, -1, 0, 0, 0.5)]
    assert per_row(run("reinforce_pp_baseline", example()).advantages_BT) == pytest.approx(expected, abs=1e-6)
    assert expected[0] == pytest.approx(1.7856270, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Token-return estimators.


def test_reinforce_pp_kl_to_go_and_batch_whitening():
    #             P    a     a     a
    mask = torch.tensor([[0.0, 1, 1, 1], [0, 1, 1, 0]])
    kl = torch.tensor([[9.0, 0.1, 0.2, 0.3], [9.0, 0.0, 0.0, 9.0]])  # 9 = garbage off the mask
    x = AdvantageInputs(
        rewards_B=torch.tensor([1.0, 0.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0, 1]), kl_penalty_BT=kl
    )
    out = run("reinforce_pp", x)
    # row 0 token rewards (-0.1, -0.2, 1 - 0.3): returns to go (0.4, 0.5, 0.7); row 1 returns (0, 0)
    assert_tensor(out.returns_BT, [[0, 0.4, 0.5, 0.7], [0, 0, 0, 0]])
    # 5 tokens: mean 1.6/5 = 0.32; var = (0.16 + 0.25 + 0.49 - 5*0.32^2)/4 = 0.388/4 = 0.097
    std = math.sqrt(0.097 + 1e-8)
    expected = [[0, (0.4 - 0.32) / std, (0.5 - 0.32) / std, (0.7 - 0.32) / std], [0, -0.32 / std, -0.32 / std, 0]]
    assert_tensor(out.advantages_BT, expected, atol=1e-6)


def test_reinforce_pp_discount():
    # gamma 0.5 on tokens a a a with reward 1 at the end: returns (0.25, 0.5, 1)
    mask = torch.tensor([[0.0, 1, 1, 1]])
    x = AdvantageInputs(rewards_B=torch.tensor([1.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0]))
    assert_tensor(run("reinforce_pp", x, gamma=0.5).returns_BT, [[0, 0.25, 0.5, 1.0]])


def test_remax_hand_example():
    # A = r - r_greedy on every token: (1 - 0.5, 0 - 0.5); with an in-reward KL the return to go
    # of row 0 is (1 - 0.1 - 0.2, 1 - 0.2) = (0.7, 0.8)
    mask = torch.tensor([[0.0, 1, 1], [0, 1, 1]])
    greedy = torch.tensor([0.5, 0.5])
    x = AdvantageInputs(
        rewards_B=torch.tensor([1.0, 0.0]),
        loss_mask_BT=mask,
        group_index_B=torch.tensor([0, 0]),
        greedy_rewards_B=greedy,
    )
    assert_tensor(run("remax", x).advantages_BT, [[0, 0.5, 0.5], [0, -0.5, -0.5]])
    x.kl_penalty_BT = torch.tensor([[0.0, 0.1, 0.2], [0, 0, 0]])
    out = run("remax", x)
    assert_tensor(out.returns_BT, [[0, 0.7, 0.8], [0, 0, 0]])
    assert_tensor(out.advantages_BT, [[0, 0.2, 0.3], [0, -0.5, -0.5]])


#                          P    a    a    a
GAE_MASK = torch.tensor([[0.0, 1, 1, 1]])
GAE_VALUES = torch.tensor([[9.0, 0.5, 0.6, 0.7]])


def gae_inputs(mask=GAE_MASK, values=GAE_VALUES) -> AdvantageInputs:
    return AdvantageInputs(
        rewards_B=torch.tensor([1.0]), loss_mask_BT=mask, group_index_B=torch.tensor([0]), values_BT=values
    )


def test_gae_hand_example():
    # gamma 1, lam 0.5, reward 1 on the last token:
    # t3: delta = 1 - 0.7 = 0.3                      A = 0.3
    # t2: delta = 0.7 - 0.6 = 0.1                    A = 0.1 + 0.5*0.3  = 0.25
    # t1: delta = 0.6 - 0.5 = 0.1                    A = 0.1 + 0.5*0.25 = 0.225
    # returns = A + V = (0.725, 0.85, 1.0)
    out = run("gae", gae_inputs(), gamma=1.0, lam=0.5, whiten=False)
    assert_tensor(out.advantages_BT, [[0, 0.225, 0.25, 0.3]], atol=1e-6)
    assert_tensor(out.returns_BT, [[0, 0.725, 0.85, 1.0]], atol=1e-6)
    # whitened over the 3 tokens: mean 0.775/3, unbiased std 0.0381881
    w = run("gae", gae_inputs(), gamma=1.0, lam=0.5).advantages_BT[0, 1:]
    mean = 0.775 / 3
    std = math.sqrt(((0.225 - mean) ** 2 + (0.25 - mean) ** 2 + (0.3 - mean) ** 2) / 2 + 1e-8)
    assert w.tolist() == pytest.approx([(a - mean) / std for a in (0.225, 0.25, 0.3)], abs=1e-5)


def test_gae_skips_observation_tokens():
    #                           P    a    obs  a
    mask = torch.tensor([[0.0, 1, 0, 1]])
    values = torch.tensor([[9.0, 0.5, 99.0, 0.7]])
    # t3: A = 0.3; t1: delta = 0.7 - 0.5 = 0.2, A = 0.2 + 0.5*0.3 = 0.35 (the observation is skipped)
    out = run("gae", gae_inputs(mask, values), gamma=1.0, lam=0.5, whiten=False)
    assert_tensor(out.advantages_BT, [[0, 0.35, 0, 0.3]], atol=1e-6)


def test_gae_vapo_and_orz_options():
    # VAPO length-adaptive lambda: alpha 0.5, L = 3 -> lam = 1 - 1/1.5 = 1/3
    # t2: 0.1 + 0.3/3 = 0.2; t1: 0.1 + 0.2/3 = 0.1666667
    out = run("gae", gae_inputs(), gamma=1.0, length_adaptive_alpha=0.5, whiten=False)
    assert_tensor(out.advantages_BT, [[0, 0.1 + 0.2 / 3, 0.2, 0.3]], atol=1e-6)
    assert out.metrics["adv/gae_lambda_mean"] == pytest.approx(1 / 3)
    # decoupled critic lambda 1: the critic's returns are the Monte Carlo return 1 on every token
    out = run("gae", gae_inputs(), gamma=1.0, lam=0.5, critic_lam=1.0, whiten=False)
    assert_tensor(out.returns_BT, [[0, 1.0, 1.0, 1.0]], atol=1e-6)
    assert_tensor(out.advantages_BT, [[0, 0.225, 0.25, 0.3]], atol=1e-6)
    # Open-Reasoner-Zero gamma = lam = 1: A_t = r - V_t
    out = run("gae", gae_inputs(), gamma=1.0, lam=1.0, whiten=False)
    assert_tensor(out.advantages_BT, [[0, 0.5, 0.4, 0.3]], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Invariances over every registered estimator.


def full_inputs(B: int = 8, T: int = 7, seed: int = 0, extreme: bool = False) -> AdvantageInputs:
    """Random inputs with every optional field; groups of 2 (with odd B the last row is alone), a prompt column."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    mask[:, 0] = 0
    mask[:, 1] = 1
    scale = 1e3 if extreme else 1.0
    lp = 80.0 if extreme else 3.0
    rewards = (
        (torch.rand(B, generator=g) > 0.5).float() if not extreme else (torch.rand(B, generator=g) - 0.5) * 2 * scale
    )
    rewards[2:4] = rewards[2]  # an all-equal group
    return AdvantageInputs(
        rewards_B=rewards,
        loss_mask_BT=mask,
        group_index_B=torch.arange(B) // 2,
        values_BT=torch.randn(B, T, generator=g) * scale,
        old_logprobs_BT=-torch.rand(B, T, generator=g) * lp,
        rollout_logprobs_BT=-torch.rand(B, T, generator=g) * lp,
        ref_logprobs_BT=-torch.rand(B, T, generator=g) * lp,
        entropy_BT=torch.rand(B, T, generator=g) * (12.0 if extreme else 2.0),
        teacher_logprobs_BT=-torch.rand(B, T, generator=g) * lp,
        prm_logprobs_BT=-torch.rand(B, T, generator=g) * lp,
        greedy_rewards_B=torch.randn(B, generator=g) * scale,
        task_ids_B=[f"task{i // 2}" for i in range(B)],
        kl_penalty_BT=torch.randn(B, T, generator=g) * (100.0 if extreme else 0.01),
        step=3,
        extras={"privileged_values": torch.randn(B, T, generator=g) * scale},  # redippo's second critic
    )


def padded(x: AdvantageInputs, extra: int = 3) -> AdvantageInputs:
    """``x`` with ``extra`` padding columns and garbage wherever the loss mask is 0."""
    g = torch.Generator().manual_seed(123)
    out = AdvantageInputs(**vars(x))
    B = x.loss_mask_BT.shape[0]
    out.loss_mask_BT = torch.cat([x.loss_mask_BT, torch.zeros(B, extra)], 1)
    for name, value in vars(x).items():
        if name.endswith("_BT") and name != "loss_mask_BT" and value is not None:
            garbage = (
                -torch.rand(value.shape, generator=g) * 50
                if "logprobs" in name
                else torch.randn(value.shape, generator=g) * 50
            )
            dirty = torch.where(x.loss_mask_BT > 0, value, garbage)
            setattr(out, name, torch.cat([dirty, -torch.rand(B, extra, generator=g) * 50], 1))
    for name, value in x.extras.items():  # per-token extras are padded the same way
        if isinstance(value, torch.Tensor) and value.shape == x.loss_mask_BT.shape:
            dirty = torch.where(x.loss_mask_BT > 0, value, torch.randn(value.shape, generator=g) * 50)
            out.extras = {**out.extras, name: torch.cat([dirty, torch.randn(B, extra, generator=g) * 50], 1)}
    out.state = None
    return out


def skip_if_run_bound(key: str) -> None:
    """An estimator whose state acts on the run (``bind``) needs the run; its own tests check it."""
    if hasattr(ADVANTAGES.get(key).make_state(), "bind"):
        pytest.skip(f"'{key}' needs a bound run")


@pytest.mark.parametrize("key", ADVANTAGES.names())
def test_padding_and_masked_positions_change_nothing(key):
    skip_if_run_bound(key)
    x = full_inputs(seed=1)
    base = run(key, x)
    pad = run(key, padded(x))
    T = x.loss_mask_BT.shape[1]
    assert torch.allclose(pad.advantages_BT[:, :T], base.advantages_BT, atol=1e-5)
    assert torch.all(pad.advantages_BT[:, T:] == 0)
    assert torch.all(base.advantages_BT[x.loss_mask_BT == 0] == 0)
    assert base.advantages_BT.abs().sum() > 0  # not vacuous
    if base.returns_BT is not None:
        assert torch.allclose(pad.returns_BT[:, :T], base.returns_BT, atol=1e-5)


@pytest.mark.parametrize("key", ADVANTAGES.names())
def test_finite_on_extreme_inputs(key):
    skip_if_run_bound(key)
    for seed in range(3):
        out = run(key, full_inputs(B=9, T=11, seed=seed, extreme=True))
        assert out.advantages_BT.dtype == torch.float32
        assert torch.isfinite(out.advantages_BT).all(), key
        if out.returns_BT is not None:
            assert torch.isfinite(out.returns_BT).all()
        assert all(math.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("key, need", [(e.name, n) for e in ADVANTAGES.entries() for n in sorted(e.needs)])
def test_missing_needed_input_raises(key, need):
    x = full_inputs()
    if need in NEED_FIELDS:
        setattr(x, NEED_FIELDS[need], None)
    else:  # a need outside the built-in fields arrives in extras
        x.extras = {k: v for k, v in x.extras.items() if k != need}
    with pytest.raises(ValueError, match=NEED_FIELDS.get(need, need)):
        run(key, x)


def test_stateful_estimator_without_state_raises():
    entry = ADVANTAGES.get("dcpo_smooth")
    with pytest.raises(ValueError, match="state"):
        entry.fn(full_inputs(), entry.config())

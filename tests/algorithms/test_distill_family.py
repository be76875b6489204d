"""Catalog III distillation family: i_sdpo, powered_opd, g_opd, anti_sd (losses) and rlsd (advantage),
hand-computed; their declared needs make the plan build a teacher (and a reference for g_opd)."""

from __future__ import annotations

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad, t

from agent_rl.algorithms.advantages.distill_credit import RlsdConfig, rlsd
from agent_rl.algorithms.losses.distill_family import (
    AntiSdConfig,
    GOpdConfig,
    ISdpoConfig,
    PoweredOpdConfig,
    anti_sd,
    box_cox_reward,
    g_opd,
    i_sdpo,
    powered_opd,
)
from agent_rl.algorithms.registry import AdvantageInputs

LN2 = math.log(2)


def test_i_sdpo_routes_all_fail_groups_to_distillation_and_the_rest_to_grpo():
    #  row  group reward  route      pi   q    A (given)
    #  0    0     0       distill    .25  .5   -      -> d/dlogp = -(log q - log pi)/N = -ln2/4
    #  1    0     0       distill    .2   .1   -      -> +ln2/4
    #  2    1     1       grpo       .5   .5   1      -> -A r / N = -1/4 (r = 1)
    #  3    1     0       grpo       .5   .5   -1     -> +1/4
    lp = [[math.log(0.25)], [math.log(0.2)], [math.log(0.5)], [math.log(0.5)]]
    x = inputs(lp, lp, [[0.0], [0.0], [1.0], [-1.0]], teacher_logprobs_BT=logs([[0.5], [0.1], [0.5], [0.5]]),
               rewards_B=[0.0, 0.0, 1.0, 0.0], group_index_B=torch.tensor([0, 0, 1, 1]))  # fmt: skip
    _, grad = loss_and_grad(i_sdpo, ISdpoConfig(), x)
    assert_close(grad, [[-LN2 / 4], [LN2 / 4], [-0.25], [0.25]])
    out = i_sdpo(x, ISdpoConfig())
    assert out.metrics["loss/distill_rows_frac"] == 0.5
    # a graded reward below the threshold counts as a failure: both groups distil
    x.rewards_B = t([0.0, 0.0, 0.5, 0.0])
    _, grad = loss_and_grad(i_sdpo, ISdpoConfig(), x)
    assert_close(grad, [[-LN2 / 4], [LN2 / 4], [0.0], [0.0]])


def test_powered_opd_box_cox_reward():
    # alpha .5, q .25, pi .64: r = (.5 - .8) / .5 = -.6 -> d/dlogp = -r = .6 (one token)
    assert float(box_cox_reward(t(math.log(0.25)), t(math.log(0.64)), 0.5)) == pytest.approx(-0.6)
    x = inputs([[math.log(0.64)]], [[math.log(0.64)]], [[0.0]], teacher_logprobs_BT=[[math.log(0.25)]])
    _, grad = loss_and_grad(powered_opd, PoweredOpdConfig(alpha=0.5), x)
    assert_close(grad, [[0.6]])
    # alpha -> 0: the log-ratio of vanilla OPD; alpha 1: q - pi, bounded by 1/alpha
    assert float(box_cox_reward(t(math.log(0.25)), t(math.log(0.64)), 1e-7)) == pytest.approx(
        math.log(0.25 / 0.64), abs=1e-5
    )
    assert float(box_cox_reward(t(math.log(1e-30)), t(0.0), 1.0)) == pytest.approx(-1.0)


def test_g_opd_reward_scale_and_reference():
    #  q .5, ref .25, pi .4, lambda 2: A = 2 ln(.5/.25) - ln(.4/.25) = 2 ln2 - ln1.6 -> d/dlogp = -A
    x = inputs([[math.log(0.4)]], [[math.log(0.4)]], [[0.0]], teacher_logprobs_BT=[[math.log(0.5)]],
               ref_logprobs_BT=[[math.log(0.25)]])  # fmt: skip
    _, grad = loss_and_grad(g_opd, GOpdConfig(reward_scale=2.0), x)
    assert_close(grad, [[-(2 * LN2 - math.log(1.6))]])
    # lambda 1 is standard OPD whatever the reference: A = log q - log pi
    _, grad = loss_and_grad(g_opd, GOpdConfig(reward_scale=1.0), x)
    assert_close(grad, [[-math.log(0.5 / 0.4)]])


def test_anti_sd_ascends_the_gated_jsd():
    #  buckets      c0   c1   tail
    #  student pi   .5   .2   .3
    #  teacher q    .3   .6   .1     H(q) = .898 nats
    p, q = [0.5, 0.2, 0.3], [0.3, 0.6, 0.1]
    m = [(a + b) / 2 for a, b in zip(p, q)]
    jsd = 0.5 * sum(a * math.log(a / c) for a, c in zip(p, m)) + 0.5 * sum(b * math.log(b / c) for b, c in zip(q, m))
    h_q = -sum(b * math.log(b) for b in q)
    lp = [[math.log(0.5)]]
    x = inputs(lp, lp, [[0.0]], teacher_logprobs_BT=lp, topk_logprobs_BTK=t([[logs([0.5, 0.2])]], requires_grad=True),
               extras={"teacher_topk": t([[logs([0.3, 0.6])]])})  # fmt: skip
    out = anti_sd(x, AntiSdConfig(topk=2, rl_coef=0.0, coef=0.1, entropy_min=0.5))
    assert float(out.loss_BT.detach()) == pytest.approx(-0.1 * jsd, abs=1e-9)
    assert out.metrics["loss/teacher_entropy"] == pytest.approx(h_q, abs=1e-9)
    # ascent: one gradient step on the loss moves the student away from the teacher
    (g,) = torch.autograd.grad(out.loss_BT.sum(), x.topk_logprobs_BTK)
    assert float(g[0, 0, 1]) > 0  # the teacher's favourite c1 loses student probability
    # the gate closes where the teacher's entropy is below entropy_min
    out = anti_sd(x, AntiSdConfig(topk=2, rl_coef=0.0, entropy_min=1.0))
    assert float(out.loss_BT.detach()) == 0.0 and out.metrics["loss/gate_frac"] == 0.0


def test_rlsd_teacher_sets_the_magnitude_and_the_reward_the_sign():
    #  group rewards [1, 0]: GRPO A = [+.7071, -.7071] (std of [1, 0] = .7071, eps ~ 0)
    #  row 0 (A > 0): delta = log q - log pi_old = [ln2, -ln2] -> w = [2, .5]
    #  row 1 (A < 0): delta = [ln2, -ln 4] -> w = exp(-delta) = [.5, 4 -> clipped 2]
    old = t([[math.log(0.25), math.log(0.5)], [math.log(0.25), math.log(0.5)]])
    teacher = t([[math.log(0.5), math.log(0.25)], [math.log(0.5), math.log(0.125)]])
    x = AdvantageInputs(rewards_B=t([1.0, 0.0]), loss_mask_BT=torch.ones(2, 2), group_index_B=torch.tensor([0, 0]),
                        old_logprobs_BT=old, teacher_logprobs_BT=teacher)  # fmt: skip
    a = 1 / math.sqrt(2) / (1 + 1e-6 * math.sqrt(2))
    out = rlsd(x, RlsdConfig())
    assert_close(out.advantages_BT, [[2 * a, 0.5 * a], [-0.5 * a, -2 * a]], atol=1e-6)


@pytest.mark.parametrize(
    "overrides,builds,precompute",
    [
        (["algorithm.loss.name=i_sdpo"], {"teacher"}, ("teacher_logprobs",)),
        (["algorithm.loss.name=g_opd"], {"teacher", "reference"}, ("ref_logprobs", "teacher_logprobs")),
        (["algorithm.loss.name=anti_sd"], {"teacher"}, ("teacher_topk",)),
        (["algorithm.advantage.name=rlsd"], {"teacher"}, ("old_logprobs", "teacher_logprobs")),
    ],
)
def test_the_plan_builds_what_they_declare(overrides, builds, precompute):
    from test_plan import plan_of

    plan = plan_of(*overrides)
    assert builds <= set(plan.builds)
    assert set(precompute) <= set(plan.precompute)
    assert plan.teacher is not None


def test_beta_opsd_rewards_and_return_to_go():
    from agent_rl.algorithms.losses.distill_family import BetaOpsdConfig, beta_opsd

    #  token   q    ref   pi    r = (1/beta)(ln q/ref) - ln(pi/ref), beta 2
    #  0       .5   .25   .4    .5 ln2 - ln 1.6
    #  1       .5   .25   .5    .5 ln2 - ln 2
    #  return-to-go: A = [r0 + r1, r1]; d/dlogp = -A / 2 (token mean)
    x = inputs([logs([0.4, 0.5])], [logs([0.4, 0.5])], [[0.0, 0.0]], teacher_logprobs_BT=[logs([0.5, 0.5])],
               ref_logprobs_BT=[logs([0.25, 0.25])])  # fmt: skip
    r0, r1 = 0.5 * LN2 - math.log(1.6), -0.5 * LN2
    _, grad = loss_and_grad(beta_opsd, BetaOpsdConfig(beta=2.0), x)
    assert_close(grad, [[-(r0 + r1) / 2, -r1 / 2]])
    # beta 1 without return-to-go is vanilla OPSD's sampled-token advantage log q - log pi
    _, grad = loss_and_grad(beta_opsd, BetaOpsdConfig(beta=1.0, return_to_go=False), x)
    assert_close(grad, [[-math.log(0.5 / 0.4) / 2, 0.0]])

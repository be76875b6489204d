"""The objective's plan: what each entry declares decides what the run builds and computes.

The last test defines an objective with a need that no built-in objective has, in this file only:
its need, its advantage and its loss are three registrations, and the trainer runs them unchanged.
"""

from __future__ import annotations

import pytest
import torch

from agent_rl.algorithms import ADVANTAGES, POLICY_LOSSES
from agent_rl.algorithms.needs import NEEDS, register_need, unregister_need
from agent_rl.algorithms.plan import make_plan
from agent_rl.algorithms.registry import AdvantageOutput, LossOutput
from agent_rl.config import load_config
from tests.test_trainer import trainer


def plan_of(*overrides: str):
    cfg = load_config(None, list(overrides))
    return make_plan(cfg.algorithm, cfg.rollout)


def test_grpo_builds_nothing_and_computes_nothing_before_the_update():
    plan = plan_of()
    assert plan.builds == frozenset() and plan.precompute == () and plan.engine_options == {}
    assert plan.advantage.name == "grpo" and plan.branch_planner is None and plan.teacher is None


@pytest.mark.parametrize(
    "overrides, builds, precompute",
    [
        (["algorithm.kl.coef=0.1"], {"reference"}, ("ref_logprobs",)),  # GRPO's KL in the loss
        (["algorithm.kl.coef=0.1", "algorithm.kl.placement=in_reward"], {"reference"}, ("ref_logprobs",)),
        (["algorithm.advantage.name=gae"], {"critic"}, ("values",)),
        (["algorithm.credit.name=turn_gae"], {"critic"}, ("values",)),
        (["algorithm.advantage.name=remax"], {"greedy_rollouts"}, ("greedy_rewards",)),
        (["algorithm.loss.name=sdpo"], {"teacher"}, ("teacher_logprobs",)),
        (["algorithm.advantage.name=erpo"], {"reference"}, ("old_logprobs", "entropy", "ref_logprobs")),
    ],
)
def test_declared_needs_decide_what_is_built_and_computed(overrides, builds, precompute):
    plan = plan_of(*overrides)
    assert plan.builds == frozenset(builds) and plan.precompute == precompute


def test_kl_placement_is_read_in_one_place():
    in_loss, in_reward = (
        plan_of("algorithm.kl.coef=0.1"),
        plan_of("algorithm.kl.coef=0.1", "algorithm.kl.placement=in_reward"),
    )
    assert in_loss.reward_kl is None and in_loss.parts.loss_options().kl_coef == 0.1
    assert in_reward.reward_kl is not None and in_reward.parts.loss_options().kl_coef == 0.0


def test_teacher_engine_options_loss_corrections_and_branch_planner_come_from_declarations():
    assert plan_of("algorithm.loss.name=sdpo").teacher.ema_decay == 0.99
    assert plan_of("algorithm.loss.name=opsd").teacher.ema_decay == 0.0
    assert plan_of("algorithm.advantage.name=sc_grpo").teacher.ema_decay == 0.0  # no declaration: the policy itself
    interrupt = plan_of(
        "algorithm.filters=[{name: forced_interruption, think_budget_tokens: 5, answer_budget_tokens: 3}]"
    )
    assert (
        interrupt.engine_options["think_budget_tokens"] == 5 and interrupt.engine_options["answer_budget_tokens"] == 3
    )
    assert plan_of("algorithm.filters=[{name: popo_replay}]").parts.options.rollout_is is not None
    vine = plan_of("algorithm.credit.name=vineppo")
    assert vine.branch_planner is vine.advantage.branch_planner is not None and vine.advantage_state_key == "credit"


def test_a_need_the_rollout_does_not_record_fails_before_any_model_loads():
    with pytest.raises(ValueError, match="credit 'arpo' needs the sampler's top-k.*set rollout.topk"):
        plan_of("algorithm.credit.name=arpo")
    assert plan_of("algorithm.credit.name=arpo", "rollout.topk=4").needs >= {"topk"}


def test_an_objective_without_the_filter_it_reads_fails_before_any_model_loads():
    with pytest.raises(
        ValueError,
        match=r"policy_loss 'omni_opd' reads the work of the filter omni_opd: add \{name: omni_opd\} to algorithm.filters",
    ):
        plan_of("algorithm.loss.name=omni_opd")
    plan = plan_of(
        "algorithm.loss.name=omni_opd",
        "algorithm.filters=[{name: omni_opd, teacher_path: 'openai:http://127.0.0.1:9/v1'}]",
    )
    assert [e.name for e, _ in plan.filters] == ["omni_opd"]


def test_an_unknown_need_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown needs \\['no_such_need'\\]"):
        ADVANTAGES.register("test_bad_need", needs={"no_such_need"})(lambda x, cfg: None)
    assert "test_bad_need" not in ADVANTAGES


@pytest.fixture
def response_length_objective():
    """A need no built-in objective has (each row's count of generated tokens), an advantage and a
    loss that read it, registered for one test."""
    seen: dict[str, list] = {"advantage": [], "loss": []}
    register_need(
        "response_tokens_B", "generated tokens of each row", compute=lambda ctx: ctx.batch.loss_mask_BT.sum(-1).float()
    )

    def shorter_is_better(x, cfg):
        length_B = x.extras["response_tokens_B"]
        seen["advantage"].append((length_B, x.loss_mask_BT.sum(-1).float()))
        return AdvantageOutput(advantages_BT=-(length_B - length_B.mean())[:, None] * x.loss_mask_BT)

    def length_weighted_pg(x, cfg):
        seen["loss"].append((x.extras["response_tokens_B"], x.loss_mask_BT.sum(-1).float()))
        return LossOutput(
            loss_BT=-x.advantages_BT * x.logprobs_BT / x.extras["response_tokens_B"].clamp(min=1)[:, None]
        )

    with (
        ADVANTAGES.registered(
            "test_shorter", shorter_is_better, needs={"response_tokens_B"}, status="paper", evidence="a test objective"
        ),
        POLICY_LOSSES.registered(
            "test_length_pg",
            length_weighted_pg,
            needs={"response_tokens_B"},
            status="paper",
            evidence="a test objective",
        ),
    ):
        yield seen
    unregister_need("response_tokens_B")


def test_an_objective_with_a_new_need_runs_in_the_trainer_unchanged(
    tmp_path, tiny_model_dir, response_length_objective
):
    t = trainer(
        tmp_path, tiny_model_dir, "algorithm.advantage.name=test_shorter", "algorithm.loss.name=test_length_pg",
        "learner.micro_batch_size=1",
    )  # fmt: skip
    assert t.plan.precompute == ("response_tokens_B",) and t.plan.builds == frozenset()
    metrics = t.step(0)
    assert "train/loss" in metrics
    ((adv_len_B, adv_mask_len_B),) = response_length_objective["advantage"]
    torch.testing.assert_close(adv_len_B, adv_mask_len_B, rtol=0, atol=0)
    # the loss sees the same values, one micro-batch (row) at a time
    losses = response_length_objective["loss"]
    assert len(losses) == adv_len_B.numel()
    for row, (len_B, mask_len_B) in enumerate(losses):
        assert len_B.tolist() == [adv_len_B[row].item()] and len_B.tolist() == mask_len_B.tolist()
    assert "response_tokens_B" in NEEDS

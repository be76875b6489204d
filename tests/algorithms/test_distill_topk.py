"""Top-K distribution matching of sdpo / opsd: hand-computed KLs, an unsampled token gains
probability, and the whole trainer path (teacher top-K ids -> the learner's candidates)."""

from __future__ import annotations

import math

import pytest
import torch
from losses_helpers import assert_close, logs, t

from agent_rl.algorithms.losses import OpsdConfig, SdpoConfig, opsd, sdpo
from agent_rl.algorithms.losses.distill_topk import topk_divergence
from agent_rl.algorithms.registry import LossInputs


def test_reverse_and_forward_kl_over_top_k_with_tail():
    #  candidates   c0   c1   tail
    #  student pi   .5   .2   .3
    #  teacher q    .3   .6   .1
    s = t([[logs([0.5, 0.2])]], requires_grad=True)
    q = t([[logs([0.3, 0.6])]])
    rev = topk_divergence(s, q, "reverse")
    assert float(rev.detach()) == pytest.approx(
        0.5 * math.log(5 / 3) + 0.2 * math.log(1 / 3) + 0.3 * math.log(3), abs=1e-6
    )
    # d/d log pi_k = pi_k (log(pi_k/q_k) - log(pi_tail/q_tail)), the tail's mass = 1 - sum pi_k
    (g,) = torch.autograd.grad(rev.sum(), s)
    tail = math.log(3)
    assert_close(g, [[[0.5 * (math.log(5 / 3) - tail), 0.2 * (math.log(1 / 3) - tail)]]])
    fwd = topk_divergence(s, q, "forward")
    assert float(fwd.detach()) == pytest.approx(
        0.3 * math.log(3 / 5) + 0.6 * math.log(3) + 0.1 * math.log(1 / 3), abs=1e-6
    )
    # no tail: both renormalized over the K ids: pi' = [5/7, 2/7], q' = [1/3, 2/3]
    fwd_renorm = topk_divergence(s, q, "forward", tail=False)
    assert float(fwd_renorm.detach()) == pytest.approx(
        (1 / 3) * math.log((1 / 3) / (5 / 7)) + (2 / 3) * math.log((2 / 3) / (2 / 7)), abs=1e-6
    )
    # a padded candidate (mask 0) counts for nothing and gives no nan
    s3 = t([[logs([0.5, 0.2, 0.1])]], requires_grad=True)
    q3 = t([[logs([0.3, 0.6, 0.05])]])
    masked = topk_divergence(s3, q3, "reverse", mask_BTK=torch.tensor([[[1, 1, 0]]]))
    (g3,) = torch.autograd.grad(masked.sum(), s3)
    assert (
        float(masked.detach()) == pytest.approx(float(rev.detach()), abs=1e-6)
        and not g3.isnan().any()
        and float(g3[0, 0, 2]) == 0.0
    )


@pytest.mark.parametrize("divergence", ["forward", "reverse"])
def test_top_k_raises_a_token_the_student_never_sampled(divergence):
    # the student sampled token 0 (its favourite); the teacher prefers token 3, which was never sampled.
    # The sampled-token estimator only moves logp(token 0); top-K matching raises p(3) itself.
    z = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0], requires_grad=True)  # student logits, one position
    teacher_logp = torch.log_softmax(torch.tensor([1.0, -1.0, -1.0, 3.0, -2.0]), -1)
    ids = teacher_logp.topk(2).indices  # [3, 0]
    opt = torch.optim.SGD([z], lr=0.5)
    p3_before = float(torch.softmax(z.detach(), -1)[3])
    for _ in range(5):
        logp = torch.log_softmax(z, -1)
        x = LossInputs(
            logprobs_BT=logp[0].view(1, 1),
            old_logprobs_BT=logp[0].detach().view(1, 1),
            advantages_BT=torch.zeros(1, 1),
            loss_mask_BT=torch.ones(1, 1),
            teacher_logprobs_BT=teacher_logp[0].view(1, 1),
            topk_logprobs_BTK=logp[ids].view(1, 1, 2),
            extras={"teacher_topk": teacher_logp[ids].view(1, 1, 2)},
        )
        loss = opsd(x, OpsdConfig(estimator="topk", topk=2, divergence=divergence)).loss_BT.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(torch.softmax(z.detach(), -1)[3]) > p3_before + 0.05
    # the sampled-token estimator on the same rollout: token 3 gains only through the softmax
    # coupling; its logit gets the same push as every unsampled token
    z2 = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0], requires_grad=True)
    logp = torch.log_softmax(z2, -1)
    x = LossInputs(logprobs_BT=logp[0].view(1, 1), old_logprobs_BT=logp[0].detach().view(1, 1),
                   advantages_BT=torch.zeros(1, 1), loss_mask_BT=torch.ones(1, 1),
                   teacher_logprobs_BT=teacher_logp[0].view(1, 1))  # fmt: skip
    opsd(x, OpsdConfig()).loss_BT.sum().backward()
    g = z2.grad
    assert float(g[3]) / float(torch.softmax(z2, -1)[3].detach()) == pytest.approx(
        float(g[1]) / float(torch.softmax(z2, -1)[1].detach())
    )


def test_top_k_config_declares_its_needs_and_teacher():
    from agent_rl.algorithms import POLICY_LOSSES
    from agent_rl.algorithms.losses.distill import ema_teacher

    entry = POLICY_LOSSES.get("sdpo")
    assert entry.needs_for(SdpoConfig()) == {"teacher_logprobs"}
    assert entry.needs_for(SdpoConfig(estimator="topk")) == {"teacher_logprobs", "teacher_topk"}
    assert ema_teacher(SdpoConfig(estimator="topk", topk=7)).topk == 7 and ema_teacher(SdpoConfig()).topk == 0
    x = LossInputs(logprobs_BT=torch.zeros(1, 1), old_logprobs_BT=torch.zeros(1, 1), advantages_BT=torch.zeros(1, 1),
                   loss_mask_BT=torch.ones(1, 1), teacher_logprobs_BT=torch.zeros(1, 1))  # fmt: skip
    with pytest.raises(ValueError, match="topk_logprobs_BTK"):
        sdpo(x, SdpoConfig(estimator="topk"))


def test_trainer_scores_the_policy_at_the_teachers_top_k(tmp_path, tiny_model_dir):
    from agent_rl.rollout.batching import make_batch
    from agent_rl.rollout.groups import group_trajectories
    from tests.test_trainer import trainer

    tr = trainer(
        tmp_path, tiny_model_dir, "algorithm.loss.name=opsd", "algorithm.loss.estimator=topk", "algorithm.loss.topk=4"
    )
    assert tr.plan.teacher.topk == 4 and "teacher_topk" in tr.plan.precompute
    groups = group_trajectories(tr._rollout(0, 0, 2))
    batch = make_batch(groups, tr.components.tokenizer.pad_token_id)
    scores = tr.models["teacher"].teaching.scores(batch, groups)
    ids_BTK, top_BTK = batch.topk_ids_BTK, scores["teacher_topk"]
    assert ids_BTK.shape == (*batch.input_ids_BT.shape, 4)
    # the teacher's logprobs at its top-k ids are sorted and hold its sampled-token logprob's rank
    mask = batch.loss_mask_BT.bool()
    assert (top_BTK[mask][:, :-1] >= top_BTK[mask][:, 1:]).all()
    assert (scores["teacher_logprobs"][mask] <= top_BTK[mask][:, 0] + 1e-5).all()
    metrics = tr.step(1)
    assert "train/loss" in metrics or metrics.get("train/skipped") == 1.0
    if "train/loss" in metrics:
        assert metrics["loss/distill_kl"] >= 0.0

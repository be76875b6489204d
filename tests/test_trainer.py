"""The training loop with objectives that need extra inputs: reference model, teacher context."""

from __future__ import annotations

import torch

from agent_rl.config import load_config
from agent_rl.learner.logprobs import token_logprobs
from agent_rl.rollout.batching import make_batch
from agent_rl.rollout.groups import group_trajectories
from agent_rl.train.trainer import Trainer
from tests.conftest import ROOT

SMALL = [
    "sandbox.backend=process",
    "rollout.group_size=2",
    "rollout.max_new_tokens=12",
    "rollout.max_turns=2",
    "trainer.prompts_per_step=2",
    "trainer.eval_every=0",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


def trainer(tmp_path, tiny_model_dir, *overrides: str) -> Trainer:
    cfg = load_config(
        ROOT / "configs" / "quickstart.yaml",
        [f"model.path={tiny_model_dir}", f"run.root={tmp_path}", *SMALL, *overrides],
    )
    return Trainer(cfg, log=lambda *a: None)


def test_sdpo_teacher_sees_the_verified_solution(tmp_path, tiny_model_dir):
    t = trainer(tmp_path, tiny_model_dir, "algorithm.loss.name=sdpo")
    assert t.models["teacher"].teacher is not None and t.models["teacher"].teacher.decay == 0.99
    trajectories = t._rollout(0, 0, 2)
    groups = group_trajectories(trajectories)
    batch = make_batch(groups, t.components.tokenizer.pad_token_id)
    teacher_BT = t.models["teacher"].teaching.logprobs(batch, groups)
    # by hand for row 0: its prompt messages + a user message with the context, then its tokens
    traj = groups[0].trajectories_G[0]
    renderer = t.components.renderer
    k, ctx = renderer.context_insertion(traj.info["prompt_messages"], traj.info["tools"], traj.info["teacher_context"])
    assert traj.info["teacher_context"].startswith("Verified solution: ")
    assert renderer.decode(ctx).startswith("<|im_start|>user\nVerified solution: ")
    row = traj.token_ids_T[:k] + ctx + traj.token_ids_T[k:]
    with torch.no_grad():
        logp = torch.log_softmax(t.models["teacher"].teacher.model(input_ids=torch.tensor([row])).logits[0].float(), -1)
    n = len(traj.token_ids_T)
    expected = [0.0] + [float(logp[j - 1, row[j]]) for j in (i if i < k else i + len(ctx) for i in range(1, n))]
    mask = batch.loss_mask_BT[0, :n].bool()
    torch.testing.assert_close(teacher_BT[0, :n][mask], torch.tensor(expected)[mask], atol=1e-4, rtol=0)
    # the student without the context differs from the teacher on those tokens
    student_BT, _ = token_logprobs(t.components.model, batch)
    assert (student_BT[0, :n][mask] - teacher_BT[0, :n][mask]).abs().max() > 1e-3
    metrics = t.step(1)
    assert "train/loss" in metrics or metrics.get("train/skipped") == 1.0
    assert t.models["teacher"].teacher.num_updates == (1 if "train/loss" in metrics else 0)


def test_kl_in_loss_uses_a_frozen_reference(tmp_path, tiny_model_dir):
    # an entropy bonus moves the policy even when every reward is 0 (the untrained model)
    t = trainer(
        tmp_path, tiny_model_dir, "algorithm.kl.coef=0.1", "algorithm.loss_options.entropy_coef=0.1", "learner.lr=0.01"
    )
    assert t.models["reference"].model is not None
    before = {k: v.clone() for k, v in t.models["reference"].model.state_dict().items()}
    metrics = [t.step(step) for step in range(2)]
    after = t.models["reference"].model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the policy moved away from the reference
    assert any(not torch.equal(p, after[k]) for k, p in t.components.model.state_dict().items())
    assert metrics[0]["loss/kl_ref"] < 1e-6 < metrics[1]["loss/kl_ref"]  # identical at first, then apart


def test_topk_candidates_recorded_and_recomputed(tmp_path, tiny_model_dir):
    import pytest

    with pytest.raises(ValueError, match="set rollout.topk"):
        trainer(tmp_path, tiny_model_dir, "algorithm.loss.name=sis")
    t = trainer(tmp_path, tiny_model_dir, "algorithm.loss.name=sis", "rollout.topk=4")
    trajectories = t._rollout(0, 0, 2)
    batch = make_batch(group_trajectories(trajectories), t.components.tokenizer.pad_token_id)
    assert batch.topk_ids_BTK.shape[-1] == 4
    # the sampled token's logprob is at most the best candidate's; masks agree with the loss mask
    mask_BT = batch.loss_mask_BT.bool()
    assert torch.equal(batch.topk_mask_BTK.any(-1) & mask_BT, mask_BT)
    best_BT = batch.rollout_topk_logprobs_BTK[..., 0]
    assert (batch.rollout_logprobs_BT[mask_BT] <= best_BT[mask_BT] + 1e-6).all()
    with torch.no_grad():
        _, _, topk_BTK = token_logprobs(t.components.model, batch, topk_ids_BTK=batch.topk_ids_BTK)
    m = batch.topk_mask_BTK.bool()
    assert (topk_BTK[m] - batch.rollout_topk_logprobs_BTK[m]).abs().max() <= 1e-4
    metrics = t.step(1)
    assert "train/loss" in metrics or metrics.get("train/skipped") == 1.0


def test_popo_replay_switches_on_its_importance_correction(tmp_path, tiny_model_dir):
    t = trainer(tmp_path, tiny_model_dir, "algorithm.filters=[{name: popo_replay, correction_cap: 3.0}]")
    ris = t.parts.loss_options().rollout_is
    assert (ris.level, ris.mode, ris.threshold) == ("token", "truncate", 3.0)
    # a user's own rollout_is wins
    t = trainer(
        tmp_path,
        tiny_model_dir,
        "algorithm.filters=[{name: popo_replay}]",
        "algorithm.loss_options.rollout_is={level: sequence, threshold: 5.0}",
    )
    assert t.parts.loss_options().rollout_is.level == "sequence"

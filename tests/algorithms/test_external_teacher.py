"""A separate model teaches (teacher_path): frozen, the student's tokenizer, no privileged context
unless asked; a teacher with another tokenizer is refused at start."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from agent_rl.learner.teacher import FrozenTeacher, check_same_tokenizer


class Vocab:
    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return self.vocab


def test_a_teacher_with_another_tokenizer_is_refused():
    check_same_tokenizer(Vocab({"a": 0, "b": 1}), Vocab({"a": 0, "b": 1}), "t")
    with pytest.raises(ValueError, match="teacher t: its tokenizer differs from the student's"):
        check_same_tokenizer(Vocab({"a": 0, "b": 1}), Vocab({"a": 0, "c": 1}), "t")


def test_g_opd_with_a_second_tiny_model_as_teacher(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from agent_rl.algorithms.losses.distill_family import GOpdConfig, self_teacher
    from agent_rl.rollout.batching import make_batch
    from agent_rl.rollout.groups import group_trajectories
    from tests.test_trainer import trainer

    assert self_teacher(GOpdConfig(teacher_path="x")).context is False and self_teacher(GOpdConfig()).context is True
    teacher_dir = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, teacher_dir)  # the same tokenizer, other weights
    model = AutoModelForCausalLM.from_pretrained(teacher_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(teacher_dir)
    t = trainer(tmp_path / "run", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path={teacher_dir}")
    assert isinstance(t.teacher, FrozenTeacher) and "reference" in t.plan.builds
    before = {k: v.clone() for k, v in t.teacher.model.state_dict().items()}
    groups = group_trajectories(t._rollout(0, 0, 2))
    batch = make_batch(groups, t.components.tokenizer.pad_token_id)
    teacher_BT = t.teaching.logprobs(batch, groups)
    # no context: the teacher scores the student's own rows, token for token
    with torch.no_grad():
        logits = t.teacher.model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    expected = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    mask = batch.loss_mask_BT[:, 1:].bool()
    torch.testing.assert_close(teacher_BT[:, 1:][mask], expected[mask], atol=1e-4, rtol=0)
    t.step(1)
    assert all(torch.equal(v, before[k]) for k, v in t.teacher.model.state_dict().items())  # frozen
    # two teachers at once, weighted 3:1: their mixture
    from agent_rl.learner.teacher import TeacherMixture

    t2 = trainer(tmp_path / "run2", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path=[{teacher_dir}, {tiny_model_dir}]",
                 "algorithm.loss.teacher_weights=[3, 1]")  # fmt: skip
    assert isinstance(t2.teacher, TeacherMixture) and t2.teacher.weights == [0.75, 0.25]
    mixed = t2.teaching.logprobs(batch, groups)
    with torch.no_grad():
        student = t2.teacher.teachers[1].model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    second = torch.log_softmax(student[:, :-1].float(), -1).gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(mixed[:, 1:][mask], torch.log(0.75 * expected.exp() + 0.25 * second.exp())[mask], atol=1e-4, rtol=0)


def test_a_mixture_of_teachers_by_hand():
    from agent_rl.learner.teacher import TeacherMixture

    class Fixed(torch.nn.Module):  # a "model" whose next-token distribution is always probs
        def __init__(self, probs):
            super().__init__()
            self.logits = torch.log(torch.tensor(probs))

        def forward(self, input_ids, attention_mask):
            return type("Out", (), {"logits": self.logits.expand(*input_ids.shape, -1)})()

    #  token 1 of a 2-token row: q1 = .5, q2 = .1; weights 3:1 -> q = .75 * .5 + .25 * .1 = .4
    mix = TeacherMixture([FrozenTeacher(Fixed([0.5, 0.5]), "a"), FrozenTeacher(Fixed([0.9, 0.1]), "b")], [3.0, 1.0])
    ids, mask, pos = torch.tensor([[0, 1]]), torch.ones(1, 2), torch.tensor([[0, 1]])
    out = mix.logprobs(ids, mask, pos, temperature=1.0)
    assert out[0, 0] == 0.0 and float(out[0, 1]) == pytest.approx(math.log(0.4), abs=1e-6)
    with pytest.raises(ValueError, match="one teacher"):
        mix.logprobs(ids, mask, pos, 1.0, topk=2)
    with pytest.raises(ValueError, match="one per teacher"):
        TeacherMixture([FrozenTeacher(Fixed([0.5, 0.5]), "a")], [1.0, 2.0])

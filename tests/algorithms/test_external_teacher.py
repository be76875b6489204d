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


class Fixed(torch.nn.Module):
    """A "model" whose next-token distribution is always ``probs``."""

    def __init__(self, probs):
        super().__init__()
        self.logits = torch.log(torch.tensor(probs))

    def forward(self, input_ids, attention_mask):
        return type("Out", (), {"logits": self.logits.expand(*input_ids.shape, -1)})()


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
    t = trainer(
        tmp_path / "run", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path={teacher_dir}"
    )
    assert isinstance(t.models["teacher"].teacher, FrozenTeacher) and "reference" in t.plan.builds
    before = {k: v.clone() for k, v in t.models["teacher"].teacher.model.state_dict().items()}
    groups = group_trajectories(t._rollout(0, 0, 2))
    batch = make_batch(groups, t.components.tokenizer.pad_token_id)
    teacher_BT = t.models["teacher"].teaching.logprobs(batch, groups)
    # no context: the teacher scores the student's own rows, token for token
    with torch.no_grad():
        logits = (
            t.models["teacher"]
            .teacher.model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT)
            .logits
        )
    expected = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    mask = batch.loss_mask_BT[:, 1:].bool()
    torch.testing.assert_close(teacher_BT[:, 1:][mask], expected[mask], atol=1e-4, rtol=0)
    t.step(1)
    assert all(torch.equal(v, before[k]) for k, v in t.models["teacher"].teacher.model.state_dict().items())  # frozen
    # two teachers at once, weighted 3:1: their mixture
    from agent_rl.learner.teacher import TeacherMixture

    t2 = trainer(tmp_path / "run2", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path=[{teacher_dir}, {tiny_model_dir}]",
                 "algorithm.loss.teacher_weights=[3, 1]")  # fmt: skip
    assert isinstance(t2.models["teacher"].teacher, TeacherMixture) and t2.models["teacher"].teacher.weights == [
        0.75,
        0.25,
    ]
    mixed = t2.models["teacher"].teaching.logprobs(batch, groups)
    with torch.no_grad():
        student = (
            t2.models["teacher"]
            .teacher.teachers[1]
            .model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT)
            .logits
        )
    second = torch.log_softmax(student[:, :-1].float(), -1).gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(
        mixed[:, 1:][mask], torch.log(0.75 * expected.exp() + 0.25 * second.exp())[mask], atol=1e-4, rtol=0
    )


def test_a_mixture_of_teachers_by_hand():
    from agent_rl.learner.teacher import TeacherMixture

    #  token 1 of a 2-token row: q1 = .5, q2 = .1; weights 3:1 -> q = .75 * .5 + .25 * .1 = .4
    mix = TeacherMixture([FrozenTeacher(Fixed([0.5, 0.5]), "a"), FrozenTeacher(Fixed([0.9, 0.1]), "b")], [3.0, 1.0])
    ids, mask, pos = torch.tensor([[0, 1]]), torch.ones(1, 2), torch.tensor([[0, 1]])
    out = mix.logprobs(ids, mask, pos, temperature=1.0)
    assert out[0, 0] == 0.0 and float(out[0, 1]) == pytest.approx(math.log(0.4), abs=1e-6)
    with pytest.raises(ValueError, match="one teacher"):
        mix.logprobs(ids, mask, pos, 1.0, topk=2)
    with pytest.raises(ValueError, match="one per teacher"):
        TeacherMixture([FrozenTeacher(Fixed([0.5, 0.5]), "a")], [1.0, 2.0])


def test_routed_rows_are_scored_by_their_teacher_alone():
    """Per-task routing by hand: rows 0 and 1 routed to teachers 1 and 0, row 2 unrouted (the 3:1 mixture)."""
    from agent_rl.learner.teacher import TeacherMixture, teacher_logprobs

    mix = TeacherMixture(
        [FrozenTeacher(Fixed([0.5, 0.3, 0.2]), "a"), FrozenTeacher(Fixed([0.1, 0.6, 0.3]), "b")], [3.0, 1.0]
    )
    ids = torch.tensor([[0, 1, 2], [0, 2, 0], [0, 1, 1]])
    mask, pos = torch.ones(3, 3), torch.tensor([[0, 1, 2], [0, 1, -1], [0, 1, 2]])
    out = teacher_logprobs(mix, ids, mask, pos, 1.0, route_B=[1, 0, None])
    expected = torch.log(torch.tensor([
        [1.0, 0.6, 0.3],  # teacher b alone (position 0: no teacher position, 0)
        [1.0, 0.2, 1.0],  # teacher a alone; the padded position stays 0
        [1.0, 0.75 * 0.3 + 0.25 * 0.6, 0.75 * 0.3 + 0.25 * 0.6],  # the mixture: q = .75 q_a + .25 q_b
    ]))  # fmt: skip
    assert torch.equal(out[:2], expected[:2].float())  # routed rows: exactly their teacher's
    torch.testing.assert_close(out[2], expected[2].float(), atol=1e-6, rtol=0)
    # top-K when every row is routed: each row's top-2 is its own teacher's
    lp, top_ids, top_lp = teacher_logprobs(mix, ids[:2], mask[:2], pos[:2], 1.0, topk=2, route_B=[1, 0])
    assert top_ids[0, 1].tolist() == [1, 2] and top_ids[1, 1].tolist() == [0, 1]
    assert torch.equal(top_lp[0, 1], torch.log(torch.tensor([0.6, 0.3]))) and torch.equal(lp, out[:2])
    with pytest.raises(ValueError, match="one teacher per row"):
        teacher_logprobs(mix, ids, mask, pos, 1.0, topk=2, route_B=[1, 0, None])


def test_teachers_routed_per_task_in_the_trainer(tmp_path, tiny_model_dir):
    """Two tiny teachers routed by task_id prefix (the longest wins): each routed row's logprobs equal
    its teacher's exactly; a route that names no teacher is a config error."""
    import dataclasses

    from transformers import AutoModelForCausalLM

    from agent_rl.config import load_config
    from agent_rl.learner.teacher import (
        TeacherMixture,
        compute_teacher_logprobs,
        splice_teacher_context,
    )
    from agent_rl.rollout.batching import make_batch
    from agent_rl.rollout.groups import group_trajectories
    from tests.test_trainer import ROOT, trainer

    teacher_dir = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, teacher_dir)
    model = AutoModelForCausalLM.from_pretrained(teacher_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(teacher_dir)
    t = trainer(tmp_path / "run", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path=[{teacher_dir}, {tiny_model_dir}]",
                f"algorithm.loss.teacher_routes={{arith-: 0, zzz: {tiny_model_dir}}}")  # fmt: skip
    assert isinstance(t.models["teacher"].teacher, TeacherMixture) and t.plan.teacher.routes == (
        ("arith-", 0),
        ("zzz", 1),
    )  # a path names its index
    groups = group_trajectories(t._rollout(0, 0, 2))
    first = groups[0].trajectories_G[0].task_id  # this task goes to teacher 1, every other arith- task to teacher 0
    t.models["teacher"].teaching.spec = dataclasses.replace(
        t.models["teacher"].teaching.spec, routes=(("arith-", 0), (first, 1))
    )
    rows = [r for g in groups for r in g.trajectories_G]
    route_B = [t.models["teacher"].teaching.route(r) for r in rows]
    assert route_B == [1 if r.task_id == first else 0 for r in rows] and set(route_B) == {0, 1}
    batch = make_batch(groups, t.components.tokenizer.pad_token_id)
    out = t.models["teacher"].teaching.logprobs(batch, groups)
    B = len(rows)
    ids, mask, pos = splice_teacher_context(
        batch.input_ids_BT, batch.attention_mask_BT, [0] * B, [[]] * B, t.components.tokenizer.pad_token_id
    )
    for k in (0, 1):
        idx = torch.tensor([b for b in range(B) if route_B[b] == k])
        want = compute_teacher_logprobs(
            t.models["teacher"].teacher.teachers[k].model, ids[idx], mask[idx], pos[idx], 1.0
        )
        assert torch.equal(out[idx], want)  # exactly the routed teacher's logprobs
    with pytest.raises(Exception, match=r"teacher_routes\['x'\] = 5: name a teacher of teacher_path"):
        load_config(ROOT / "configs" / "quickstart.yaml", [f"model.path={tiny_model_dir}", "algorithm.loss.name=g_opd",
                    f"algorithm.loss.teacher_path=[{teacher_dir}]", "algorithm.loss.teacher_routes={x: 5}"])  # fmt: skip


def test_a_missing_teacher_directory_is_one_line(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    with pytest.raises(ValueError, match=rf"^algorithm.loss.teacher_path={tmp_path / 'nope'}: no such directory"):
        trainer(tmp_path, tiny_model_dir, f"algorithm.loss={{name: g_opd, teacher_path: {tmp_path / 'nope'}}}")

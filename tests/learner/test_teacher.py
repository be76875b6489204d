"""The self-distillation teacher hook: EMA weights and teacher logprobs over a spliced context,
on a tiny randomly initialised transformers Qwen2."""

import pytest
import torch

from agent_rl.learner.teacher import EmaTeacher, compute_teacher_logprobs, splice_teacher_context

transformers = pytest.importorskip("transformers")


def tiny_qwen2(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return transformers.Qwen2ForCausalLM(cfg).eval()


def direct_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, j] | ids[:, :j]) for j >= 1, 0 at j = 0 (one unpadded row)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros(ids.shape[0], 1), lp], 1)


def test_splice_positions():
    #  row 0:  P P a a a      insert [9, 9] at 2  ->  P P 9 9 a a a      positions 0 1 4 5 6
    #  row 1:  P a a pad pad  insert [8] at 1     ->  P 8 a a            positions 0 2 3 -1 -1
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    t_ids, t_attn, pos = splice_teacher_context(ids, attn, [2, 1], [[9, 9], [8]], pad_id=0)
    assert t_ids.tolist() == [[1, 2, 9, 9, 3, 4, 5], [6, 8, 7, 8, 0, 0, 0]]
    assert t_attn.tolist() == [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]
    assert pos.tolist() == [[0, 1, 4, 5, 6], [0, 2, 3, -1, -1]]
    with pytest.raises(ValueError, match="insert_at_B"):
        splice_teacher_context(ids, attn, [6, 1], [[9], [8]], pad_id=0)


def test_teacher_logprobs_match_a_direct_forward():
    model = tiny_qwen2(0)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    attn = torch.ones_like(ids)
    # empty context: the student's own logprobs
    t_ids, t_attn, pos = splice_teacher_context(ids, attn, [2], [[]], pad_id=0)
    assert torch.allclose(compute_teacher_logprobs(model, t_ids, t_attn, pos), direct_logprobs(model, ids), atol=1e-6)
    # context inserted after the prompt: the teacher's logprob of each student token in the spliced row
    t_ids, t_attn, pos = splice_teacher_context(ids, attn, [2], [[11, 12, 13]], pad_id=0)
    got = compute_teacher_logprobs(model, t_ids, t_attn, pos)
    spliced = direct_logprobs(model, torch.tensor([[3, 4, 11, 12, 13, 5, 6, 7]]))
    assert torch.allclose(got, spliced[:, [0, 1, 5, 6, 7]], atol=1e-6)
    assert not torch.allclose(got[:, 2:], direct_logprobs(model, ids)[:, 2:], atol=1e-3)


def test_teacher_logprobs_with_padding_rows():
    model = tiny_qwen2(1)
    ids = torch.tensor([[3, 4, 5, 6], [8, 9, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    t_ids, t_attn, pos = splice_teacher_context(ids, attn, [1, 1], [[20], [21, 22]], pad_id=0)
    got = compute_teacher_logprobs(model, t_ids, t_attn, pos)
    row1 = direct_logprobs(model, torch.tensor([[8, 21, 22, 9]]))
    assert torch.allclose(got[1, :2], row1[0, [0, 3]], atol=1e-5)
    assert got[1, 2:].tolist() == [0.0, 0.0]


def test_ema_teacher_update_and_state_dict():
    student = tiny_qwen2(2)
    teacher = EmaTeacher(student, decay=0.75)
    assert all(not p.requires_grad for p in teacher.model.parameters())
    before = {k: v.clone() for k, v in teacher.model.state_dict().items()}
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    teacher.update(student)
    # theta_T <- .75 theta_T + .25 (theta_T + 1) = theta_T + .25
    name, param = next(iter(teacher.model.named_parameters()))
    assert torch.allclose(param, before[name] + 0.25, atol=1e-6)
    assert teacher.num_updates == 1
    other = EmaTeacher(tiny_qwen2(3), decay=0.1)
    other.load_state_dict(teacher.state_dict())
    assert other.decay == 0.75 and other.num_updates == 1
    assert all(
        torch.equal(a, b) for a, b in zip(other.model.state_dict().values(), teacher.model.state_dict().values())
    )
    with pytest.raises(ValueError, match="decay"):
        EmaTeacher(student, decay=1.0)


def test_decay_zero_teacher_is_the_current_policy():
    student = tiny_qwen2(4)
    teacher = EmaTeacher(student, decay=0.0)
    with torch.no_grad():
        for p in student.parameters():
            p.mul_(0.5)
    teacher.update(student)
    assert all(torch.equal(a, b) for a, b in zip(teacher.model.parameters(), student.parameters()))

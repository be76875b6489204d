"""sdpo / opsd self-distillation losses, and the whole path with the learner's EMA teacher hook."""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, loss_and_grad

from agent_rl.algorithms.losses import OpsdConfig, SdpoConfig, opsd, sdpo
from agent_rl.algorithms.registry import LossInputs


@pytest.mark.parametrize("fn,cfg_cls", [(sdpo, SdpoConfig), (opsd, OpsdConfig)])
def test_self_distillation_sampled_token_reverse_kl(fn, cfg_cls):
    #  teacher ln[.5, .1], student ln[.25, .2] -> A_t = log q - log pi = [ln 2, -ln 2]
    #  L = -A logp = -.693147 * -1.386294 | .693147 * -1.609438 -> mean (.960906 - 1.115577) / 2 = -.077336
    #  grad = -A / 2 = [-.346574, .346574] (= (log pi - log q) / 2)
    x = inputs([logs([0.25, 0.2])], [logs([0.25, 0.2])], [[0.0, 0.0]], teacher_logprobs_BT=[logs([0.5, 0.1])])
    loss, grad = loss_and_grad(fn, cfg_cls(), x)
    ln2 = math.log(2)
    assert loss == pytest.approx((ln2 * math.log(4) - ln2 * math.log(5)) / 2, abs=1e-9)
    assert_close(grad, [[-ln2 / 2, ln2 / 2]])
    #  adv_clip .5: A = [.5, -.5] -> L (.5 ln 4 - .5 ln 5) / 2, grad [-.25, .25]
    loss, grad = loss_and_grad(fn, cfg_cls(adv_clip=0.5), x)
    assert loss == pytest.approx((0.5 * math.log(4) - 0.5 * math.log(5)) / 2, abs=1e-9)
    assert_close(grad, [[-0.25, 0.25]])


def test_self_distillation_plus_rl_term():
    # rl_coef adds ppo_clip on the given advantages: at r = 1 its gradient is -A / N
    x = inputs([logs([0.25, 0.2])], [logs([0.25, 0.2])], [[1.0, -2.0]], teacher_logprobs_BT=[logs([0.25, 0.2])])
    _, grad = loss_and_grad(sdpo, SdpoConfig(rl_coef=0.5), x)
    assert_close(grad, [[-0.25, 0.5]])


def test_teacher_defaults_and_missing_input():
    assert SdpoConfig().teacher_ema_decay == 0.99 and OpsdConfig().teacher_ema_decay == 0.0
    with pytest.raises(ValueError, match="teacher_logprobs_BT"):
        sdpo(inputs([[-1.0]], [[-1.0]], [[1.0]]), SdpoConfig())


def test_sdpo_with_ema_teacher_on_a_tiny_qwen2():
    transformers = pytest.importorskip("transformers")
    from agent_rl.learner.teacher import EmaTeacher, compute_teacher_logprobs, splice_teacher_context

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    student = transformers.Qwen2ForCausalLM(cfg)
    teacher = EmaTeacher(student, decay=0.5)
    #  P P a a | feedback f f inserted before the response for the teacher
    ids = torch.tensor([[5, 6, 7, 8]])
    attn = torch.ones_like(ids)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    t_ids, t_attn, pos = splice_teacher_context(ids, attn, [2], [[9, 10]], pad_id=0)
    teacher_lp = compute_teacher_logprobs(teacher.model, t_ids, t_attn, pos)
    logits = student(input_ids=ids, attention_mask=attn).logits
    logp = torch.cat(
        [torch.zeros(1, 1), torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)], 1
    )
    x = LossInputs(logprobs_BT=logp, old_logprobs_BT=logp.detach(), advantages_BT=torch.zeros_like(logp),
                   loss_mask_BT=mask, teacher_logprobs_BT=teacher_lp)  # fmt: skip
    loss = (sdpo(x, SdpoConfig()).loss_BT * mask).sum() / mask.sum()
    loss.backward()
    assert all(p.grad is None for p in teacher.model.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in student.parameters())

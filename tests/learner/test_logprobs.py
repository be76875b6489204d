"""Chunked logprobs / entropy / top-k equal the direct full-logits computation, values and gradients."""

from __future__ import annotations

import pytest
import torch

from agent_rl.core.types import TrainBatch
from agent_rl.learner.logprobs import direct_token_logprobs, token_logprobs
from agent_rl.models.loading import load_model


def random_batch(vocab: int, B: int = 3, T: int = 11, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    ids_BT = torch.randint(0, vocab, (B, T), generator=g)
    lengths_B = torch.tensor([T, T - 4, 5])[:B]
    attn_BT = (torch.arange(T)[None] < lengths_B[:, None]).long()
    zeros_BT = torch.zeros(B, T)
    return TrainBatch(
        input_ids_BT=ids_BT * attn_BT,
        attention_mask_BT=attn_BT,
        loss_mask_BT=attn_BT.clone(),
        position_ids_BT=torch.arange(T).expand(B, T).clone(),
        rollout_logprobs_BT=zeros_BT,
        old_logprobs_BT=None,
        rewards_B=torch.zeros(B),
        group_index_B=torch.zeros(B, dtype=torch.long),
        turn_index_BT=torch.zeros(B, T, dtype=torch.long),
        policy_version_B=torch.zeros(B, dtype=torch.long),
    )


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir), "float32", "cpu")


def grads(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_chunked_equals_direct_values_and_gradients(model, chunk):
    batch = random_batch(model.config.vocab_size)
    weights_BT = torch.rand(batch.input_ids_BT.shape, generator=torch.Generator().manual_seed(1))
    lp_BT, ent_BT = token_logprobs(model, batch, temperature=0.7, with_entropy=True, chunk_tokens=chunk)
    ref_lp_BT, ref_ent_BT = direct_token_logprobs(model, batch, temperature=0.7, with_entropy=True)
    torch.testing.assert_close(lp_BT, ref_lp_BT, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent_BT, ref_ent_BT, atol=1e-5, rtol=0)
    assert lp_BT[2, 5:].abs().sum() == 0 and lp_BT[:, 0].abs().sum() == 0  # padding and column 0
    # a loss mixing logprobs and entropy: identical parameter gradients (incl. the tied LM head)
    g = grads(model, (weights_BT * lp_BT).sum() + 0.3 * (weights_BT * ent_BT).sum())
    ref = grads(model, (weights_BT * ref_lp_BT).sum() + 0.3 * (weights_BT * ref_ent_BT).sum())
    assert g.keys() == ref.keys()
    for name in ref:
        torch.testing.assert_close(g[name], ref[name], atol=1e-5, rtol=1e-4, msg=name)


def test_topk_logprobs_and_gradients(model):
    batch = random_batch(model.config.vocab_size, seed=3)
    V, (B, T) = model.config.vocab_size, batch.input_ids_BT.shape
    topk_BTK = torch.randint(0, V, (B, T, 3), generator=torch.Generator().manual_seed(4))
    lp_BT, _, tk_BTK = token_logprobs(model, batch, topk_ids_BTK=topk_BTK, chunk_tokens=5)
    logits_BTV = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT).logits
    logp_BTV = torch.log_softmax(logits_BTV.float(), -1)
    # position t holds the distribution that predicted token t (made at t-1)
    expected_BTK = torch.cat([torch.zeros(B, 1, 3), logp_BTV[:, :-1].gather(-1, topk_BTK[:, 1:])], dim=1)
    valid_BT1 = torch.cat([torch.zeros(B, 1), batch.attention_mask_BT[:, 1:].float()], dim=1)[..., None]
    torch.testing.assert_close(tk_BTK, expected_BTK * valid_BT1, atol=1e-5, rtol=0)
    g = grads(model, tk_BTK.sum() + lp_BT.sum())
    ref = grads(model, (expected_BTK * valid_BT1).sum() + direct_token_logprobs(model, batch)[0].sum())
    for name in ref:
        torch.testing.assert_close(g[name], ref[name], atol=1e-5, rtol=1e-4, msg=name)


def test_fp32_lm_head_of_a_bf16_model(tiny_model_dir):
    """What the fp32 head guarantees on any CPU: the head's matmul and log-softmax run in fp32 on
    the bf16 decoder's own hidden states (whether that is closer to an fp32 model depends on the
    CPU's bf16 kernels, so it is not asserted)."""
    bf16 = load_model(str(tiny_model_dir), "bfloat16", "cpu")
    batch = random_batch(bf16.config.vocab_size, seed=5)
    lp32_BT, _ = token_logprobs(bf16, batch, fp32_lm_head=True)
    assert lp32_BT.dtype == torch.float32
    with torch.no_grad():
        hidden_BTH = bf16.model(
            input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT, position_ids=batch.position_ids_BT
        ).last_hidden_state
        logits_BTV = hidden_BTH.float() @ bf16.get_output_embeddings().weight.float().T
    logp_BTV = torch.log_softmax(logits_BTV[:, :-1], dim=-1)
    expected_BT = logp_BTV.gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1) * batch.attention_mask_BT[:, 1:]
    torch.testing.assert_close(
        lp32_BT, torch.cat([torch.zeros_like(expected_BT[:, :1]), expected_BT], dim=1), atol=1e-5, rtol=0
    )
    # without it the logits are rounded to bf16 first: a different computation
    lp16_BT, _ = token_logprobs(bf16, batch)
    assert not torch.equal(lp16_BT, lp32_BT)
    # the head is restored: generation sees plain logits again
    assert bf16(input_ids=batch.input_ids_BT[:1]).logits.shape[-1] == bf16.config.vocab_size

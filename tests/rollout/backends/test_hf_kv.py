"""The hf backend's ``preallocate_kv`` and ``share_prompts`` sample exactly what the plain decode loop does."""

from __future__ import annotations

import pytest
import torch

from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS, GenerationRequest
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.rollout.backends.kv import PreallocatedLayer, new_cache, prefill


def group_requests(tok) -> list[GenerationRequest]:
    """3 prompts of different lengths x 4 samples (left padding differs), some stopping early, top-k."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out = []
    for i, q in enumerate(["What is 2+3?", "Compute 17*4 with the tool, then answer.", "hi"]):
        text = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)
        for g in range(4):
            out.append(
                GenerationRequest(
                    prompt_ids=ids,
                    max_new_tokens=10 + 3 * g,
                    temperature=1.0,
                    stop_token_ids=[eos],
                    ignore_eos=g == 3,
                    topk=2 if g == 1 else 0,
                    seed=100 * i + g,
                )
            )
    return out


@pytest.mark.parametrize("preallocate,share", [(True, False), (False, True), (True, True)])
def test_same_tokens_and_logprobs_as_the_plain_loop(tiny_model_dir, tiny_tokenizer, preallocate, share):
    model = load_model(str(tiny_model_dir))
    reqs = group_requests(tiny_tokenizer)
    ref = HfBackend(model, tiny_tokenizer.pad_token_id).generate_sync(reqs)
    out = HfBackend(model, tiny_tokenizer.pad_token_id, preallocate_kv=preallocate, share_prompts=share).generate_sync(
        reqs
    )
    assert len({len(r.token_ids) for r in ref}) > 1  # rows of several lengths
    for r, o in zip(ref, out, strict=True):
        assert o.token_ids == r.token_ids and o.finish_reason == r.finish_reason
        assert max(abs(a - b) for a, b in zip(r.logprobs, o.logprobs, strict=True)) < 1e-5
        assert o.topk_ids == r.topk_ids
        if r.topk_logprobs:
            assert torch.allclose(torch.tensor(o.topk_logprobs), torch.tensor(r.topk_logprobs), atol=1e-5)


def test_shared_prefill_equals_the_per_row_prefill(tiny_model_dir):
    """Rows [a, b, a, a]: a is run once; every row's cache columns and last logits match the plain prefill."""
    model = load_model(str(tiny_model_dir)).eval()
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12], [0, 0, 5, 6, 7], [0, 0, 5, 6, 7]])
    attn = (torch.arange(5) >= torch.tensor([[2], [0], [2], [2]])).long()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref_cache, ref_logits = prefill(model, ids, attn, pos)
        cache, logits = prefill(model, ids, attn, pos, capacity=9, share_prompts=True)
    assert isinstance(cache.layers[0], PreallocatedLayer) and cache.layers[0].key_buf.shape[2] == 9
    assert cache.get_seq_length() == 5
    assert torch.allclose(logits, ref_logits, atol=1e-5)
    for a, b in zip(ref_cache.layers, cache.layers, strict=True):
        assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)


def test_a_preallocated_layer_refuses_to_overflow(tiny_model_dir):
    layer = new_cache(load_model(str(tiny_model_dir)), capacity=3).layers[0]
    layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="4 columns do not fit its 3"):
        layer.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))


def test_the_backend_config_reaches_the_backend(tiny_model_dir, tiny_tokenizer):
    from agent_rl.rollout.backends import make_hf

    cfg = BACKENDS.parse_config({"name": "hf", "preallocate_kv": True, "share_prompts": True})
    backend = make_hf(cfg, None, load_model(str(tiny_model_dir)), tiny_tokenizer)
    assert backend.preallocate_kv and backend.share_prompts
    assert not make_hf(BACKENDS.parse_config({"name": "hf"}), None, backend.model, tiny_tokenizer).share_prompts

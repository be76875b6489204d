"""``rollout.backend.fused_decode``: the fused decode step computes transformers' forward.

Every sampled token's recorded logprob equals the one transformers' own forward gives it when the
whole sequence is fed at once (left padding, per-row positions), for each supported architecture,
with and without biases and Qwen3's per-head norms; greedy tokens equal the plain loop's.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from agent_rl.models.loading import load_model
from agent_rl.models.tiny import build_model
from agent_rl.rollout.backends import BACKENDS, GenerationRequest, make_hf
from agent_rl.rollout.backends.fused import unsupported
from agent_rl.rollout.backends.hf import HfBackend

VOCAB = 97


def qwen3(seed: int = 0):
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(cfg)


def biased_llama(seed: int = 0):
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        attention_bias=True,
        mlp_bias=True,
        max_position_embeddings=256,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)  # nonzero biases, so a dropped one shows
    return model


MODELS = {
    "qwen2": lambda: build_model(VOCAB, hidden_size=64, layers=2, architecture="qwen2"),
    "llama": lambda: build_model(VOCAB, hidden_size=64, layers=2, architecture="llama"),
    "mistral": lambda: build_model(VOCAB, hidden_size=64, layers=2, architecture="mistral"),
    "qwen3": qwen3,
    "llama-biases": biased_llama,
}


def requests(temperature: float) -> list[GenerationRequest]:
    """Prompts of lengths 3, 7 and 12 (so left padding differs), two samples each, one stopping early."""
    prompts = [[5, 9, 2], [11, 3, 8, 40, 41, 7, 6], list(range(20, 32))]
    return [
        GenerationRequest(
            prompt_ids=p,
            max_new_tokens=9 + 2 * s,
            temperature=temperature,
            stop_token_ids=[1] if s else [],
            seed=10 * i + s,
            ignore_eos=False,
        )
        for i, p in enumerate(prompts)
        for s in range(2)
    ]


def teacher_forced_logprobs(model, prompt: list[int], tokens: list[int], pad_left: int) -> list[float]:
    """log p(token_t | prefix) from one forward over [pad] + prompt + tokens, as the learner sees it."""
    ids = torch.tensor([[0] * pad_left + prompt + tokens])
    attention = torch.tensor([[0] * pad_left + [1] * (len(prompt) + len(tokens))])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logp = torch.log_softmax(
            model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[0].float(), -1
        )
    start = pad_left + len(prompt) - 1
    return [float(logp[start + t, tok]) for t, tok in enumerate(tokens)]


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_recorded_logprobs_are_transformers_forward(arch):
    model = MODELS[arch]().eval()
    assert unsupported(model) is None
    reqs = requests(temperature=1.0)
    out = HfBackend(model, pad_token_id=0, fused_decode=True, share_prompts=True).generate_sync(reqs)
    assert any(len(o.token_ids) < r.max_new_tokens for r, o in zip(reqs, out))  # a row stopped early
    longest = max(len(r.prompt_ids) for r in reqs)
    for r, o in zip(reqs, out, strict=True):
        ref = teacher_forced_logprobs(model, r.prompt_ids, o.token_ids, longest - len(r.prompt_ids))
        assert max(abs(a - b) for a, b in zip(ref, o.logprobs, strict=True)) < 1e-4, arch


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "llama-biases"])
def test_greedy_tokens_equal_the_plain_loop(arch):
    model = MODELS[arch]().eval()
    reqs = requests(temperature=0.0)
    ref = HfBackend(model, pad_token_id=0).generate_sync(reqs)
    out = HfBackend(model, pad_token_id=0, fused_decode=True).generate_sync(reqs)
    assert [o.token_ids for o in out] == [r.token_ids for r in ref]
    assert [o.finish_reason for o in out] == [r.finish_reason for r in ref]


def test_in_place_weight_updates_are_seen_by_the_next_call():
    """The fused weights are built per call: a colocated learner's update changes what is sampled."""
    model = MODELS["qwen2"]().eval()
    backend = HfBackend(model, pad_token_id=0, fused_decode=True)
    reqs = requests(temperature=1.0)
    before = backend.generate_sync(reqs)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(3.0)
        model.model.layers[1].self_attn.k_proj.weight.add_(0.5)
    after = backend.generate_sync(reqs)
    plain = HfBackend(model, pad_token_id=0).generate_sync(reqs)
    assert [o.token_ids for o in after] == [p.token_ids for p in plain]
    for a, p in zip(after, plain, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, p.logprobs)) < 1e-4
    assert max(abs(x - y) for a, b in zip(after, before) for x, y in zip(a.logprobs, b.logprobs)) > 1e-2


def test_models_it_cannot_compute_are_refused_with_the_reason(tiny_model_dir, tiny_tokenizer):
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    assert "model_type 'gpt2'" in unsupported(gpt2)
    windowed = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            use_sliding_window=True,
            sliding_window=8,
            max_window_layers=0,
        )
    )
    assert "sliding-window" in unsupported(windowed)
    with pytest.raises(
        ValueError, match=r"fused_decode: cannot fuse the decode step of model_type 'gpt2'.*fused_decode=false"
    ):
        HfBackend(gpt2, pad_token_id=0, fused_decode=True)
    cfg = BACKENDS.parse_config({"name": "hf", "fused_decode": True})
    assert make_hf(cfg, None, load_model(str(tiny_model_dir)), tiny_tokenizer).fused_decode

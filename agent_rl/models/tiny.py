"""A tiny Qwen2-architecture model and byte-level BPE tokenizer, built locally (no model hub).

``agent-rl init-model tiny --out DIR`` saves both in Hugging Face format; everything else loads
them back with ``AutoModelForCausalLM`` / ``AutoTokenizer``, the path a real checkpoint such as
``Qwen/Qwen2.5-0.5B-Instruct`` takes. The chat template is ChatML, renders tools, tool calls
(``<tool_call>{json}</tool_call>``) and tool responses the way Qwen2.5's template does.
``--family`` builds the same kind of model with another family's tokens and template
(``agent_rl/models/families.py``: qwen3, llama3, mistral, gpt-oss).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agent_rl.models.families import ADDED_TOKENS, CHAT_TEMPLATE, SPECIAL_TOKENS, get_family, structured  # noqa: F401 - the tiny model's format, re-exported
from agent_rl.models.loading import quiet_transformers

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_tokenizer(corpus: Iterable[Any], vocab_size: int = 1024, family: str = "qwen2.5"):
    """Byte-level BPE (``tokenizers``) with single-digit number tokens, wrapped for transformers.

    ``corpus``: texts and ``(messages, tools)`` conversations to learn the merges from
    (``agent_rl/run/envloader.py::tokenizer_corpus``: the built-in tasks, prose, and the envs' own).
    ``family``: whose special tokens and chat template (``agent_rl/models/families.py``); the corpus is
    rendered with that template, so the merges fit the family's format."""
    from jinja2 import Environment
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    fam = get_family(family)

    tok = Tokenizer(models.BPE())
    # The pre-tokenization of Qwen2's tokenizer, which transformers applies to every qwen2 model
    # it loads: words, single digits (numbers are copied digit by digit), punctuation runs.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=fam.special_tokens + fam.added_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=24,
        show_progress=False,
    )
    env = Environment()
    env.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)
    render = env.from_string(fam.chat_template)

    def texts() -> Iterator[str]:
        for i, item in enumerate(corpus):
            if isinstance(item, str):
                yield item
            else:
                messages, tools = item
                if family != "qwen2.5":  # its corpus writes calls as Qwen2.5 does: the others get tool_calls
                    messages = structured(messages, family, i)
                yield render.render(messages=messages, tools=tools, add_generation_prompt=False)

    tok.train_from_iterator(texts(), trainer=trainer)
    others = [t for t in fam.special_tokens if t not in (fam.eos_token, fam.pad_token)]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=fam.eos_token,
        pad_token=fam.pad_token,
        additional_special_tokens=[] if family == "qwen2.5" else others,
        chat_template=fam.chat_template,
        model_max_length=4096,
    )
    fast.add_tokens(fam.added_tokens)  # already in the vocabulary: marks them as added tokens
    return fast


def build_model(
    vocab_size: int,
    seed: int = 0,
    hidden_size: int = 128,
    layers: int = 4,
    architecture: str = "qwen2",
    max_position_embeddings: int = 2048,
):
    """The tiny causal LM; ``architecture``: qwen2, llama or mistral (the same sizes);
    ``max_position_embeddings``: its context (BFCL's function docs need tens of thousands)."""
    import torch
    import transformers

    config_name, model_name, extra = {
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"use_sliding_window": False}),
        "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
        "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    }[architecture]
    config = getattr(transformers, config_name)(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **extra,
    )
    torch.manual_seed(seed)
    return getattr(transformers, model_name)(config)


def save_tiny(
    out: str | Path,
    corpus: Iterable[Any],
    seed: int = 0,
    vocab_size: int = 1024,
    family: str = "qwen2.5",
    max_position_embeddings: int = 2048,
) -> Path:
    """Build and save the tiny model and tokenizer to ``out``; returns the path. ``corpus``: see
    ``build_tokenizer`` (``agent_rl.run.envloader.init_tiny`` gathers it from the envs).
    ``family``: ``agent_rl/models/families.py``; its stop tokens go into ``generation_config.json``'s
    ``eos_token_id`` (a list when there are several, as in real checkpoints).
    ``max_position_embeddings``: the context length (``agent-rl init-model --max-position-embeddings``)."""

    quiet_transformers()
    fam = get_family(family)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size, family=family)
    model = build_model(
        len(tokenizer), seed=seed, architecture=fam.architecture, max_position_embeddings=max_position_embeddings
    )
    model.config.eos_token_id = tokenizer.convert_tokens_to_ids(fam.eos_token)
    model.config.pad_token_id = tokenizer.pad_token_id
    stop_ids = tokenizer.convert_tokens_to_ids(fam.stop_tokens)
    model.generation_config.eos_token_id = stop_ids if len(stop_ids) > 1 else stop_ids[0]
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out

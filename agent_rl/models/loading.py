"""Loading a checkpoint's causal LM and tokenizer through ``from_pretrained`` (the path a real
checkpoint and the locally built tiny model take alike)."""

from __future__ import annotations

import torch


def quiet_transformers() -> None:
    """No per-file progress bars when loading or saving small checkpoints."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def load_model(path: str, dtype: str = "float32", device: str = "cpu"):
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device)


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer

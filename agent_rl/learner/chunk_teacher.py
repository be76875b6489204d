"""A teacher that writes text (``omni_opd``'s chunk audits): N sampled continuations of C tokens.

Two kinds, both logit-free from the student's point of view (only the continuation's text is used):

- ``DIR``: a local Hugging Face checkpoint (``generate``, sampling, from the student's token ids;
  it must share the student's tokenizer, which is checked);
- ``openai:http://HOST:PORT/v1[#MODEL]``: any server with ``POST /v1/completions``; the prefix is
  sent as text (the student's decoding of its ids, special tokens kept), ``n`` continuations of
  ``max_tokens`` tokens each, so the teacher's tokenizer may differ (a black-box teacher).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx
import torch

from agent_rl.learner.remote_teacher import SCHEME, parse_remote
from agent_rl.learner.teacher import check_same_tokenizer


class HfChunkTeacher:
    """``load(path) -> (model, tokenizer)``: the run's loader of a checkpoint."""

    def __init__(self, path: str, student_tokenizer: Any, load: Callable[[str], tuple[Any, Any]]):

        model, tokenizer = load(path)
        check_same_tokenizer(student_tokenizer, tokenizer, path)
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = student_tokenizer

    @torch.no_grad()
    def continuations(self, prefix_ids: list[int], n: int, max_tokens: int, temperature: float, seed: int) -> list[str]:
        torch.manual_seed(seed)
        ids = torch.tensor([prefix_ids], device=self.model.device)
        out = self.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            num_return_sequences=n,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=None,
        )
        return [self.tokenizer.decode(row[len(prefix_ids) :].tolist(), skip_special_tokens=True) for row in out]


class ServedChunkTeacher:
    def __init__(self, path: str, student_tokenizer: Any, timeout_s: float = 300.0):

        self.path, self.tokenizer = path, student_tokenizer
        self.url, self.model = parse_remote(path)
        key = os.environ.get("OPENAI_API_KEY")
        self.client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"} if key else {})

    def continuations(self, prefix_ids: list[int], n: int, max_tokens: int, temperature: float, seed: int) -> list[str]:

        body = {
            "prompt": self.tokenizer.decode(prefix_ids, skip_special_tokens=False),
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
        }
        if self.model:
            body["model"] = self.model
        try:
            r = self.client.post(f"{self.url}/completions", json=body)
            texts = [c["text"] for c in r.json()["choices"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"omni_opd teacher {self.path}: no continuations from {self.url}/completions: {e}"
            ) from None
        if len(texts) != n:
            raise ValueError(f"omni_opd teacher {self.path}: asked for n={n} continuations, got {len(texts)}")
        return texts


def make_chunk_teacher(path: str, student_tokenizer: Any, load: Callable[[str], tuple[Any, Any]]) -> Any:
    if path.startswith(SCHEME):
        return ServedChunkTeacher(path, student_tokenizer)
    return HfChunkTeacher(path, student_tokenizer, load)

"""Chat rendering: the ONLY place where messages meet token ids.

The engine never decodes and re-encodes what the policy sampled. It renders the prompt once, then
after each assistant turn renders only the *delta*: the end of the assistant message as the
template closes it, the observation messages, and the next generation prompt. ``drift`` checks
that re-rendering the whole conversation reproduces the stored ids; a mismatch (a tokenizer that
splits the decoded text differently, a template that rewrites history) is counted, not hidden.

An assistant turn ends at any of ``stop_token_ids``: the tokenizer's eos_token and every id of the
checkpoint's ``generation_config.json`` ``eos_token_id`` (Llama 3: ``<|eot_id|>`` and
``<|eom_id|>``; gpt-oss: ``<|return|>`` and ``<|call|>``). ``rewrites_history`` renders a probe
conversation to tell whether the template shows the model an earlier turn differently from how it
was sampled (then only the ``per_turn`` layout trains on what the model saw).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from tools.formats import FORMATS

log = logging.getLogger(__name__)

_PROBE = "PROBE-4711"  # text of the probe conversations' assistant message
PROMPT_CACHE = 256  # first-prompt renders kept per renderer (a step's distinct prompts, several times over)


def generation_stop_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's eos id, then the ``eos_token_id`` ids of the ``generation_config.json`` next
    to it (a checkpoint directory), without repeats."""
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.eos_token)]
    path = Path(str(getattr(tokenizer, "name_or_path", "") or "")) / "generation_config.json"
    if path.is_file():
        eos = json.loads(path.read_text()).get("eos_token_id")
        ids += [int(i) for i in (eos if isinstance(eos, list) else [eos]) if i is not None]
    return list(dict.fromkeys(ids))


class ChatRenderer:
    """Renders messages with ``tokenizer``'s chat template.

    ``chat_template_kwargs``: extra variables for the template on every render (e.g.
    ``{"enable_thinking": False}``; ``rollout.chat_template_kwargs`` in a run's config)."""

    def __init__(
        self, tokenizer: Any, *, chat_template_kwargs: dict | None = None, stop_token_ids: list[int] | None = None
    ):
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        eos = tokenizer.eos_token
        if eos is None:
            raise ValueError("the tokenizer has no eos_token: cannot tell where an assistant turn ends")
        self.end_of_turn = eos  # e.g. "<|im_end|>" for ChatML templates
        self.stop_token_ids = list(stop_token_ids) if stop_token_ids is not None else generation_stop_ids(tokenizer)
        # strings that close a message in a render: the stop tokens and the template's own closer of
        # an assistant message in history (harmony: <|end|>, which is not a stop token)
        stops = [tokenizer.convert_ids_to_tokens(i) for i in self.stop_token_ids]
        self.end_markers = sorted({t for t in stops + [eos, self._history_closer()] if t}, key=len, reverse=True)
        self._rewrites: bool | None = None
        self._prompt_cache: dict[str, list[int]] = {}

    def _history_closer(self) -> str | None:
        """The added token right after an earlier assistant message in a probe render, if any."""
        probe = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": _PROBE},
            {"role": "user", "content": "?"},
        ]
        try:
            text = self._text(probe, None, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template that refuses the probe: the stop tokens alone
            return None
        at = text.find(_PROBE)
        rest = text[at + len(_PROBE) :] if at >= 0 else ""
        added = [t for t in self.tokenizer.get_added_vocab() if rest.startswith(t)]
        return max(added, key=len) if added else None

    def _marker_spans(self, text: str) -> list[tuple[int, int]]:
        spans, i = [], 0
        while i < len(text):
            hit = next((m for m in self.end_markers if text.startswith(m, i)), None)
            if hit is None:
                i += 1
                continue
            spans.append((i, i + len(hit)))
            i += len(hit)
        return spans

    def _text(self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.chat_template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The first prompt of an episode. A group's G episodes start from the same messages, so
        the last ``PROMPT_CACHE`` renders are kept, keyed by the messages, the tools and the date
        (templates may print today's date); a hit returns a copy of the same ids."""
        key = json.dumps([messages, tools, time.strftime("%Y-%m-%d")], sort_keys=True, default=str)
        ids = self._prompt_cache.pop(key, None)
        if ids is None:
            ids = self.encode(self._text(messages, tools, add_generation_prompt=True))
            if len(self._prompt_cache) >= PROMPT_CACHE:
                self._prompt_cache.pop(next(iter(self._prompt_cache)))
        self._prompt_cache[key] = ids  # most recent last
        return list(ids)

    def assistant_text(self, sampled_ids: list[int]) -> str:
        """The assistant's message text: the sampled ids without a final end-of-turn token."""
        if sampled_ids and sampled_ids[-1] in self.stop_token_ids:
            sampled_ids = sampled_ids[:-1]
        return self.decode(sampled_ids)

    def truncate_observation(self, messages: list[dict], limit: int) -> tuple[list[dict], int]:
        """Cut tool responses longer than ``limit`` tokens (``rollout.max_tool_response_tokens``),
        ending them with a visible marker; returns the messages and how many were cut. A tool
        response is a message in the result role of any registered format (``tool``; Llama 3's
        ``ipython``)."""
        roles = {f.result_role for f in FORMATS.values()}
        out, cut = [], 0
        for m in messages:
            ids = self.encode(m.get("content") or "")
            if m.get("role") in roles and len(ids) > limit:
                m = {**m, "content": self.decode(ids[:limit]) + f"\n...[truncated {len(ids) - limit} tokens]"}
                cut += 1
            out.append(m)
        return out, cut

    def observation_ids(
        self, history: list[dict], observation: list[dict], tools: list[dict] | None, turn_ended_with_stop: bool
    ) -> list[int]:
        """Token ids to append after the assistant's sampled ids: closing of its message (when it
        did not sample the end-of-turn token itself), the observation, the next generation prompt.

        ``history`` ends with the assistant message just sampled. The cut point is the message
        closer (``end_markers``) that the observation and generation prompt leave before them,
        counted from the end of the render, so a template that rewrites earlier messages (drops
        old thinking or whole analysis messages, moves the tool list) still yields the rendered
        tail; the rewrite itself shows up in ``drift``.
        """
        full = self._text(history + observation, tools, add_generation_prompt=True)
        spans = self._marker_spans(full)
        after = self._tail_markers(history, observation, tools)
        if len(spans) <= after:
            raise ValueError(f"the chat template does not close the assistant's message with one of {self.end_markers}")
        start, end = spans[len(spans) - after - 1]
        return self.encode(full[end if turn_ended_with_stop else start :])

    def _tail_markers(self, history: list[dict], observation: list[dict], tools: list[dict] | None) -> int:
        """How many message closers ``observation`` and the generation prompt add to a render."""
        probe = history[:1] if history and history[0].get("role") == "system" else []
        probe = probe + [{"role": "user", "content": "?"}, {"role": "assistant", "content": _PROBE}]
        before = self._marker_spans(self._text(probe, tools, add_generation_prompt=False))
        return len(self._marker_spans(self._text(probe + observation, tools, add_generation_prompt=True))) - len(before)

    def rewrites_history(self) -> bool:
        """True when the template renders an earlier assistant turn differently from the tokens that
        were sampled for it: some probe turn (plain text, text with surrounding whitespace, a
        ``<think>`` block, harmony analysis + final, ended by each stop token), followed by a tool
        result or a new user message, is not a prefix of the next render. Computed once."""
        if self._rewrites is None:
            self._rewrites = self._probe_rewrites()
        return self._rewrites

    def _probe_rewrites(self) -> bool:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "probe",
                    "description": "probe",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ]
        turns = [
            _PROBE,
            f" {_PROBE} \n",
            f"<think>\nr\n</think>\n\n{_PROBE}",
            f"<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>{_PROBE}",
        ]
        observations = [[{"role": "tool", "content": "1"}], [{"role": "user", "content": "2"}]]
        stops = [self.tokenizer.convert_ids_to_tokens(i) for i in self.stop_token_ids]
        for system in ([], [{"role": "system", "content": "S"}]):
            history = system + [{"role": "user", "content": "Q"}]
            prompt = self._text(history, tools, add_generation_prompt=True)
            for turn in turns:
                for obs in observations:
                    full = self._text(
                        history + [{"role": "assistant", "content": turn}] + obs, tools, add_generation_prompt=True
                    )
                    if not any(full.startswith(prompt + turn + stop) for stop in stops if stop):
                        return True
        return False

    def context_insertion(self, messages: list[dict], tools: list[dict] | None, context: str) -> tuple[int, list[int]]:
        """Where and what to insert into a rendered prompt so it also holds ``context`` as one more
        user message (a self-distillation teacher's privileged view): (token index, token ids)."""
        before = self._text(messages, tools, add_generation_prompt=False)
        after = self._text(messages + [{"role": "user", "content": context}], tools, add_generation_prompt=False)
        if not after.startswith(before):
            raise ValueError("the chat template does not render the prompt as a prefix of its extension")
        return len(self.encode(before)), self.encode(after[len(before) :])

    def full_ids(self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> list[int]:
        return self.encode(self._text(messages, tools, add_generation_prompt))

    def drift(self, stored_ids: list[int], messages: list[dict], tools: list[dict] | None) -> bool:
        """True when re-rendering the conversation does not reproduce the stored token ids."""
        return self.full_ids(messages, tools, add_generation_prompt=True) != stored_ids

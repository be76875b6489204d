"""Chat rendering: the ONLY place where messages meet token ids.

The engine never decodes and re-encodes what the policy sampled. It renders the prompt once, then
after each assistant turn renders only the *delta*: the end of the assistant message as the
template closes it, the observation messages, and the next generation prompt. ``drift`` checks
that re-rendering the whole conversation reproduces the stored ids; a mismatch (a tokenizer that
splits the decoded text differently, a template that rewrites history) is counted, not hidden.
"""

from __future__ import annotations

from typing import Any


class ChatRenderer:
    """Renders messages with ``tokenizer``'s chat template.

    ``chat_template_kwargs``: extra variables for the template on every render (e.g.
    ``{"enable_thinking": False}``; ``rollout.chat_template_kwargs`` in a run's config)."""

    def __init__(self, tokenizer: Any, *, chat_template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        eos = tokenizer.eos_token
        if eos is None:
            raise ValueError("the tokenizer has no eos_token: cannot tell where an assistant turn ends")
        self.end_of_turn = eos  # e.g. "<|im_end|>" for ChatML templates
        self.stop_token_ids = [tokenizer.convert_tokens_to_ids(eos)]

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
        return self.encode(self._text(messages, tools, add_generation_prompt=True))

    def assistant_text(self, sampled_ids: list[int]) -> str:
        """The assistant's message text: the sampled ids without a final end-of-turn token."""
        if sampled_ids and sampled_ids[-1] in self.stop_token_ids:
            sampled_ids = sampled_ids[:-1]
        return self.decode(sampled_ids)

    def truncate_observation(self, messages: list[dict], limit: int) -> tuple[list[dict], int]:
        """Cut tool responses longer than ``limit`` tokens (``rollout.max_tool_response_tokens``),
        ending them with a visible marker; returns the messages and how many were cut."""
        out, cut = [], 0
        for m in messages:
            ids = self.encode(m.get("content") or "")
            if m.get("role") == "tool" and len(ids) > limit:
                m = {**m, "content": self.decode(ids[:limit]) + f"\n...[truncated {len(ids) - limit} tokens]"}
                cut += 1
            out.append(m)
        return out, cut

    def observation_ids(
        self, history: list[dict], observation: list[dict], tools: list[dict] | None, turn_ended_with_stop: bool
    ) -> list[int]:
        """Token ids to append after the assistant's sampled ids: closing of its message (when it
        did not sample the end-of-turn token itself), the observation, the next generation prompt.

        ``history`` ends with the assistant message just sampled. The cut point is found by
        counting end-of-turn markers, not by a prefix match, so a template that rewrites earlier
        messages (drops old thinking) still yields the rendered tail; the rewrite itself shows up
        in ``drift``.
        """
        prefix = self._text(history, tools, add_generation_prompt=False)
        full = self._text(history + observation, tools, add_generation_prompt=True)
        closed = prefix.count(self.end_of_turn)  # the assistant's own end marker is the last of these
        cut = -1
        for _ in range(closed):
            cut = full.find(self.end_of_turn, cut + 1)
            if cut < 0:
                break
        if cut < 0:
            raise ValueError("the chat template does not close every message with the tokenizer's eos_token")
        if turn_ended_with_stop:
            cut += len(self.end_of_turn)
        return self.encode(full[cut:])

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

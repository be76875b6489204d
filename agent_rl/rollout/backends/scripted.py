"""A scripted policy as a backend: text from a function of the conversation, tokenized once.

Used for demonstrations (SFT data goes through the same engine and mask builder as RL) and to
check environments end to end with an oracle. A text that ends with one of the request's stop
tokens keeps it; a text of tool calls in ``tool_format`` gets that format's ``end_of_calls`` when it is
a stop token (gpt-oss: ``<|call|>``); any other gets the first stop token (the tokenizer's eos).
Logprobs are 0 (the policy is deterministic given its own random state).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from agent_rl.rollout.backends.base import GenerationRequest, GenerationResult
from tools.formats import get_format

Policy = Callable[[list[dict], random.Random], str]


class ScriptedBackend:
    def __init__(self, policy: Policy, tokenizer, seed: int = 0, tool_format: str | None = None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        self.policy_version = 0
        self.stop_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.format = get_format(tool_format) if tool_format is not None else None
        end = self.format.end_of_calls if self.format is not None else None
        self.end_of_calls_id = tokenizer.convert_tokens_to_ids(end) if end is not None else None

    async def generate(
        self, requests: list[GenerationRequest], seed: int | None = None
    ) -> list[GenerationResult | BaseException]:
        out: list[GenerationResult | BaseException] = []
        for r in requests:
            if r.messages is None:
                out.append(ValueError("a scripted policy needs the conversation (GenerationRequest.messages)"))
                continue
            try:
                text = self.policy(r.messages, self.rng)
            except Exception as e:  # noqa: BLE001 - the policy failed on this conversation: only its episode ends
                out.append(e)
                continue
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            stops = list(r.stop_token_ids) or [self.stop_id]
            if not ids or ids[-1] not in stops:  # a text may end its turn itself (gpt-oss: <|call|>)
                ids.append(self._end_of_turn(text, stops))
            finish = "stop"
            if len(ids) > r.max_new_tokens:
                ids, finish = ids[: r.max_new_tokens], "length"
            out.append(
                GenerationResult(
                    token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish, policy_version=self.policy_version
                )
            )
        return out

    def _end_of_turn(self, text: str, stops: list[int]) -> int:
        """``end_of_calls`` after a turn of calls when it is a stop token, else the first stop token."""
        if self.end_of_calls_id in stops and self.format.parse(text, fenced_code=False).tool_calls:
            return self.end_of_calls_id
        return stops[0]

    def update_weights(self, state_dict: dict | None, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass

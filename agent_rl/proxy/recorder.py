"""What the capture proxy records of one episode: segments of exact token ids.

A segment is one chain of chat calls whose prompts extend each other token for token: the first
call's prompt is rendered from its messages with the policy's chat template; each later call that
sends back the conversation of the segment so far (its messages, then the assistant message the
proxy returned, then new messages such as tool results) gets as its prompt the segment's recorded
ids (the sampled ids spliced in, never the returned text re-tokenized) plus the rendered delta
(``ChatRenderer.observation_ids``, as the rollout engine renders observations). A request that
does not extend any recorded segment (the program rewrote, dropped or reordered history, changed
the tools, or wrote an assistant message itself) starts a new segment from a fresh render, and
``breaks`` counts it; nothing is re-tokenized silently.

Each choice of a call (``n > 1``) is its own segment. A segment some later call extended is a
prefix of that call's segments; the others (``leaves``) are the episode's trajectories. Token ids
sampled by the policy have loss mask 1 and the sampler's logprobs; everything rendered has mask 0.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agent_rl.core.types import Turn
from agent_rl.proxy.protocol import Message, ProxyError
from agent_rl.rollout.backends.base import GenerationResult
from tools.base import ToolCall

KEPT_RESPONSES = 64  # per episode: the responses a later request may name as previous_response_id


@dataclass
class Segment:
    """A chain of calls: the conversation as the template saw it, and its exact token ids."""

    keys: list[str]  # canonical form of each message, to match the next request against
    render_messages: list[dict]  # the messages as rendered; assistant turns hold the sampled text
    tools_key: str
    tools: list[dict] | None
    token_ids_T: list[int]
    loss_mask_T: list[int]
    logprobs_T: list[float]
    turns_N: list[Turn]
    ended_with_stop: bool  # the last turn sampled a stop token (else the template's closer is appended)
    index: int = 0  # order of creation within the episode
    continued: bool = False  # a later call extended it (it is a prefix of that call's segments)


@dataclass
class Context:
    """Where a request's prompt comes from: the segment it extends (None: a fresh render)."""

    parent: Segment | None
    prompt_ids: list[int]
    keys: list[str]
    render_messages: list[dict]
    tools_key: str
    tools: list[dict] | None


def arguments(raw: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise ProxyError(400, f"{where}: arguments are not JSON", where) from None
    if not isinstance(value, dict):
        raise ProxyError(400, f"{where}: arguments must be a JSON object", where)
    return value


def message_key(m: Message, where: str) -> str:
    """The canonical form two messages are compared by (content parts joined, arguments decoded)."""
    d: dict[str, Any] = {"role": m.role, "content": m.text}
    if m.role == "assistant":
        d["tool_calls"] = [
            [c.id, c.function.name, arguments(c.function.arguments, f"{where}.tool_calls[{j}]")]
            for j, c in enumerate(m.tool_calls or [])
        ]
    if m.role == "tool":
        d["tool_call_id"] = m.tool_call_id
    return json.dumps(d, sort_keys=True)


class EpisodeRecorder:
    """The segments of one episode (one base URL); see the module docstring."""

    def __init__(self, renderer: Any, fmt: Any):
        self.renderer = renderer
        self.format = fmt
        self.segments: list[Segment] = []
        self.calls = 0
        self.breaks = 0  # calls that started a new segment although one existed
        self.closed = False
        self.infra_error: str | None = None  # the backend failed a call of this episode
        self.inflight = 0  # calls being sampled now
        self.waited_s = 0.0  # time with at least one call being sampled (not the program's own time)
        self._since = 0.0
        self.responses: OrderedDict[str, list[Message]] = OrderedDict()  # /v1/responses id -> its conversation

    def remember(self, response_id: str, conversation: list[Message]) -> None:
        """Keep a response's conversation (input and output, no instructions) for ``previous_response_id``."""
        self.responses[response_id] = conversation
        while len(self.responses) > KEPT_RESPONSES:
            self.responses.popitem(last=False)

    def previous(self, response_id: str) -> list[Message]:
        found = self.responses.get(response_id)
        if found is None:
            raise ProxyError(
                400,
                f"previous_response_id: no response '{response_id}' in this episode (the proxy keeps its last "
                f"{KEPT_RESPONSES})",
                "previous_response_id",
                "previous_response_not_found",
            )
        return list(found)

    def begin_call(self, now: float) -> None:
        if self.inflight == 0:
            self._since = now
        self.inflight += 1

    def end_call(self, now: float) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.waited_s += now - self._since

    def own_time(self, elapsed: float, now: float) -> float:
        """Of ``elapsed`` seconds, those the program spent outside the policy's sampling."""
        return elapsed - self.waited_s - (now - self._since if self.inflight else 0.0)

    def render(self, messages: list[Message]) -> list[dict]:
        """The messages as the template renders them: an assistant's calls written in the policy's
        tool-call format, tool results as that format's result messages (role, name)."""
        names: dict[str, str] = {}
        out: list[dict] = []
        for i, m in enumerate(messages):
            if m.role == "assistant":
                calls = [
                    ToolCall(c.function.name, arguments(c.function.arguments, f"messages[{i}].tool_calls[{j}]"))
                    for j, c in enumerate(m.tool_calls or [])
                ]
                names.update({c.id: c.function.name for c in m.tool_calls or []})
                text = m.text
                if calls:
                    try:
                        text = (text + "\n" if text else "") + self.format.render_calls(calls)
                    except ValueError as e:
                        raise ProxyError(400, f"messages[{i}].tool_calls: {e}", f"messages[{i}]") from None
                out.append({"role": "assistant", "content": text})
            elif m.role == "tool":
                name = names.get(m.tool_call_id or "") or m.name or ""
                out.append(self.format.render_result(ToolCall(name, {}), m.text))
            else:
                out.append({"role": "system" if m.role == "developer" else m.role, "content": m.text})
        return out

    def context(self, messages: list[Message], tools: list[dict] | None) -> Context:
        """The prompt of a request: spliced onto the latest segment it extends, else rendered fresh."""
        keys = [message_key(m, f"messages[{i}]") for i, m in enumerate(messages)]
        tools_key = json.dumps(tools, sort_keys=True)
        rendered = self.render(messages)
        for seg in reversed(self.segments):
            n = len(seg.keys)
            if seg.tools_key == tools_key and len(keys) > n and keys[:n] == seg.keys:
                delta = rendered[n:]
                obs = self.renderer.observation_ids(seg.render_messages, delta, tools, seg.ended_with_stop)
                return Context(seg, seg.token_ids_T + obs, keys, seg.render_messages + delta, tools_key, tools)
        if self.segments:
            self.breaks += 1
        return Context(None, self.renderer.prompt_ids(rendered, tools), keys, rendered, tools_key, tools)

    def record(
        self, ctx: Context, results: list[GenerationResult], replies: list[dict], texts: list[str]
    ) -> list[Segment]:
        """One new segment per choice: the prompt, then the sampled ids (mask 1) as one turn.
        ``replies``: the assistant messages returned; ``texts``: their sampled text."""
        self.calls += 1
        out = []
        prompt = ctx.prompt_ids
        for res, reply, text in zip(results, replies, texts, strict=True):
            parent = ctx.parent
            if parent is None:
                mask, logprobs, turns = [0] * len(prompt), [0.0] * len(prompt), []
            else:
                parent.continued = True
                extra = len(prompt) - len(parent.token_ids_T)
                mask, logprobs = parent.loss_mask_T + [0] * extra, parent.logprobs_T + [0.0] * extra
                turns = copy.deepcopy(parent.turns_N)
                turns[-1].obs_end = len(prompt)
            ids = prompt + list(res.token_ids)
            turns.append(
                Turn(
                    start=len(prompt),
                    end=len(ids),
                    obs_start=len(ids),
                    obs_end=len(ids),
                    policy_version=res.policy_version,
                )
            )
            seg = Segment(
                keys=ctx.keys + [message_key(Message.model_validate(reply), "reply")],
                render_messages=ctx.render_messages + [{"role": "assistant", "content": text}],
                tools_key=ctx.tools_key,
                tools=ctx.tools,
                token_ids_T=ids,
                loss_mask_T=mask + [1] * len(res.token_ids),
                logprobs_T=logprobs + list(res.logprobs),
                turns_N=turns,
                ended_with_stop=res.finish_reason == "stop",
                index=len(self.segments),
            )
            self.segments.append(seg)
            out.append(seg)
        return out

    def leaves(self) -> list[Segment]:
        """The segments no later call extended, in order of creation: the episode's trajectories."""
        return [s for s in self.segments if not s.continued]

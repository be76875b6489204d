"""The OpenAI Responses wire format (``POST /v1/responses``), the default API of the OpenAI Agents SDK.

A Responses request is turned into the chat conversation the recorder (``recorder.py``) already
splices and segments: ``instructions`` become the first system message; ``input`` items become
messages (a ``message`` item by its role; an assistant ``message`` item and the ``function_call``
items right after it become one assistant message with ``tool_calls``, each call's ``call_id`` its
id; a ``function_call_output`` a ``tool`` message answering its ``call_id``); with
``previous_response_id`` the stored conversation of that response (its input and output, not its
instructions, as OpenAI does) comes before the new input. So an agent that sends back the output
items the proxy returned (the SDK's default), or chains them by ``previous_response_id``, extends
its segment; one that rewrites them starts a new, counted segment.

The reply is one sampled completion (the API has no ``n``): an output ``message`` with the text
before the first call, then one ``function_call`` item per parsed call. A completion cut by the
token limit has status ``incomplete`` (``incomplete_details.reason: max_output_tokens``), as
OpenAI's; the Agents SDK raises ``ModelBehaviorError`` on it. Streaming sends the finished response
as OpenAI's event sequence (``response.created`` ... ``response.completed``). What the policy
cannot honour is refused by name with a 400: other tool types, forced ``tool_choice``, non-text
content, structured output, a reasoning effort, fields not listed here. ``seed`` is an extension
(OpenAI's Responses API has none), as vLLM accepts it. With ``include:
["message.output_text.logprobs"]`` the text part carries the logprobs of every sampled token
(the calls' tokens too: they are one completion).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from agent_rl.proxy.protocol import (
    FunctionCallIn,
    FunctionSpec,
    Message,
    ProxyError,
    Seed,
    ToolCallIn,
    ToolSpec,
    check_unicode,
)
from agent_rl.proxy.recorder import arguments

LOGPROBS = "message.output_text.logprobs"  # the ``include`` entry that asks for the sampled tokens' logprobs


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients echo annotations, logprobs
    type: Literal["input_text", "output_text"]
    text: str


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="ignore")  # id, status of an echoed output item
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart]

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[TextPart]


def _item_type(value: Any) -> str:
    found = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "message")
    return found if isinstance(found, str) else "?"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(_item_type),
]


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def chat(self) -> dict[str, Any]:
        """The chat-completions form the renderer and the recorder's tools key read."""
        return ToolSpec(type="function", function=FunctionSpec(**self.model_dump(exclude={"type"}))).model_dump(
            exclude_none=True
        )


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``: the accepted fields; any other is refused by name."""

    model_config = ConfigDict(extra="forbid")
    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    seed: Seed = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None

    @model_validator(mode="after")
    def _unicode_text(self) -> ResponsesRequest:
        check_unicode(self, ("input", "instructions", "tools"))
        return self

    def unsupported(self) -> tuple[str, str] | None:
        """(param, why) of the first option the policy cannot honour, or None."""
        if self.tool_choice not in (None, "auto", "none"):
            return "tool_choice", "only tool_choice auto or none: the policy's calls are sampled, not forced"
        fmt = (self.text or {}).get("format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            return "text.format", "only text.format {type: text} is supported"
        if self.reasoning is not None and self.reasoning.get("effort") not in (None, "none"):
            return "reasoning", "reasoning effort is not supported (the policy is not a reasoning model)"
        if self.input is None and self.previous_response_id is None:
            return "input", "input is required"
        return None

    def chat_tools(self) -> list[dict[str, Any]] | None:
        return [t.chat() for t in self.tools] if self.tools and self.tool_choice != "none" else None


def input_messages(req: ResponsesRequest) -> list[Message]:
    """The input items as chat messages (see the module docstring); the instructions are not here."""
    items = [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else list(req.input or [])
    out: list[Message] = []
    open_call = False  # the last message is an assistant message that function_call items may join
    for i, item in enumerate(items):
        if isinstance(item, MessageItem):
            out.append(Message(role=item.role, content=item.text))
            open_call = item.role == "assistant"
        elif isinstance(item, FunctionCallItem):
            arguments(item.arguments, f"input[{i}]")  # a 400 naming the item, not the message it joins
            call = ToolCallIn(id=item.call_id, function=FunctionCallIn(name=item.name, arguments=item.arguments))
            if open_call:
                out[-1].tool_calls = [*(out[-1].tool_calls or []), call]
            else:
                out.append(Message(role="assistant", content=None, tool_calls=[call]))
                open_call = True
        else:
            text = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
            out.append(Message(role="tool", content=text, tool_call_id=item.call_id))
            open_call = False
    return out


def reply_message(output: list[dict[str, Any]]) -> Message:
    """The assistant message of this proxy's output items (what the recorder keys the reply by)."""
    text = next((p["text"] for item in output if item["type"] == "message" for p in item["content"]), None)
    calls = [
        ToolCallIn(id=item["call_id"], function=FunctionCallIn(name=item["name"], arguments=item["arguments"]))
        for item in output
        if item["type"] == "function_call"
    ]
    return Message(role="assistant", content=text, tool_calls=calls or None)


def check_conversation(messages: list[Message]) -> None:
    if not messages:
        raise ProxyError(400, "input: no messages (input is empty and there are no instructions)", "input")
    if messages[-1].role == "assistant":
        raise ProxyError(
            400,
            "input: the last item is the assistant's (a message or a function_call without its output); "
            "continuing it is not supported",
            "input",
        )


def output_items(reply: dict[str, Any], complete: bool, logprobs: list[dict] | None) -> list[dict[str, Any]]:
    """The output items of a chat reply (``ProxyService.reply``): its text, then its calls."""
    status = "completed" if complete else "incomplete"
    out: list[dict[str, Any]] = []
    if reply.get("content") is not None or not reply.get("tool_calls"):
        part = {
            "type": "output_text",
            "text": reply.get("content") or "",
            "annotations": [],
            "logprobs": logprobs or [],
        }
        out.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "role": "assistant",
                "status": status,
                "content": [part],
            }
        )
    for call in reply.get("tool_calls") or []:
        out.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": status,
            }
        )
    return out


def response_body(
    req: ResponsesRequest, output: list[dict], complete: bool, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if complete else "incomplete",
        "error": None,
        "incomplete_details": None if complete else {"reason": "max_output_tokens"},
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": req.model,
        "output": output,
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": True if req.store is None else req.store,
        "temperature": req.temperature,
        "text": {"format": {"type": "text"}},
        "tool_choice": req.tool_choice if isinstance(req.tool_choice, str) else "auto",
        "tools": [t.model_dump() for t in req.tools or []],
        "top_p": req.top_p,
        "truncation": req.truncation or "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        "user": req.user,
        "metadata": req.metadata or {},
    }


def response_events(body: dict[str, Any]) -> list[str]:
    """The server-sent events of ``body`` (a finished response), in OpenAI's order: created,
    in_progress; per output item added, its text or arguments (one delta, then done), done; then
    ``response.completed`` (``response.incomplete`` when cut) with the whole response."""
    events: list[str] = []

    def emit(kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(events), **fields}
        events.append(f"event: {kind}\ndata: {json.dumps(data)}\n\n")

    pending = {**body, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for k, item in enumerate(body["output"]):
        at = {"output_index": k, "item_id": item["id"]}
        if item["type"] == "message":
            emit("response.output_item.added", output_index=k, item={**item, "status": "in_progress", "content": []})
            for c, part in enumerate(item["content"]):
                emit("response.content_part.added", **at, content_index=c, part={**part, "text": ""})
                emit("response.output_text.delta", **at, content_index=c, delta=part["text"], logprobs=part["logprobs"])
                emit("response.output_text.done", **at, content_index=c, text=part["text"], logprobs=part["logprobs"])
                emit("response.content_part.done", **at, content_index=c, part=part)
        else:
            emit("response.output_item.added", output_index=k, item={**item, "status": "in_progress", "arguments": ""})
            emit("response.function_call_arguments.delta", **at, delta=item["arguments"])
            emit("response.function_call_arguments.done", **at, name=item["name"], arguments=item["arguments"])
        emit("response.output_item.done", output_index=k, item=item)
    emit("response.completed" if body["status"] == "completed" else "response.incomplete", response=body)
    return events

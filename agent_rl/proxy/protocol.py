"""The OpenAI chat wire format the capture proxy speaks: request models, responses, error bodies.

Requests are validated here, and anything the policy cannot honour is refused by name with a 400,
never silently ignored: ``stop`` strings, penalties, ``tool_choice`` that forces a call, non-text
content parts. Fields that clients send routinely and that change nothing for a local policy
(``store``, ``metadata``, ``user``, ``parallel_tool_calls``, ``response_format: {type: text}``) are
accepted. Errors have OpenAI's body, ``{"error": {"message", "type", "param", "code"}}``, so the
official client raises its own exception class for each status (400 ``BadRequestError``, 401
``AuthenticationError``, 404 ``NotFoundError``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator


class ProxyError(Exception):
    """A request the proxy refuses: the status code and OpenAI error fields to answer with."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 409: "conflict_error"}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


def check_unicode(request: BaseModel, names: tuple[str, ...]) -> None:
    """Refuse text with a lone surrogate: JSON's "\\ud800" decodes to one, which no tokenizer (nor
    UTF-8) can encode (a ValueError, in a validator: a 400 naming the field)."""
    for name in names:
        try:
            json.dumps(request.model_dump(include={name}), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name}: the text has a lone UTF-16 surrogate (not Unicode text)") from None


def _seed_range(v: int | None) -> int | None:
    if v is not None and not -(2**63) <= v < 2**64:
        raise ValueError("must be in [-2**63, 2**64)")
    return v


Seed = Annotated[int | None, AfterValidator(_seed_range)]  # a sampling seed: what the backends can take


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "input_text", "output_text"]
    text: str


class FunctionCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    arguments: str = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class Message(BaseModel):
    # clients echo fields of returned messages (refusal, annotations, audio, function_call: null)
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _no_parameters(self) -> FunctionSpec:
        # OpenAI reads a function without parameters as taking none; chat templates read the key
        if self.parameters is None:
            self.parameters = {"type": "object", "properties": {}}
        return self


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``: the accepted fields; any other is refused by name."""

    model_config = ConfigDict(extra="forbid")
    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "none"] | dict[str, Any] | str | None = None
    n: int = Field(1, ge=1, le=16)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: Seed = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stop: str | list[str] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = None
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _unicode_text(self) -> ChatRequest:
        check_unicode(self, ("messages", "tools"))
        return self

    def unsupported(self) -> tuple[str, str] | None:
        """(param, why) of the first option the policy cannot honour, or None."""
        if self.stop:
            return "stop", "stop strings are not supported: a turn ends at the chat template's stop tokens"
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                return name, f"{name} is not supported (the policy samples from its own distribution)"
        if self.response_format is not None and self.response_format.get("type") != "text":
            return "response_format", "only response_format {type: text} is supported"
        if self.tool_choice not in (None, "auto", "none"):
            return "tool_choice", "only tool_choice auto or none: the policy's calls are sampled, not forced"
        if self.messages[-1].role == "assistant":
            return "messages", "the last message is an assistant message: continuing a message is not supported"
        return None


def tool_call_out(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def completion_body(model: str, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(body: dict[str, Any], include_usage: bool) -> list[str]:
    """The server-sent events of ``body`` (a finished completion) as ``chat.completion.chunk``s: per
    choice its role, its content, each tool call (index, id, name, arguments), its finish reason;
    then the usage chunk when asked for, then ``[DONE]``."""

    def chunk(choices: list[dict], usage: dict | None = None) -> str:
        out = {
            "id": body["id"],
            "object": "chat.completion.chunk",
            "created": body["created"],
            "model": body["model"],
            "choices": choices,
        }
        if include_usage:
            out["usage"] = usage
        return f"data: {json.dumps(out)}\n\n"

    events = []
    for c in body["choices"]:
        i, msg = c["index"], c["message"]
        events.append(
            chunk(
                [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
            )
        )
        if msg.get("content"):
            events.append(
                chunk(
                    [
                        {
                            "index": i,
                            "delta": {"content": msg["content"]},
                            "logprobs": c.get("logprobs"),
                            "finish_reason": None,
                        }
                    ]
                )
            )
        for k, call in enumerate(msg.get("tool_calls") or []):
            delta = {"tool_calls": [{"index": k, **call}]}
            events.append(chunk([{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}]))
        events.append(chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": c["finish_reason"]}]))
    if include_usage:
        events.append(chunk([], body["usage"]))
    events.append("data: [DONE]\n\n")
    return events

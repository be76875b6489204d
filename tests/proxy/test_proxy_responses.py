"""``/v1/responses`` with the official ``openai`` client: exact tokens, output items sent back are
spliced (or chained by ``previous_response_id``), rewritten ones start a counted segment,
streaming, and bad requests raise the client's own errors. A real server on loopback."""

from __future__ import annotations

import json

import openai
import pytest

from tests.proxy.conftest import PYTHON_TOOL, client, fresh

SYSTEM = "Use the python tool if it helps, then reply <answer>N</answer>."
QUESTION = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 2?"}]
TOOL = {"type": "function", **PYTHON_TOOL["function"]}  # the Responses form of the chat tests' tool


def test_text_is_recorded_exactly(hf_proxy):
    url, service, backend = hf_proxy
    rec = fresh(service)
    backend.calls.clear()
    out = client(url).responses.create(
        model="policy", instructions=SYSTEM, input="What is 2 + 2?", max_output_tokens=12, extra_body={"seed": 3}
    )  # an extension, as vLLM has
    [(prompt, sampled)] = backend.calls
    assert prompt == service.renderer.prompt_ids(QUESTION, None)  # instructions are the system message
    [seg] = rec.leaves()
    assert seg.token_ids_T == prompt + sampled
    assert seg.loss_mask_T == [0] * len(prompt) + [1] * len(sampled)
    assert out.output_text == service.renderer.assistant_text(sampled)
    assert (out.usage.input_tokens, out.usage.output_tokens) == (len(prompt), len(sampled))
    assert out.status == (
        "incomplete" if len(sampled) == 12 and sampled[-1] not in service.renderer.stop_token_ids else "completed"
    )


def test_cut_at_the_token_limit_is_incomplete(hf_proxy):
    url, service, _ = hf_proxy
    fresh(service)
    out = client(url).responses.create(model="policy", input="hi", max_output_tokens=1, temperature=0.0)
    assert (out.status, out.incomplete_details.reason, out.output[0].status) == (
        "incomplete",
        "max_output_tokens",
        "incomplete",
    )


def first_call(c):
    out = c.responses.create(model="policy", instructions=SYSTEM, input="What is 2 + 2?", tools=[TOOL])
    message, call = out.output
    assert (message.type, message.content[0].text) == ("message", "Let me compute.")
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "python", {"code": "print(2 + 2)"})
    return out, call


def test_output_items_sent_back_are_spliced(scripted_proxy):
    url, service, backend = scripted_proxy
    rec = fresh(service)
    backend.calls.clear()
    c = client(url)
    out, call = first_call(c)
    items = [
        {"role": "user", "content": "What is 2 + 2?"},
        *[o.model_dump(exclude_none=True) for o in out.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "4"},
    ]
    second = c.responses.create(model="policy", instructions=SYSTEM, input=items, tools=[TOOL])
    assert second.output_text == "<answer>4</answer>"
    (p1, s1), (p2, s2) = backend.calls
    assert p2[: len(p1) + len(s1)] == p1 + s1  # the sampled ids, not a re-render of the returned text
    [seg] = rec.leaves()
    assert (rec.calls, rec.breaks, seg.token_ids_T) == (2, 0, p2 + s2)
    #  prompt 0 | sampled 1 | tool result 0 | sampled 1
    assert seg.loss_mask_T == [0] * len(p1) + [1] * len(s1) + [0] * (len(p2) - len(p1) - len(s1)) + [1] * len(s2)


def test_previous_response_id_chains_the_segment(scripted_proxy):
    url, service, backend = scripted_proxy
    rec = fresh(service)
    c = client(url)
    out, call = first_call(c)
    second = c.responses.create(
        model="policy",
        instructions=SYSTEM,
        previous_response_id=out.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "4"}],
    )
    assert (second.output_text, second.previous_response_id) == ("<answer>4</answer>", out.id)
    assert (rec.calls, rec.breaks, len(rec.leaves())) == (2, 0, 1)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        c.responses.create(model="policy", input="x", previous_response_id="resp_nope")


def test_rewritten_items_start_a_counted_segment(scripted_proxy):
    url, service, _ = scripted_proxy
    rec = fresh(service)
    c = client(url)
    _, call = first_call(c)
    edited = {"type": "function_call", "call_id": call.call_id, "name": "python", "arguments": '{"code": "print(4)"}'}
    c.responses.create(
        model="policy",
        instructions=SYSTEM,
        tools=[TOOL],
        input=[
            {"role": "user", "content": "What is 2 + 2?"},
            edited,
            {"type": "function_call_output", "call_id": call.call_id, "output": "4"},
        ],
    )
    assert (rec.calls, rec.breaks, len(rec.leaves())) == (2, 1, 2)
    second = rec.leaves()[1]
    assert (
        second.turns_N[0].start > 0 and second.loss_mask_T[: second.turns_N[0].start] == [0] * second.turns_N[0].start
    )


def test_streaming_sends_the_same_response(scripted_proxy):
    url, service, _ = scripted_proxy
    fresh(service)
    events = list(
        client(url).responses.create(
            model="policy", instructions=SYSTEM, input="What is 2 + 2?", tools=[TOOL], stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Let me compute."
    [args] = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(args) == {"code": "print(2 + 2)"}
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"] and final.usage.output_tokens > 0


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"model": "gpt-4o"}, openai.NotFoundError, "served: policy"),
        ({"tool_choice": "required"}, openai.BadRequestError, "tool_choice"),
        ({"tools": [{"type": "web_search"}]}, openai.BadRequestError, "tools"),
        ({"input": [{"type": "reasoning", "id": "r", "summary": []}]}, openai.BadRequestError, "reasoning"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
            openai.BadRequestError,
            "input",
        ),
        ({"input": []}, openai.BadRequestError, "input"),
        (
            {
                "input": [
                    {"role": "user", "content": "x"},
                    {"type": "function_call", "call_id": "c", "name": "python", "arguments": "{}"},
                ]
            },
            openai.BadRequestError,
            "continuing",
        ),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c", "name": "python", "arguments": "{not json"},
                    {"type": "function_call_output", "call_id": "c", "output": "1"},
                ]
            },
            openai.BadRequestError,
            "not JSON",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}},
            openai.BadRequestError,
            "text.format",
        ),
        ({"reasoning": {"effort": "high"}}, openai.BadRequestError, "reasoning"),
        ({"temperature": 7}, openai.BadRequestError, "temperature"),
        ({"extra_body": {"frobnicate": 1}}, openai.BadRequestError, "frobnicate"),
    ],
)
def test_bad_requests_raise_the_clients_own_errors(scripted_proxy, kwargs, error, says):
    url, service, _ = scripted_proxy
    fresh(service)
    args = {"model": "policy", "input": "What is 2 + 2?", **kwargs}
    with pytest.raises(error) as e:
        client(url).responses.create(**args)
    assert says in str(e.value)
    assert e.value.status_code < 500

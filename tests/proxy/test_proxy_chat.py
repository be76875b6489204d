"""The capture proxy over HTTP with the official ``openai`` client: exact tokens, splicing, segments,
streaming, ``n``. A real server on loopback; the client is not mocked."""

from __future__ import annotations

import json

import openai
import pytest

from tests.proxy.conftest import PYTHON_TOOL, client, fresh

QUESTION = [
    {"role": "system", "content": "Use the python tool if it helps, then reply <answer>N</answer>."},
    {"role": "user", "content": "What is 2 + 2?"},
]


def test_sampled_tokens_are_recorded_exactly(hf_proxy):
    url, service, backend = hf_proxy
    rec = fresh(service)
    backend.calls.clear()
    out = client(url).chat.completions.create(model="policy", messages=QUESTION, max_tokens=12, seed=3)
    assert out.choices[0].message.role == "assistant"
    [(prompt, sampled)] = backend.calls
    [seg] = rec.leaves()
    assert seg.token_ids_T == prompt + sampled
    assert seg.loss_mask_T == [0] * len(prompt) + [1] * len(sampled)
    assert prompt == service.renderer.prompt_ids(QUESTION, None)  # rendered as the env renders it
    assert out.usage.completion_tokens == len(sampled)


def test_returned_messages_are_spliced_not_retokenized(scripted_proxy):
    url, service, backend = scripted_proxy
    rec = fresh(service)
    backend.calls.clear()
    c = client(url)
    first = c.chat.completions.create(model="policy", messages=QUESTION, tools=[PYTHON_TOOL])
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert msg.content == "Let me compute."
    [call] = msg.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("python", {"code": "print(2 + 2)"})
    history = QUESTION + [msg, {"role": "tool", "tool_call_id": call.id, "content": "4\n"}]
    second = c.chat.completions.create(model="policy", messages=history, tools=[PYTHON_TOOL])
    assert second.choices[0].message.content == "<answer>4</answer>"
    (p1, s1), (p2, s2) = backend.calls
    assert p2[: len(p1) + len(s1)] == p1 + s1  # the sampled ids themselves, not a re-render of the text
    [seg] = rec.leaves()
    assert (rec.calls, rec.breaks) == (2, 0)
    assert seg.token_ids_T == p2 + s2
    #  prompt 0 | sampled 1 | tool result 0 | sampled 1
    assert seg.loss_mask_T == [0] * len(p1) + [1] * len(s1) + [0] * (len(p2) - len(p1) - len(s1)) + [1] * len(s2)
    assert [(t.start, t.end, t.obs_start, t.obs_end) for t in seg.turns_N] == [
        (len(p1), len(p1) + len(s1), len(p1) + len(s1), len(p2)),
        (len(p2), len(p2) + len(s2), len(p2) + len(s2), len(p2) + len(s2)),
    ]


def test_rewritten_history_starts_a_counted_segment(scripted_proxy):
    url, service, backend = scripted_proxy
    rec = fresh(service)
    c = client(url)
    first = c.chat.completions.create(model="policy", messages=QUESTION, tools=[PYTHON_TOOL]).choices[0].message
    call = first.tool_calls[0]
    edited = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "python", "arguments": '{"code": "print(4)"}'}}
        ],
    }
    c.chat.completions.create(
        model="policy",
        messages=QUESTION + [edited, {"role": "tool", "tool_call_id": call.id, "content": "4"}],
        tools=[PYTHON_TOOL],
    )
    assert (rec.calls, rec.breaks, len(rec.leaves())) == (2, 1, 2)
    second = rec.leaves()[1]
    assert (
        second.loss_mask_T.count(1) < len(second.token_ids_T) and second.turns_N[0].start > 0
    )  # the edit is context (mask 0)


def test_streaming_sends_the_same_message(scripted_proxy):
    url, service, _ = scripted_proxy
    fresh(service)
    stream = client(url).chat.completions.create(
        model="policy", messages=QUESTION, tools=[PYTHON_TOOL], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("python", {"code": "print(2 + 2)"})
    ]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "Let me compute."
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens > 0


def test_n_choices_are_segments(hf_proxy):
    url, service, backend = hf_proxy
    rec = fresh(service)
    backend.calls.clear()
    out = client(url).chat.completions.create(model="policy", messages=QUESTION, n=3, max_tokens=6)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert [s.token_ids_T for s in rec.leaves()] == [p + s for p, s in backend.calls]


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"model": "gpt-4o"}, openai.NotFoundError, "served: policy"),
        ({"temperature": 7}, openai.BadRequestError, "temperature"),
        ({"stop": ["\n"]}, openai.BadRequestError, "stop strings"),
        ({"n": 0}, openai.BadRequestError, "n"),
        ({"messages": []}, openai.BadRequestError, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, openai.BadRequestError, "role"),
        ({"tool_choice": "required"}, openai.BadRequestError, "tool_choice"),
        (
            {
                "messages": QUESTION
                + [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "python", "arguments": "{not json"}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c", "content": "1"},
                ]
            },
            openai.BadRequestError,
            "not JSON",
        ),
        ({"extra_body": {"frobnicate": 1}}, openai.BadRequestError, "frobnicate"),
    ],
)
def test_bad_requests_raise_the_clients_own_errors(scripted_proxy, kwargs, error, says):
    url, service, _ = scripted_proxy
    fresh(service)
    args = {"model": "policy", "messages": QUESTION, **kwargs}
    with pytest.raises(error) as e:
        client(url).chat.completions.create(**args)
    assert says in str(e.value)
    assert e.value.status_code < 500


def test_unknown_episode_and_api_key(tiny_model_dir, tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from tests.proxy.conftest import calls_then_answers, running_proxy

    with running_proxy(tiny_model_dir, ScriptedBackend(calls_then_answers, tiny_tokenizer), api_key="k3y") as (url, _):
        with pytest.raises(openai.AuthenticationError):
            client(url).models.list()
        ok = openai.OpenAI(base_url=url, api_key="k3y", max_retries=0)
        assert [m.id for m in ok.models.list()] == ["policy"]
        gone = openai.OpenAI(base_url=url.replace("/v1", "/e/nope/v1"), api_key="k3y", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="no episode"):
            gone.chat.completions.create(model="policy", messages=QUESTION)

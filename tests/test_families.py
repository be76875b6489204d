"""Model families (``init-model tiny --family``): tokens, stop ids, the templates' history rewrites
(exact renders), and token parity per family and layout (issue 19)."""

from __future__ import annotations

import json
import sys

import pytest

from agent_rl.models.families import FAMILIES, get_family, structured
from agent_rl.models.loading import load_tokenizer
from agent_rl.rollout.render import ChatRenderer
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from template_drift import measure  # noqa: E402


@pytest.fixture(scope="module")
def family_dirs(family_model_dir):
    return {name: family_model_dir(name) for name in FAMILIES}


@pytest.fixture(scope="module")
def tokenizers(family_dirs):
    return {name: load_tokenizer(str(path)) for name, path in family_dirs.items()}


def render(tok, messages, tools=None, add_generation_prompt=False, **kwargs):
    return tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
    )


STOPS = {
    "qwen2.5": ["<|im_end|>"],
    "qwen3": ["<|im_end|>", "<|endoftext|>"],
    "llama3": ["<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"],
    "mistral": ["</s>"],
    "gpt-oss": ["<|return|>", "<|call|>", "<|endoftext|>"],
}


def test_an_unknown_family_names_the_known_ones():
    with pytest.raises(
        ValueError, match=r"^unknown model family 'qwen9'; known: qwen2.5, qwen3, llama3, mistral, gpt-oss$"
    ):
        get_family("qwen9")


CORPUS_CALL = [
    {"role": "user", "content": "weather in Oslo?"},
    {
        "role": "assistant",
        "content": 'Checking.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    },
    {"role": "tool", "content": "4 C"},
    {"role": "assistant", "content": "4 C in Oslo."},
]


def test_corpus_calls_become_tool_calls_and_odd_conversations_get_a_reasoning():
    call = {"role": "assistant", "content": "Checking.",
            "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]}  # fmt: skip
    assert structured(CORPUS_CALL, "llama3", 1) == [CORPUS_CALL[0], call, CORPUS_CALL[2], CORPUS_CALL[3]]
    assert structured(CORPUS_CALL, "qwen3", 0)[1] == call  # even: no reasoning
    thought = "I should check this with the tool first."
    assert structured(CORPUS_CALL, "qwen3", 1)[1] == {**call, "reasoning_content": thought}
    assert structured(CORPUS_CALL, "gpt-oss", 1)[3] == {
        "role": "assistant",
        "content": "4 C in Oslo.",
        "thinking": thought,
    }
    assert CORPUS_CALL[1]["content"].startswith("Checking.\n<tool_call>")  # the corpus itself untouched


@pytest.mark.parametrize("family", list(FAMILIES))
def test_stop_tokens_come_from_generation_config_and_are_single_tokens(family_dirs, tokenizers, family):
    tok = tokenizers[family]
    renderer = ChatRenderer(tok)
    assert [tok.convert_ids_to_tokens(i) for i in renderer.stop_token_ids] == STOPS[family]
    saved = json.loads((family_dirs[family] / "generation_config.json").read_text())["eos_token_id"]
    assert set(saved if isinstance(saved, list) else [saved]) == set(renderer.stop_token_ids)
    for token in FAMILIES[family].special_tokens + FAMILIES[family].added_tokens:
        assert len(tok.encode(token, add_special_tokens=False)) == 1, token
    # a family's template rewrites history exactly when it is not our Qwen2.5 template
    assert renderer.rewrites_history() == (family != "qwen2.5")


def test_qwen3_drops_the_thinking_of_turns_before_the_last_user_message(tokenizers):
    messages = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd again\n</think>\n\n4"},
    ]
    assert render(tokenizers["qwen3"], messages) == (
        "<|im_start|>user\n1+1?<|im_end|>\n"
        "<|im_start|>assistant\n2<|im_end|>\n"  # earlier turn: its <think> block is gone
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nadd again\n</think>\n\n4<|im_end|>\n"
    )
    prompt = render(tokenizers["qwen3"], messages[:1], add_generation_prompt=True, enable_thinking=False)
    assert prompt == "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_llama3_adds_the_date_header_and_renders_tool_results_as_ipython(tokenizers):
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "7"},
    ]
    assert render(tokenizers["llama3"], messages, add_generation_prompt=True) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "f", "parameters": {"x": 1}}<|eot_id|>'
        "<|start_header_id|>ipython<|end_header_id|>\n\n7<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    dated = render(tokenizers["llama3"], messages[:1], date_string="01 Jan 2025")
    assert "Today Date: 01 Jan 2025\n\n" in dated


def test_harmony_drops_earlier_analysis_and_ends_only_the_last_answer_with_return(tokenizers):
    def turn(thought, answer):
        return f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant<|channel|>final<|message|>{answer}"

    messages = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": turn("add", "2")},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": turn("add again", "4")},
    ]
    text = render(tokenizers["gpt-oss"], messages)
    assert text.split("<|start|>user", 1)[1] == (
        "<|message|>1+1?<|end|>"
        "<|start|>assistant<|channel|>final<|message|>2<|end|>"  # earlier turn: analysis dropped, <|end|>
        "<|start|>user<|message|>2+2?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>add again<|end|>"
        "<|start|>assistant<|channel|>final<|message|>4<|return|>"
    )


def test_harmony_tool_call_and_result(tokenizers):
    call = '<|channel|>commentary to=functions.python <|constrain|>json<|message|>{"code": "print(1)"}'
    structured = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "python", "arguments": {"code": "print(1)"}}}],
    }
    tail = [{"role": "tool", "content": "1"}]
    user = [{"role": "user", "content": "go"}]
    raw = render(
        tokenizers["gpt-oss"], user + [{"role": "assistant", "content": call}] + tail, add_generation_prompt=True
    )
    assert raw == render(tokenizers["gpt-oss"], user + [structured] + tail, add_generation_prompt=True)
    assert raw.endswith(
        '<|start|>assistant<|channel|>commentary to=functions.python <|constrain|>json<|message|>{"code": "print(1)"}<|call|>'
        "<|start|>functions.python to=assistant<|channel|>commentary<|message|>1<|end|><|start|>assistant"
    )


def test_mistral_puts_tools_and_system_before_the_last_user_message(tokenizers):
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}]
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": '[TOOL_CALLS] [{"name": "f", "arguments": {}}]'},
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert render(tokenizers["mistral"], messages, tools) == (
        '<s>[INST] a[/INST][TOOL_CALLS] [{"name": "f", "arguments": {}}]</s>[TOOL_RESULTS] {"content": "r"}[/TOOL_RESULTS]b</s>'
        '[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}][/AVAILABLE_TOOLS]'
        "[INST] S\n\nc[/INST]"
    )


# token parity: bench/template_drift.py's episodes (3 drift checks each), 2 episodes per cell
CONCAT_DRIFT = {"qwen2.5": 0, "qwen3": 4, "llama3": 6, "mistral": 4, "gpt-oss": 4}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_drift_per_family_and_layout(tokenizers, family):
    tok = tokenizers[family]
    concat, per_turn = measure(tok, family, "concat", 2), measure(tok, family, "per_turn", 2)
    assert concat["checks"] == per_turn["checks"] == 6
    assert concat["drift"] == CONCAT_DRIFT[family]  # > 0 exactly for the templates that rewrite history
    assert per_turn["drift"] == 0
    dropped = measure(tok, family, "concat", 2, on_drift="drop")
    assert dropped["dropped"] == dropped["untrainable"] == (2 if CONCAT_DRIFT[family] else 0)

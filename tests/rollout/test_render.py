"""ChatRenderer: template options, stop tokens of each family, history-rewrite detection."""

from __future__ import annotations

import copy

from agent_rl.rollout.render import ChatRenderer

FLAG_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if thinking is defined and not thinking %}-{% endif %}{% endif %}"
)


def test_chat_template_kwargs_reach_the_template(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = FLAG_TEMPLATE
    messages = [{"role": "user", "content": "5"}]
    plain = ChatRenderer(tok).prompt_ids(messages, None)
    flagged = ChatRenderer(tok, chat_template_kwargs={"thinking": False}).prompt_ids(messages, None)
    assert tok.decode(plain) == "<|im_start|>user\n5<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(flagged) == "<|im_start|>user\n5<|im_end|>\n<|im_start|>assistant\n-"


def test_select_layout_picks_per_turn_for_a_rewriting_template_unless_set(tiny_tokenizer, caplog):
    from rollout_helpers import DROP_THINKING_TEMPLATE

    from agent_rl.rollout.config import RolloutConfig
    from agent_rl.rollout.engine import select_layout

    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = DROP_THINKING_TEMPLATE
    assert select_layout(RolloutConfig(), ChatRenderer(tiny_tokenizer)) == "concat"  # ours does not rewrite
    with caplog.at_level("WARNING"):
        assert select_layout(RolloutConfig(), ChatRenderer(tok)) == "per_turn"
    assert "rewrites earlier turns" in caplog.text
    assert select_layout(RolloutConfig(layout="concat"), ChatRenderer(tok)) == "concat"  # set by the user: kept


def test_stop_token_ids_can_be_given(tiny_tokenizer):
    assert ChatRenderer(tiny_tokenizer).stop_token_ids == [tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert ChatRenderer(tiny_tokenizer, stop_token_ids=[3, 4]).stop_token_ids == [3, 4]


def test_a_groups_first_prompt_is_rendered_once_and_each_caller_gets_its_own_list(tiny_tokenizer, monkeypatch):
    from agent_rl.rollout import render

    renderer = ChatRenderer(tiny_tokenizer)
    calls = []
    real = renderer._text
    monkeypatch.setattr(renderer, "_text", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(render, "PROMPT_CACHE", 2)
    a, b, c = ([{"role": "user", "content": q}] for q in ("What is 2+3?", "What is 4+4?", "hi"))
    first = renderer.prompt_ids(a, None)
    first.append(-1)  # a caller's list is its own
    assert renderer.prompt_ids(a, None) == first[:-1] and len(calls) == 1
    renderer.prompt_ids(
        a,
        [
            {
                "type": "function",
                "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}},
            }
        ],
    )  # other tools: another render
    assert len(calls) == 2
    renderer.prompt_ids(a, None)  # a hit makes a the most recently used
    renderer.prompt_ids(b, None)  # the cache holds 2: the least recently used (a with tools) goes
    renderer.prompt_ids(a, None)
    assert len(calls) == 3
    renderer.prompt_ids(c, None)  # b goes
    renderer.prompt_ids(a, None)
    assert len(calls) == 4 and renderer.prompt_ids(c, None) == ChatRenderer(tiny_tokenizer).prompt_ids(c, None)

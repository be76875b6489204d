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

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

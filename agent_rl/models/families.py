"""Model families for ``agent-rl init-model tiny --family NAME``: special tokens, stop tokens, chat template.

A family is what a real checkpoint of that line brings besides its weights: the special tokens of
its chat format, the tokens that end an assistant turn (saved, as real checkpoints do, into
``generation_config.json``'s ``eos_token_id`` list) and a Jinja chat template. The templates are
written here from the families' published formats, including their history rewrites:

=========  ==========================================================================================
qwen2.5    ChatML, ``<tool_call>{json}</tool_call>`` (``agent_rl/models/tiny.py``'s template, unchanged)
qwen3      ChatML with ``<think>``: the reasoning of assistant turns before the last user message is
           dropped (a multi-step tool chain keeps its own)
llama3     Llama 3.1 headers, a "Cutting Knowledge Date / Today Date" system header on every render,
           tool calls as ``{"name", "parameters"}`` JSON, tool results in the ``ipython`` role,
           message text trimmed, every message closed by ``<|eot_id|>`` (``<|eom_id|>`` also stops)
mistral    ``[INST]`` / ``[TOOL_CALLS]`` / ``[TOOL_RESULTS]``; the system prompt and
           ``[AVAILABLE_TOOLS]`` go with the last user message only
gpt-oss    harmony: ``<|start|>ROLE<|channel|>C<|message|>...<|end|>``, calls on the commentary
           channel ``to=functions.NAME`` ending ``<|call|>``, results from ``functions.NAME
           to=assistant``; the analysis channel of turns before the last user message is dropped, and
           a final answer ends ``<|return|>`` only as the last message (``<|end|>`` in history)
=========  ==========================================================================================

An assistant message is read from its ``content`` (the raw text the policy sampled, what the
rollout engine stores) and from the ``tool_calls`` / ``reasoning_content`` / ``thinking`` fields.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# qwen2.5: the project's own tiny model (agent_rl/models/tiny.py)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# added (non-special) tokens, as in Qwen2.5: they survive decoding with skip_special_tokens
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<answer>", "</answer>"]

# ChatML. Tools are listed compactly (name, argument names, description): a tiny model pays for
# every prompt token; a real checkpoint brings its own template.
_FN = "{% set fn = tool.function if tool.function is defined else tool %}"
# ChatML's system turn: the system prompt, then the tools, compactly; the loop over the messages
# that follows skips the system message it has already rendered
_CHATML_SYSTEM = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n"
    "{% for tool in tools %}" + _FN + ""
    "- {{ fn.name }}({{ (fn.parameters.properties or {}).keys() | join(', ') }}): {{ fn.description }}\n"
    "{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
)
CHAT_TEMPLATE = (
    _CHATML_SYSTEM + ""
    "{% elif message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% elif message.role == 'assistant' %}"
    "<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}"
    "{% set fn = call.function if call.function is defined else call %}"
    '<tool_call>\n{"name": "{{ fn.name }}", "arguments": {{ fn.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}"
    "<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Family:
    name: str
    chat_template: str
    special_tokens: list[str]  # in the vocabulary first, skipped by decode(skip_special_tokens=True)
    eos_token: str  # the tokenizer's eos_token: what closes the assistant's turn in the template
    pad_token: str
    stop_tokens: list[str]  # every token that ends a sampled assistant turn (generation_config eos ids)
    added_tokens: list[str] = field(default_factory=list)  # non-special added tokens (kept on decode)
    architecture: str = "qwen2"  # qwen2 | llama | mistral (the transformers model class)


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"unknown model family '{name}'; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


# --- shared template pieces ------------------------------------------------------------------
_CALL_FN = "{% set fn = call.function if call.function is defined else call %}"
_ARGS_JSON = "{% if fn.arguments is string %}{{ fn.arguments }}{% else %}{{ fn.arguments | tojson }}{% endif %}"
_LAST_USER = (
    "{% set ns = namespace(last_user=-1, system='', tool_name='tool', body='') %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
)

# --- Qwen3: ChatML + <think> ----------------------------------------------------------------
QWEN3_TEMPLATE = (
    _LAST_USER + _CHATML_SYSTEM + ""
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif message.role == 'assistant' %}"
    "{% set content = message.content or '' %}{% set reasoning = '' %}"
    "{% if message.reasoning_content is defined and message.reasoning_content %}"
    "{% set reasoning = message.reasoning_content %}"
    "{% elif '</think>' in content %}"
    "{% set reasoning = content.split('</think>')[0].split('<think>')[-1] %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{% endif %}"
    "<|im_start|>assistant\n"
    "{% if reasoning and loop.index0 > ns.last_user %}<think>\n{{ reasoning.strip('\\n') }}\n</think>\n\n{% endif %}"
    "{{ content }}"
    "{% for call in message.tool_calls or [] %}" + _CALL_FN + ""
    "{% if content or not loop.first %}\n{% endif %}"
    '<tool_call>\n{"name": "{{ fn.name }}", "arguments": ' + _ARGS_JSON + "}\n</tool_call>"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)

# --- Llama 3.1 --------------------------------------------------------------------------------
LLAMA3_TEMPLATE = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "{% if tools %}Environment: ipython\n{% endif %}"
    "Cutting Knowledge Date: December 2023\n"
    "Today Date: {{ date_string if date_string is defined else '26 Jul 2024' }}\n\n"
    "{% if tools %}You can call these functions. To call one, reply with only the JSON "
    '{"name": function name, "parameters": {argument name: value}}.\n\n'
    "{% for tool in tools %}{{ tool | tojson }}\n\n{% endfor %}{% endif %}"
    "{% if messages[0].role == 'system' %}{{ messages[0].content | trim }}{% endif %}<|eot_id|>"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role in ('tool', 'ipython') %}"
    "<|start_header_id|>ipython<|end_header_id|>\n\n"
    "{% if message.content is string %}{{ message.content }}{% else %}{{ message.content | tojson }}{% endif %}<|eot_id|>"
    "{% elif message.role == 'assistant' %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{{ (message.content or '') | trim }}"
    "{% for call in message.tool_calls or [] %}" + _CALL_FN + ""
    "{% if message.content or not loop.first %}\n{% endif %}"
    '{"name": "{{ fn.name }}", "parameters": ' + _ARGS_JSON + "}"
    "{% endfor %}<|eot_id|>"
    "{% else %}"
    "<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n{{ message.content | trim }}<|eot_id|>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# --- Mistral (v3 tool format) -----------------------------------------------------------------
MISTRAL_TEMPLATE = (
    _LAST_USER + "{% if messages[0].role == 'system' %}{% set ns.system = messages[0].content %}{% endif %}"
    "<s>"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'user' %}"
    "{% if loop.index0 == ns.last_user and tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "[INST] {% if loop.index0 == ns.last_user and ns.system %}{{ ns.system }}\n\n{% endif %}{{ message.content }}[/INST]"
    "{% elif message.role == 'tool' %}"
    '[TOOL_RESULTS] {"content": {{ message.content | tojson }}'
    '{% if message.tool_call_id is defined %}, "call_id": "{{ message.tool_call_id }}"{% endif %}}[/TOOL_RESULTS]'
    "{% elif message.role == 'assistant' %}"
    "{{ message.content or '' }}"
    "{% if message.tool_calls %}[TOOL_CALLS] ["
    "{% for call in message.tool_calls %}" + _CALL_FN + ""
    '{% if not loop.first %}, {% endif %}{"name": "{{ fn.name }}", "arguments": ' + _ARGS_JSON + ""
    '{% if call.id is defined %}, "id": "{{ call.id }}"{% endif %}}'
    "{% endfor %}]{% endif %}</s>"
    "{% endif %}"
    "{% endfor %}"
)

# --- gpt-oss harmony --------------------------------------------------------------------------
_TS_TYPE = "{'string': 'string', 'integer': 'number', 'number': 'number', 'boolean': 'boolean', 'array': 'any[]', 'object': 'object'}"
# one message of a raw assistant turn: ``part`` is "<|channel|>C[ to=functions.NAME <|constrain|>json]<|message|>BODY[closer]"
_HARMONY_PART = (
    "{% if '<|message|>' in part %}"
    "{% set header = part.split('<|message|>')[0] %}{% set ns.body = part[header | length + 11:] %}"
    "{% for closer in ['<|end|>', '<|call|>', '<|return|>'] %}{% if ns.body.endswith(closer) %}"
    "{% set ns.body = ns.body[:ns.body | length - closer | length] %}{% endif %}{% endfor %}"
    "{% if 'to=functions.' in header %}{% set ns.tool_name = header.split('to=functions.')[1].split(' ')[0].split('<|')[0] %}{% endif %}"
    "{% if not header.startswith('<|channel|>analysis') or keep %}"
    "<|start|>assistant{{ header }}<|message|>{{ ns.body }}"
    "{% if ' to=' in header %}<|call|>"
    "{% elif header.startswith('<|channel|>final') and loop.last and final_last %}<|return|>"
    "{% else %}<|end|>{% endif %}"
    "{% endif %}"
    "{% else %}<|start|>assistant<|channel|>final<|message|>{{ part }}{% if loop.last and final_last %}<|return|>{% else %}<|end|>{% endif %}"
    "{% endif %}"
)
HARMONY_TEMPLATE = (
    _LAST_USER + "<|start|>system<|message|>Knowledge cutoff: 2024-06\n"
    "Current date: {{ date_string if date_string is defined else '2025-08-05' }}\n\n"
    "Reasoning: {{ reasoning_effort if reasoning_effort is defined else 'medium' }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "{% if tools %}\nCalls to these tools must go to the commentary channel: 'functions'.{% endif %}<|end|>"
    "{% if messages[0].role == 'system' or tools %}<|start|>developer<|message|>"
    "{% if messages[0].role == 'system' %}# Instructions\n\n{{ messages[0].content }}{% if tools %}\n\n{% endif %}{% endif %}"
    "{% if tools %}# Tools\n\n## functions\n\nnamespace functions {\n\n"
    "{% for tool in tools %}" + _FN + "// {{ fn.description }}\n"
    "{% set props = (fn.parameters or {}).properties or {} %}{% set required = (fn.parameters or {}).required or [] %}"
    "{% if props %}type {{ fn.name }} = (_: {\n"
    "{% for pname, p in props.items() %}{% if p.description %}// {{ p.description }}\n{% endif %}"
    "{{ pname }}{% if pname not in required %}?{% endif %}: {{ " + _TS_TYPE + ".get(p.type, 'any') }},\n"
    "{% endfor %}}) => any;\n\n"
    "{% else %}type {{ fn.name }} = () => any;\n\n{% endif %}"
    "{% endfor %}} // namespace functions{% endif %}<|end|>"
    "{% endif %}"
    "{% for message in messages %}"
    "{% set keep = loop.index0 > ns.last_user %}{% set final_last = loop.last and not add_generation_prompt %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'tool' %}"
    "<|start|>functions.{{ message.name if message.name is defined else ns.tool_name }} to=assistant"
    "<|channel|>commentary<|message|>{{ message.content }}<|end|>"
    "{% elif message.role == 'assistant' %}"
    "{% set content = message.content or '' %}"
    "{% set thinking = message.thinking if message.thinking is defined else (message.reasoning_content if message.reasoning_content is defined else '') %}"
    "{% if thinking and keep %}<|start|>assistant<|channel|>analysis<|message|>{{ thinking }}<|end|>{% endif %}"
    "{% if '<|channel|>' in content %}"
    "{% for part in content.split('<|start|>assistant') if part %}" + _HARMONY_PART + "{% endfor %}"
    "{% elif message.tool_calls %}"
    "{% if content %}<|start|>assistant<|channel|>commentary<|message|>{{ content }}<|end|>{% endif %}"
    "{% for call in message.tool_calls %}" + _CALL_FN + "{% set ns.tool_name = fn.name %}"
    "<|start|>assistant<|channel|>commentary to=functions.{{ fn.name }} <|constrain|>json<|message|>"
    + _ARGS_JSON
    + "<|call|>"
    "{% endfor %}"
    "{% else %}"
    "<|start|>assistant<|channel|>final<|message|>{{ content }}{% if final_last %}<|return|>{% else %}<|end|>{% endif %}"
    "{% endif %}"
    "{% else %}"
    "<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


register_family(
    Family("qwen2.5", CHAT_TEMPLATE, SPECIAL_TOKENS, "<|im_end|>", "<|endoftext|>", ["<|im_end|>"], ADDED_TOKENS)
)
register_family(
    Family(
        "qwen3",
        QWEN3_TEMPLATE,
        SPECIAL_TOKENS,
        "<|im_end|>",
        "<|endoftext|>",
        ["<|im_end|>", "<|endoftext|>"],
        ADDED_TOKENS + ["<think>", "</think>"],
    )
)
register_family(
    Family(
        "llama3",
        LLAMA3_TEMPLATE,
        [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
            "<|finetune_right_pad_id|>",
        ],
        "<|eot_id|>",
        "<|finetune_right_pad_id|>",
        ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
        ["<answer>", "</answer>"],
        architecture="llama",
    )
)
register_family(
    Family(
        "mistral",
        MISTRAL_TEMPLATE,
        [
            "<unk>",
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
            "<pad>",
        ],
        "</s>",
        "<pad>",
        ["</s>"],
        ["<answer>", "</answer>"],
        architecture="mistral",
    )
)
register_family(
    Family(
        "gpt-oss",
        HARMONY_TEMPLATE,
        [
            "<|startoftext|>",
            "<|endoftext|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|return|>",
            "<|call|>",
        ],
        "<|return|>",
        "<|endoftext|>",
        ["<|return|>", "<|call|>", "<|endoftext|>"],
        ["<answer>", "</answer>"],
    )
)


# --- the tokenizer corpus in each family's format -----------------------------------------------
_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def structured(messages: list[dict], family: str, index: int) -> list[dict]:
    """A corpus conversation (assistant calls written as Hermes ``<tool_call>`` text) rewritten with
    ``tool_calls`` fields, so each family's template renders the calls its own way; every other
    conversation's assistant turns also carry a short reasoning (qwen3, gpt-oss)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("content"), str):
            calls = [json.loads(c) for c in _HERMES_CALL.findall(m["content"])]
            content = _HERMES_CALL.sub("", m["content"]).strip()
            m = {"role": "assistant", "content": content}
            if calls:
                m["tool_calls"] = [{"type": "function", "function": c} for c in calls]
            if index % 2 and family in ("qwen3", "gpt-oss"):
                m["reasoning_content" if family == "qwen3" else "thinking"] = "I should check this with the tool first."
        out.append(m)
    return out

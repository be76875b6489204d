"""gpt-oss's harmony format, written here from its published description (no harmony package: those
download an encoding at first use and work in o200k ids, not the model's own tokenizer).

The assistant writes messages ``<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>...``,
each after the first opened by ``<|start|>assistant``:

* ``analysis``: reasoning, closed by ``<|end|>``; never read for calls or answers, and one left
  open (the text ends inside it) means the turn has no call and no answer;
* ``commentary to=functions.NAME <|constrain|>json``: a call of tool NAME with JSON arguments, closed
  by ``<|call|>`` (the end of the turn); ``to=python`` runs its content as code (a ``python`` call).
  A message with a recipient is a call in any channel (gpt-oss calls its built-in tools from analysis);
* ``final``: the answer, closed by ``<|return|>``; ``<answer>...</answer>`` is read there.

Several calls in one turn are several call messages, in order. Results are ``tool`` messages with
the tool's ``name``; the template renders them as ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>...<|end|>``.
"""

from __future__ import annotations

import json
import re

from tools.base import ToolCall
from tools.formats.base import Reading, ToolFormat, call_error, checked_call, dump_json, register_format

CALL, START = "<|call|>", "<|start|>"
_TOKENS = re.compile(r"<\|(start|end|call|return|message)\|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([^\s<]*)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_NAME = re.compile(r"[^\s<]+")


def messages(text: str) -> tuple[list[tuple[str, str, str | None]], str]:
    """The messages of an assistant's text as (header, content, how it ended: ``end`` / ``call`` /
    ``return``, ``start`` when the next message cut it, None when the text ended inside it), and
    the text outside any message."""
    out, stray = [], []
    header_start, header, content_start = 0, "", None
    for tok in _TOKENS.finditer(text):
        kind = tok.group(1)
        if content_start is None:  # in a header
            if kind == "message":
                header, content_start = text[header_start : tok.start()], tok.end()
            elif kind == "start":
                stray.append(text[header_start : tok.start()])
                header_start = tok.start()
            else:  # a message closed before it began: its header is stray text
                stray.append(text[header_start : tok.start()])
                header_start = tok.end()
        elif kind != "message":
            out.append((header, text[content_start : tok.start()], kind))
            content_start = None
            header_start = tok.start() if kind == "start" else tok.end()
    if content_start is not None:
        out.append((header, text[content_start:], None))
    else:
        stray.append(text[header_start:])
    return out, "".join(stray)


class HarmonyFormat(ToolFormat):
    name = "harmony"
    example = "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>"
    reasoning = None  # the analysis channel, read in ``read``
    markers = ("<|channel|>", "to=functions.")
    reserved = ("<|",)  # every harmony token starts so
    end_of_calls = CALL  # a call message ends the turn with <|call|>, an answer with <|return|>

    def read(self, text: str) -> Reading:
        found, stray = messages(text)
        out = Reading()
        visible = [stray] if stray.strip() else []
        for header, content, ended in found:
            recipient = _RECIPIENT.search(header)
            channel = _CHANNEL.search(header)
            if recipient is not None:
                self._call(recipient.group(1), content, out)
            elif channel is not None and channel.group(1) == "analysis":
                if ended is None:
                    return Reading(
                        errors=["unterminated analysis message: no tool call or answer is read before <|end|>"]
                    )
            else:
                visible.append(content)
        out.visible = "\n".join(visible)
        return out

    @staticmethod
    def _call(recipient: str, content: str, out: Reading) -> None:
        if recipient == "python":
            out.calls.append(ToolCall(name="python", arguments={"code": content}))
            return
        name = recipient.removeprefix("functions.")
        try:
            args = json.loads(content.strip())
            if not isinstance(args, dict):
                raise ValueError("the arguments must be a JSON object")
            out.calls.append(checked_call(name, args))
        except (ValueError, RecursionError) as e:
            out.errors.append(call_error(e))

    def render_calls(self, calls: list[ToolCall]) -> str:
        for c in calls:
            if not _NAME.fullmatch(c.name):
                raise ValueError(f"'{c.name}' cannot be a harmony recipient (no spaces, no '<')")
        return f"{CALL}{START}assistant".join(
            f"<|channel|>commentary to=functions.{c.name} <|constrain|>json<|message|>{dump_json(c.arguments, self.reserved)}"
            for c in calls
        )

    def render_reply(self, text: str) -> str:
        return f"<|channel|>final<|message|>{text}"


HARMONY = register_format(HarmonyFormat())

"""Scripted experts for the JVM text games (TextWorld-Express, ScienceWorld): the upstream gold
path, a noisy version of it and a random-valid-action baseline. Functions of the conversation.

Each finds its game by the ``Game <tag>.`` of the system prompt (``envs.text_games.session_of``)
and the gold path the env stored for that tag at reset (``envs.text_games.GOLD``), so it must run
in the process of the env, as ``agent-rl sft`` / ``agent-rl eval`` run scripted policies. It writes
plain commands, or ``act`` calls in the run's ``tool_format`` when the system prompt asks for the
tool.

The noisy expert leaves the gold path only in ways it can come back from: a harmless command
(looking, the inventory, examining: the world is unchanged) or a ``move`` followed by the move
back. Any other random action (taking, opening, cooking) could make the rest of the gold path
fail, since the upstream gives a gold path only for a game's start.
"""

from __future__ import annotations

import random
import re

from envs.text_games import GOLD, ActTool
from tools.base import ToolCall
from tools.formats import get_format

_SESSION = re.compile(r"Game ([0-9a-f]{10})\.")
_VALID = re.compile(r"^Valid actions: (.*?)(?: \(\+\d+ more\))?$", re.MULTILINE)
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east", "up": "down", "down": "up"}
HARMLESS = ("look around", "inventory", "examine ", "look at ", "read ")


def session(messages: list[dict]) -> str | None:
    for m in messages:
        if m["role"] == "system":
            found = _SESSION.search(m["content"])
            if found:
                return found.group(1)
    return None


def gold_path(messages: list[dict]) -> list[str]:
    tag = session(messages)
    if tag is None or tag not in GOLD:
        raise ValueError("no gold path for this game: gold experts run in the env's process (agent-rl sft / eval)")
    return GOLD[tag]


def sent_commands(messages: list[dict], tool_format: str = "hermes") -> list[str]:
    """The commands of the assistant's turns so far, normalized as the env reads them."""
    fmt, out = get_format(tool_format), []
    for m in messages:
        if m["role"] != "assistant":
            continue
        reading = fmt.read(m["content"])
        text = str(reading.calls[0].arguments.get("command", "")) if reading.calls else reading.visible
        out.append(" ".join(text.split()).rstrip("."))
    return out


def shown_valid(messages: list[dict]) -> list[str]:
    """The valid actions of the last observation that lists them (empty when none does)."""
    for m in reversed(messages):
        if m["role"] in ("user", "tool"):
            found = _VALID.findall(m["content"])
            if found:
                return [a.strip() for a in found[-1].split(", ") if a.strip()]
    return []


def write(command: str, messages: list[dict], tool_format: str = "hermes") -> str:
    """``command`` as the env asks for it: an ``act`` call when the system prompt names the tool."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    if "act tool" in system:
        return get_format(tool_format).render_calls([ToolCall(ActTool.name, {"command": command})])
    return command


def position(commands: list[str], gold: list[str]) -> tuple[int, str | None]:
    """``(gold steps done, the move that undoes a detour or None)`` after ``commands``."""
    done, back = 0, None
    for c in commands:
        if back is not None and c == back:
            back = None
        elif done < len(gold) and c == gold[done]:
            done += 1
        elif c.startswith(("move ", "go ")) and c.split()[-1] in OPPOSITE:
            back = " ".join(c.split()[:-1] + [OPPOSITE[c.split()[-1]]])
    return done, back


def gold_action(messages: list[dict], tool_format: str = "hermes") -> str:
    gold = gold_path(messages)
    done, back = position(sent_commands(messages, tool_format), gold)
    if back is not None:
        return back
    return gold[done] if done < len(gold) else "look around"


def noisy_action(messages: list[dict], rng: random.Random, p_noise: float, tool_format: str = "hermes") -> str:
    gold = gold_path(messages)
    done, back = position(sent_commands(messages, tool_format), gold)
    if back is not None:
        return back
    if rng.random() < p_noise:
        detours = [
            a
            for a in shown_valid(messages)
            if a.startswith(HARMLESS) or (a.startswith("move ") and a.split()[-1] in OPPOSITE)
        ]
        return rng.choice(detours or ["look around", "inventory"])
    return gold[done] if done < len(gold) else "look around"


def random_valid_action(messages: list[dict], rng: random.Random) -> str:
    return rng.choice(shown_valid(messages) or ["look around"])

"""CoinCollector's rooms as the player sees them: the room's name, whether the coin is there, and
its exits (a closed door, or the room seen through an open door or a doorway), read from the
upstream's sentences. ``exits_view`` writes them in one short line (``view="exits"`` of
TextWorldExpress-v0); ``explorer`` (``envs.textworld_express.policies``) plans on them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DIRECTIONS = ("north", "south", "east", "west")
CLOSED = "closed door"  # an exit's value when a closed door hides the room behind it

_ROOM = re.compile(r"You are in the ([a-z][a-z -]*)\.")
_CLOSED = re.compile(r"To the (North|South|East|West) you see a closed [a-z -]+ door\.")
_OPEN = re.compile(r"Through an open [a-z -]+ door, to the (North|South|East|West) you see the ([a-z][a-z -]*)\.")
_DOORWAY = re.compile(r"To the (North|South|East|West) you see the ([a-z][a-z -]*)\.")
_COIN = re.compile(r"\b(?:see|is also) a coin\b")
_EXITS = re.compile(r"^You are in the ([a-z][a-z -]*)\.( You see a coin\.)? Exits: (.*)\.$", re.MULTILINE)
_REVEAL = re.compile(r"You open the [a-z -]+ door, revealing the ([a-z][a-z -]*)\.")


@dataclass
class Room:
    name: str
    coin: bool = False
    exits: dict[str, str] = field(default_factory=dict)  # direction -> a room's name, or CLOSED


def read_room(text: str) -> Room | None:
    """The room an observation describes: the upstream's text (``look around``, a move) or the
    ``exits`` view of it; None when the text describes no room (an action's reply)."""
    found = _EXITS.search(text)
    if found:
        exits = {}
        for part in found.group(3).split(", "):
            direction, _, where = part.partition(" ")
            exits[direction] = where
        return Room(found.group(1), coin=found.group(2) is not None, exits=exits)
    found = _ROOM.search(text)
    if found is None:
        return None
    room = Room(found.group(1), coin=_COIN.search(text) is not None)
    for direction in _CLOSED.findall(text):
        room.exits[direction.lower()] = CLOSED
    for direction, name in [*_OPEN.findall(text), *_DOORWAY.findall(text)]:
        room.exits[direction.lower()] = name
    return room


def exits_view(text: str) -> str:
    """A room's description in one line (``You are in the kitchen. You see a coin. Exits: north
    closed door, east pantry.``), the furniture left out; any other reply as it is."""
    room = read_room(text)
    if room is None:
        return text
    coin = " You see a coin." if room.coin else ""
    exits = ", ".join(f"{d} {room.exits[d]}" for d in DIRECTIONS if d in room.exits) or "none"
    return f"You are in the {room.name}.{coin} Exits: {exits}."


def revealed(text: str) -> str | None:
    """The room an ``open door to ...`` revealed, or None."""
    found = _REVEAL.search(text)
    return found.group(1) if found else None

"""Scripted policies for TextWorldExpress-v0 (``eval.policy=envs.textworld_express.policies:gold``).

* ``gold``: the upstream gold path (``generateGoldPath``), one command per turn: succeeds on every
  game within its length;
* ``noisy_gold``: the gold path with detours: with probability ``p_noise`` a random harmless valid
  action (look, inventory, examine) or a move and the move back (``envs.text_game_experts``); the
  SFT teacher (``sft_teacher``): demonstrations that succeed but leave turns for RL to save;
* ``random_valid``: a uniformly random action of the shown valid actions (a baseline);
* ``explorer`` (CoinCollector): no gold path, only what the conversation shows: the coin when it
  is in the room, else a neighbouring room not yet visited, else a closed door to open, else the
  shortest known way back to a room that still has one; ``noisy_explorer`` (``p_noise`` 0.2) goes
  toward a random exit of the room instead, at times: the teacher of the long CoinCollector.
"""

from __future__ import annotations

import random

from envs.text_game_experts import gold_action, noisy_action, random_valid_action, sent_commands, write
from envs.textworld_express.env import TextWorldExpressEnv
from envs.textworld_express.rooms import CLOSED, DIRECTIONS, Room, read_room, revealed


def gold(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(gold_action(messages, tool_format), messages, tool_format)


def noisy_gold(messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes") -> str:
    return write(noisy_action(messages, rng, p_noise, tool_format), messages, tool_format)


def random_valid(messages: list[dict], rng: random.Random, *, tool_format: str = "hermes") -> str:
    return write(random_valid_action(messages, rng), messages, tool_format)


def corpus_conversations(n: int, rng: random.Random):
    """Noisy-gold episodes on train games of coin, cooking and twc, as ``(messages, tools)``, for the
    tiny tokenizer (at most 300; one JVM per game)."""

    games = {g: TextWorldExpressEnv(game=g, max_turns=40) for g in ("coin", "cookingworld", "twc")}
    try:
        for i in range(min(n, 300)):
            env = games[("coin", "cookingworld", "twc")[i % 3]]
            obs, info = env.reset(seed=rng.randrange(1000))
            messages = list(obs)
            while True:
                action = noisy_gold(messages, rng)
                obs, _, terminated, truncated, _ = env.step(action)
                messages += [{"role": "assistant", "content": action}] + obs
                if terminated or truncated:
                    break
            yield messages, info["tools"]
    finally:
        for env in games.values():
            env.close()


def explorer(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    return write(explore_action(messages, rng, 0.0, tool_format), messages, tool_format)


def noisy_explorer(
    messages: list[dict], rng: random.Random, p_noise: float = 0.2, *, tool_format: str = "hermes"
) -> str:
    return write(explore_action(messages, rng, p_noise, tool_format), messages, tool_format)


def explore_action(messages: list[dict], rng: random.Random | None, p_noise: float, tool_format: str = "hermes") -> str:
    """CoinCollector's explorer: what a player who sees only the conversation would do. Take the
    coin when it is in the room; else walk into a neighbouring room not yet visited; else open a
    closed door; else walk the shortest known way to the nearest room that still has one of those.
    With probability ``p_noise`` a move or door opening toward a random exit of the room instead."""
    here, rooms, visited = explored(messages, tool_format)
    if here is None:
        return "look around"
    exits = rooms[here].exits
    if rng is not None and p_noise > 0 and rng.random() < p_noise:  # any way out of the room, open or not
        return rng.choice(
            [f"open door to {d}" if exits[d] == CLOSED else f"move {d}" for d in exits] or ["look around"]
        )
    if rooms[here].coin:
        return "take coin"

    def frontier(name: str) -> str | None:  # the first step of exploring from ``name``, if any
        exits = rooms[name].exits if name in rooms else {}
        for d in DIRECTIONS:
            if d in exits and exits[d] != CLOSED and exits[d] not in visited:
                return f"move {d}"
        for d in DIRECTIONS:
            if exits.get(d) == CLOSED:
                return f"open door to {d}"
        return None

    step = frontier(here)
    if step is not None:
        return step
    first: dict[str, str] = {here: ""}  # breadth-first over the known passages: the first move toward each room
    queue = [here]
    while queue:
        name = queue.pop(0)
        for d in DIRECTIONS:
            nxt = rooms[name].exits.get(d) if name in rooms else None
            if nxt is None or nxt == CLOSED or nxt in first:
                continue
            first[nxt] = first[name] or f"move {d}"
            if frontier(nxt) is not None:
                return first[nxt]
            queue.append(nxt)
    return "look around"  # every known room explored and no coin: look again


def explored(messages: list[dict], tool_format: str = "hermes") -> tuple[str | None, dict[str, Room], set[str]]:
    """``(the room the player is in, every room seen with its exits, the rooms visited)`` from the
    observations of the conversation and the doors its commands opened."""
    commands = iter(sent_commands(messages, tool_format))
    here, rooms, visited, last = None, {}, set(), ""
    for m in messages:
        if m["role"] == "assistant":
            last = next(commands, "")
            continue
        if m["role"] not in ("user", "tool"):
            continue
        text = m["content"]
        room = read_room(text)
        if room is not None:
            here = room.name
            visited.add(here)
            known = rooms.setdefault(here, Room(here))
            known.coin = room.coin
            known.exits.update(room.exits)
            continue
        behind = revealed(text)
        if behind is not None and here is not None and last.startswith("open door to "):
            rooms[here].exits[last.split()[-1]] = behind
        elif here is not None and last == "take coin" and "You take the coin" in text:
            rooms[here].coin = False
    return here, rooms, visited

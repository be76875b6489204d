"""Fuzzed ``env.step`` of every listed environment (``agent-rl envs list``): after ``reset``, any
text is a valid 5-tuple whose observation is a list of messages, never an exception, and text with
neither a call, a fence, an answer nor a move is ``action_valid=False``.

Random text that reaches a tool runs as code or shell commands: that happens only in ``bwrap``
sandboxes (no network, no host files). Where bwrap does not work, the actions lose their call and
fence markers, so nothing random reaches the unisolated ``process`` backend.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re

import pytest
from fuzz_helpers import MARKERS, adversarial_text, fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st

from agent_rl.run.envloader import env_class, listed_env_ids
from sandbox.registry import available_backends

BWRAP = available_backends()["bwrap"][0] and not os.environ.get("FUZZ_NO_BWRAP")  # set: try the fallback
ENV_IDS = listed_env_ids([])
NEEDS_DOCKER_OR_NETWORK: set[str] = set()  # none of the listed envs needs either
# a reset loads a task into a JVM (ScienceWorld: 0.7-3 s): these get fewer examples, the same properties
SLOW_RESET = [e for e in ENV_IDS if e == "agent_rl/ScienceWorld-v0"]
FAST_RESET = [e for e in ENV_IDS if e not in NEEDS_DOCKER_OR_NETWORK and e not in SLOW_RESET]


def defuse(text: str) -> str:
    """The text without what makes an env run it (calls, fences), when bwrap is not here."""
    if BWRAP:
        return text
    while "<tool_call>" in text or "```" in text:  # until stable: "<tool<tool_call>_call>" leaves one
        text = text.replace("<tool_call>", "").replace("```", "")
    return text


@pytest.fixture(scope="module")
def made():
    """One env per id for the whole module (each example resets it), closed at the end."""
    cache = {}

    def make(env_id: str):
        if env_id not in cache:
            import gymnasium as gym

            params = inspect.signature(env_class(env_id)).parameters
            kwargs = {"sandbox_backend": "bwrap" if BWRAP else "process"} if "sandbox_backend" in params else {}
            cache[env_id] = gym.make(env_id, disable_env_checker=True, **kwargs)
        return cache[env_id]

    yield make
    for env in cache.values():
        env.close()


def check_step(env, out) -> None:
    assert isinstance(out, tuple) and len(out) == 5
    obs, reward, terminated, truncated, info = out
    assert env.observation_space.contains(obs), obs
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info, dict) and isinstance(info["action_valid"], bool) and isinstance(info["state_key"], str)


ANSWERS = st.builds(
    lambda body: f"<answer>{body}</answer>",
    st.text(max_size=20)
    | st.sampled_from(
        [
            "1/" + "9" * 5000,
            "9" * 5000,
            "\\frac{1}{0}",
            "1/0",
            "-0",
            "1e400",
            "\\boxed{" * 50,
            "nan",
            "x = 3",
            "3",
            "0.5",
        ]
    ),
)
# well-formed calls of the real tools with random arguments: random code and shell lines run (in bwrap)
CALLS = st.builds(
    lambda name, args: "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>",
    st.sampled_from(["python", "shell", "read_file", "write_file", "submit", "move"]),
    st.dictionaries(
        st.sampled_from(["code", "command", "path", "content", "direction"]),
        st.text(max_size=40)
        | st.sampled_from(
            [
                "print(1)",
                "ls -la",
                "../../etc/passwd",
                "/dev/zero",
                "up",
                "\x00",
                "a" * 200_000,
                "\ud800",
                "echo \udc00",
            ]
        ),
        max_size=2,
    ),
)
MOVES = st.sampled_from(["up", "Down.", " LEFT ", "right\n", "up down", "rıght", "RİGHT", "ｕｐ", "up\u3000"])
ACTIONS = (adversarial_text() | st.text() | ANSWERS | MOVES | CALLS).map(defuse)


def any_text_steps(made, env_id, seed, actions):
    env = made(env_id)
    env.reset(seed=seed)
    for action in actions:
        out = env.step(action)
        check_step(env, out)
        if out[2] or out[3]:
            break


@pytest.mark.parametrize("env_id", FAST_RESET)
@fuzz_settings(40)
@given(seed=st.integers(0, 999), actions=st.lists(ACTIONS, min_size=1, max_size=3))
@example(seed=1, actions=["<answer>1/" + "9" * 5000 + "</answer>"])  # MathTool: int() refused 5000 digits
@example(seed=1, actions=["rıght"])  # Maze, Sokoban: a KeyError (Unicode case folding)
@example(seed=1, actions=["RİGHT"])
@example(seed=2, actions=["<tool_call>" + "[" * 100_000 + "</tool_call>"])  # a RecursionError in the parser
# a lone surrogate escape: UnicodeEncodeError from ShellTask's state_key, InfraError from the shell tool
@example(seed=1, actions=['<tool_call>{"name": "read_file", "arguments": {"path": "\\ud800"}}</tool_call>'])
@example(seed=1, actions=['<tool_call>{"name": "shell", "arguments": {"command": "\\ud800"}}</tool_call>'])
def test_any_text_steps(made, env_id, seed, actions):
    any_text_steps(made, env_id, seed, actions)


@pytest.mark.parametrize("env_id", SLOW_RESET)
@fuzz_settings(6)
@given(seed=st.integers(0, 999), actions=st.lists(ACTIONS, min_size=1, max_size=3))
@example(seed=1, actions=["<answer>1/" + "9" * 5000 + "</answer>"])  # MathTool: int() refused 5000 digits
@example(seed=1, actions=["rıght"])  # Maze, Sokoban: a KeyError (Unicode case folding)
@example(seed=1, actions=["RİGHT"])
@example(seed=2, actions=["<tool_call>" + "[" * 100_000 + "</tool_call>"])  # a RecursionError in the parser
# a lone surrogate escape: UnicodeEncodeError from ShellTask's state_key, InfraError from the shell tool
@example(seed=1, actions=['<tool_call>{"name": "read_file", "arguments": {"path": "\\ud800"}}</tool_call>'])
@example(seed=1, actions=['<tool_call>{"name": "shell", "arguments": {"command": "\\ud800"}}</tool_call>'])
@example(seed=0, actions=['"\ud800"'])  # ScienceWorld: py4j cannot send a lone surrogate (was InfraError)
def test_any_text_steps_slow_reset(made, env_id, seed, actions):
    any_text_steps(made, env_id, seed, actions)


_DIRECTION = re.compile(r"^\s*(up|down|left|right)\s*\.?\s*$", re.IGNORECASE)
GARBAGE = st.text(st.characters(blacklist_characters="<`")).filter(lambda t: not _DIRECTION.match(t)) | st.sampled_from(
    [m.replace("<", "").replace("`", "") for m in MARKERS]
)


def garbage_is_invalid(made, env_id, seed, text):
    env = made(env_id)
    env.reset(seed=seed)
    out = env.step(text)
    check_step(env, out)
    obs, reward, terminated, _, info = out
    assert info["action_valid"] is False
    if getattr(env.unwrapped, "scoring", None) == "official":
        return  # BFCL's own verdict decides the reward and the turn: any output without a call passes irrelevance
    # a one-try env (BFCL-Calls-v0, max_turns 1) ends on it; every other env lets the episode go on
    assert reward == 0.0 and (env.unwrapped.max_turns == 1 or not terminated)
    assert len(obs) == 1
    if not getattr(env.unwrapped, "upstream_replies", False):  # a text game answers in the game's own words
        assert obs[0]["content"].startswith("error:")


@pytest.mark.parametrize("env_id", FAST_RESET)
@fuzz_settings(40)
@given(seed=st.integers(0, 999), text=GARBAGE)
@example(seed=0, text="rıght")
def test_garbage_is_invalid(made, env_id, seed, text):
    garbage_is_invalid(made, env_id, seed, text)


@pytest.mark.parametrize("env_id", SLOW_RESET)
@fuzz_settings(6)
@given(seed=st.integers(0, 999), text=GARBAGE)
@example(seed=0, text="rıght")
def test_garbage_is_invalid_slow_reset(made, env_id, seed, text):
    garbage_is_invalid(made, env_id, seed, text)

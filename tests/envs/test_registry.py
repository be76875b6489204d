"""The registry's listing convention (`agent-rl envs list`): every env class says its tools and reward."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs
from agent_rl.cli import main


@pytest.mark.parametrize("env_id", sorted(envs.REGISTERED))
def test_env_card_matches_the_env(env_id):
    card = envs.card(env_id)
    assert card["description"] and card["reward"], f"{env_id}: metadata needs 'reward' (see envs.CARD_KEYS)"
    assert isinstance(card["max_turns"], int) and card["max_turns"] >= 1
    env = gym.make(env_id)
    try:
        _, info = env.reset(seed=0)
        # every JSON tool is listed (a card may also name text actions, e.g. Maze's "move"); an env
        # whose tools change with the task (BFCL) says so with the one entry "the task's functions"
        assert card["tools"]
        if tuple(card["tools"]) != ("the task's functions",):
            assert {t["function"]["name"] for t in info["tools"]} <= set(card["tools"])
        else:
            assert info["tools"]
        assert env.unwrapped.max_turns == card["max_turns"]
    finally:
        env.close()


def test_envs_list_prints_every_env(capsys):
    assert main(["envs", "list", "--width", "250"]) == 0
    out = capsys.readouterr().out
    for env_id in envs.REGISTERED:
        assert env_id in out
    row = next(line for line in out.splitlines() if "agent_rl/CodeExec-v0" in line)
    assert "python, submit" in row and " 4 " in row and "1 if the hidden tests pass" in row

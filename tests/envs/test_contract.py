"""Every registered environment: Gymnasium's checker plus our contract (environments speak messages;
seeded resets are deterministic; a malformed action is an error observation, never an exception)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs


@pytest.mark.parametrize("env_id", sorted(envs.REGISTERED))
def test_env_contract(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        # seeded reset is deterministic and says which tools exist and which task this is
        obs_a, info_a = env.reset(seed=123)
        obs_b, info_b = env.reset(seed=123)
        assert obs_a == obs_b and info_a["task_id"] == info_b["task_id"]
        assert isinstance(info_a["tools"], list) and "state_key" in info_a
        assert env.observation_space.contains(obs_a)
        # arbitrary or malformed actions give an error observation, never an exception
        for action in ["", "\x00\uffff" * 50, "<tool_call>{oops</tool_call>", "<tool_call>", "x" * 5000]:
            env.reset(seed=1)
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and reward == 0.0
            assert info["action_valid"] is False and isinstance(info["state_key"], str)
    finally:
        env.close()
    env.close()  # twice is safe

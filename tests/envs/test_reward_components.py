"""Reward components (envs/rewards.py): R1 format and language consistency, Laguna tool-error
shaping, hand-scored; ShapedEnv adds them to a real env's reward through the engine's async path."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

from envs.arithmetic.policies import answer_text, tool_call_text
from envs.rewards import (
    LanguageConsistency,
    R1Format,
    ShapedEnv,
    ToolErrorShaping,
    register_shaped,
    target_language_share,
    well_formed,
)


def test_r1_format_scores_the_share_of_well_formed_actions_on_the_last_step():
    assert well_formed("<think>add them</think><answer>3</answer>")
    assert not well_formed("<answer>3</answer>")  # no thinking
    assert not well_formed("<think> </think><answer>3</answer>")  # empty thinking
    assert not well_formed("<think>a</think>")  # nothing after it
    assert not well_formed("<think>a</think><think>b</think> x")  # two blocks
    r1 = R1Format(weight=1.0)
    #  step  action                          well-formed  added
    #  1     <think>..</think> call          yes          0 (not done)
    #  2     bare answer                     no           1 * 1/2 (done)
    assert r1.step("<think>use the tool</think><tool_call>x</tool_call>", 0.0, False, {}) == 0.0
    assert r1.step("<answer>3</answer>", 1.0, True, {}) == 0.5
    r1.reset()
    assert r1.step("<think>t</think><answer>3</answer>", 1.0, True, {}) == 1.0


def test_language_consistency_is_the_target_languages_share_of_the_chain_of_thought():
    # words: we need 计 算 now (each CJK character is a word) -> 3 English of 5
    assert target_language_share("we need 计算 now", "en") == pytest.approx(3 / 5)
    assert target_language_share("我们 需要", "zh") == 1.0
    assert target_language_share("12 + 7 = 19", "en") == 1.0  # no words: nothing inconsistent
    lc = LanguageConsistency("en", weight=0.5)
    # only the <think> block counts when there is one: "think in english 先" = 3 en of 4 words
    assert lc.step("<think>think in english 先</think><answer>中文</answer>", 1.0, True, {}) == pytest.approx(
        0.5 * 3 / 4
    )
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        LanguageConsistency("xx")


def test_tool_error_shaping_reads_the_tool_env_step_info():
    shaping = ToolErrorShaping()
    assert shaping.step("", 0.0, False, {"action_valid": True, "tool_calls": 1}) == 0.0
    assert shaping.step("", 0.0, False, {"action_valid": False, "tool_calls": 0}) == -0.1  # malformed
    assert shaping.step("", 0.0, False, {"action_valid": False, "tool_calls": 1}) == -0.05  # the call failed


def test_shaped_arithmetic_env_adds_the_components_to_its_reward():
    env_id = "agent_rl/ArithmeticShapedTest-v0"
    register_shaped(env_id, "agent_rl/Arithmetic-v0", lambda: [R1Format(), ToolErrorShaping()])
    try:
        env = gym.make(env_id, sandbox_backend="process")
        shaped = env.unwrapped
        assert isinstance(shaped, ShapedEnv) and hasattr(shaped, "astep")  # the engine's async path

        async def episode():
            _, info = await shaped.areset(seed=3)
            question = info["task"]
            bad = await shaped.astep("no call, no answer")  # malformed: -0.1
            call = await shaped.astep("<think>compute it</think>" + tool_call_text(question["expression"]))
            value = call[0][0]["content"].strip()
            done = await shaped.astep(answer_text(value))
            return bad, call, done

        bad, call, done = asyncio.run(episode())
        assert bad[1] == pytest.approx(-0.1) and bad[4]["reward_components"] == {
            "env": 0.0,
            "r1_format": 0.0,
            "tool_error": -0.1,
        }
        assert call[1] == 0.0
        # right answer (env 1.0) + R1 format on the last step: 1 of 3 actions well-formed
        assert done[2] and done[1] == pytest.approx(1.0 + 1 / 3)
        # the episode's totals by component (the finished trajectory's info keeps them)
        assert done[4]["reward_components"] == pytest.approx({"env": 1.0, "r1_format": 1 / 3, "tool_error": -0.1})
        env.close()
    finally:
        gym.registry.pop(env_id, None)


def test_a_registered_shaped_env_resets_through_gymnasiums_sync_api():
    """``gym.make(id).reset()`` returns (observation, info), the same as ``areset``; ``step`` too."""
    env_id = "agent_rl/ArithmeticShapedSyncTest-v0"
    register_shaped(env_id, "agent_rl/Arithmetic-v0", lambda: [ToolErrorShaping()])
    try:
        env = gym.make(env_id, sandbox_backend="process")
        obs, info = env.reset(seed=3)
        assert obs[-1]["role"] == "user" and "task" in info
        _, reward, *_ = env.step("no call, no answer")
        assert reward == pytest.approx(-0.1)  # ToolErrorShaping's malformed-action penalty
        assert asyncio.run(env.unwrapped.areset(seed=3))[1]["task"] == info["task"]
        env.close()
    finally:
        gym.registry.pop(env_id, None)

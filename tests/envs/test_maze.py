from __future__ import annotations

import random

import gymnasium as gym
import pytest
from puzzle_helpers import play

import envs  # noqa: F401
from envs.maze.policies import oracle, weak_teacher
from envs.maze.tasks import Maze, sample_maze, shortest_path
from envs.splits import SPLITS

# S at (1,1), G at (1,3); the only other way round is through the bottom row
TINY = {"grid": ["#####", "#S.G#", "#.#.#", "#...#", "#####"]}


@pytest.fixture
def env():
    e = gym.make("agent_rl/Maze-v0", max_turns=6)
    yield e
    e.close()


def test_board_rendering_and_moves(env):
    obs, info = env.reset(options={"task": TINY})
    assert obs[1] == {"role": "user", "content": "#####\n#@.G#\n#.#.#\n#...#\n#####"}
    assert info["task"]["grid"] == TINY["grid"] and info["tools"] == []
    assert info["teacher_context"] == "A shortest path (2 moves): right right"
    obs, reward, terminated, truncated, info = env.step("Right.")
    assert obs == [{"role": "user", "content": "#####\n#.@G#\n#.#.#\n#...#\n#####"}]
    assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, False, True)
    # the tool-call form is answered by a tool message
    obs, reward, terminated, _, info = env.step(
        '<tool_call>{"name": "move", "arguments": {"direction": "right"}}</tool_call>'
    )
    assert (obs, reward, terminated, info["solved"]) == ([], 1.0, True, True)


def test_wall_is_an_error_and_changes_nothing(env):
    _, info = env.reset(options={"task": TINY})
    obs, reward, terminated, _, step_info = env.step("up")
    assert step_info["action_valid"] is False and reward == 0.0 and not terminated
    assert (
        obs[0]["content"] == "error: cannot move up: wall. The board is unchanged:\n#####\n#@.G#\n#.#.#\n#...#\n#####"
    )
    assert step_info["state_key"] == info["state_key"]


@pytest.mark.parametrize(
    "action, fragment",
    [
        ("go up", "no move"),
        ("up down", "no move"),
        ("<answer>solved</answer>", "no move"),  # claiming success is not a move
        ('<tool_call>{"name": "teleport", "arguments": {"to": "G"}}</tool_call>', "unknown tool 'teleport'"),
        (
            '<tool_call>{"name": "move", "arguments": {"direction": "through"}}</tool_call>',
            "only a direction, one of up, down, left, right",
        ),
        ('<tool_call>{"name": "move"', "unterminated <tool_call>"),
    ],
)
def test_bad_actions_and_hacks_score_zero(env, action, fragment):
    env.reset(options={"task": TINY})
    obs, reward, terminated, _, info = env.step(action)
    assert reward == 0.0 and not terminated and info["action_valid"] is False and fragment in obs[0]["content"]


def test_state_key_is_the_board_and_position(env):
    # right then left comes back to the start: same key, in the same and in another episode
    _, keys, _ = play(
        env, lambda m, r: ["right", "left", "down", "up", "up", "up"][len(m) // 2 - 1], options={"task": TINY}
    )
    start, right, back, down, back2 = keys[:5]
    assert start == back == back2 and len({start, right, down}) == 3
    _, info = env.reset(options={"task": TINY})
    assert info["state_key"] == start
    other = {"grid": ["#####", "#S..#", "#.#.#", "#..G#", "#####"]}
    assert env.reset(options={"task": other})[1]["state_key"] != start


def test_oracle_solves_in_shortest_path_and_do_nothing_scores_zero():
    env = gym.make("agent_rl/Maze-v0", difficulty=[1, 2, 3], max_turns=20)
    for seed in range(8):
        total, keys, _ = play(env, oracle, seed=seed)
        maze = Maze(tuple(env.unwrapped._maze.rows))
        assert total == 1.0 and len(keys) - 1 == len(shortest_path(maze, maze.find("S")))
        total, keys, _ = play(env, lambda m, r: "I will wait here.", seed=seed)
        assert total == 0.0 and len(set(keys)) == 1  # 20 invalid turns, never moved
    env.close()


def test_difficulty_three_needs_eight_to_twelve_moves_and_splits_are_disjoint():
    lengths = {len(shortest_path(m, m.find("S"))) for m in (sample_maze(s, "train", (3,)) for s in range(20))}
    assert min(lengths) >= 8 and max(lengths) <= 12
    seen = {s: {sample_maze(i, s, (1,)).rows for i in range(40)} for s in SPLITS}
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["val"]) and not (seen["val"] & seen["test"])
    assert sample_maze(5, "train", (2,)) == sample_maze(5, "train", (2,))  # one board per (seed, split)


def test_weak_teacher_detours_but_mostly_succeeds():
    env = gym.make("agent_rl/Maze-v0", difficulty=3, max_turns=20)
    rng = random.Random(0)
    results = [play(env, weak_teacher, seed=s, rng=rng) for s in range(12)]
    optimal = [len(play(env, oracle, seed=s)[1]) for s in range(12)]
    env.close()
    assert sum(r[0] for r in results) >= 9
    assert any(len(r[1]) > o for r, o in zip(results, optimal))  # some episodes take detours


def test_bad_config_names_the_key():
    with pytest.raises(ValueError, match=r"unknown difficulty 9; known: \[1, 2, 3, 4\]"):
        gym.make("agent_rl/Maze-v0", difficulty=9)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        gym.make("agent_rl/Maze-v0", split="dev")


def test_hint_line_is_shown_but_not_part_of_the_state():
    plain, hinted = gym.make("agent_rl/Maze-v0"), gym.make("agent_rl/Maze-v0", hint=True)
    obs_p, info_p = plain.reset(options={"task": TINY})
    obs_h, info_h = hinted.reset(options={"task": TINY})
    assert obs_h[1]["content"] == obs_p[1]["content"] + "\nG: 2 right. open: down right"
    assert info_h["state_key"] == info_p["state_key"]
    assert hinted.step("down")[0][0]["content"] == "#####\n#..G#\n#@#.#\n#...#\n#####\nG: 1 up, 2 right. open: up down"
    assert oracle(obs_h) == "right"  # the policies read the board above the hint
    plain.close()
    hinted.close()


def test_toward_hint_names_the_open_moves_that_get_closer():
    env = gym.make("agent_rl/Maze-v0", hint=True, hint_style="toward")
    obs, _ = env.reset(options={"task": TINY})
    assert obs[1]["content"].endswith("#####\ntoward G: right. open: down right")
    assert env.step("down")[0][0]["content"].endswith("#####\ntoward G: up. open: up down")
    env.close()
    with pytest.raises(ValueError, match="hint_style must be one of 'offset', 'toward', got 'near'"):
        gym.make("agent_rl/Maze-v0", hint_style="near")

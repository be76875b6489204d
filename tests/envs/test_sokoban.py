from __future__ import annotations

import gymnasium as gym
import pytest
from puzzle_helpers import play

import envs  # noqa: F401
from envs.sokoban.policies import oracle
from envs.sokoban.tasks import Board, live_cells, sample_board, solve
from envs.splits import SPLITS

LINE = {"grid": ["#######", "#@-$-.#", "#######"]}
KEYS = {"grid": ["######", "#@---#", "#-$-.#", "######"]}
TWO = {"grid": ["#######", "#@$$..#", "#-----#", "#######"]}


@pytest.fixture
def env():
    e = gym.make("agent_rl/Sokoban-v0", max_turns=8)
    yield e
    e.close()


def test_push_to_the_goal(env):
    obs, info = env.reset(options={"task": LINE})
    assert obs[1]["content"] == "#######\n#@-$-.#\n#######"
    assert info["teacher_context"] == "A shortest solution (3 moves): right right right"
    assert env.step("right")[0][0]["content"] == "#######\n#-@$-.#\n#######"
    assert env.step("right")[0][0]["content"] == "#######\n#--@$.#\n#######"
    obs, reward, terminated, _, info = env.step("right")
    assert (obs, reward, terminated, info["solved"]) == ([], 1.0, True, True)


def test_blocked_push_and_wall_are_errors(env):
    _, info = env.reset(options={"task": TWO})
    obs, reward, _, _, step_info = env.step("right")  # box behind box
    assert step_info["action_valid"] is False and reward == 0.0
    assert obs[0]["content"].startswith(
        "error: cannot push the box right: blocked. The board is unchanged:\n#######\n#@$$"
    )
    assert env.step("left")[0][0]["content"].startswith("error: cannot move left: wall")
    assert env.step("up")[4]["state_key"] == info["state_key"]


def test_state_key_identical_for_identical_boards(env):
    _, start = env.reset(options={"task": KEYS})
    keys = [env.step(a)[4]["state_key"] for a in ("right", "left", "down", "right", "left")]
    # P(1,2)B(2,2)  start  P(2,1)B(2,2)  P(2,2)B(2,3) (pushed)  P(2,1)B(2,3): the box moved, so not keys[2]
    assert keys[1] == start["state_key"]
    assert len({start["state_key"], keys[0], keys[2], keys[3], keys[4]}) == 5
    assert env.reset(options={"task": KEYS})[1]["state_key"] == start["state_key"]  # another episode
    assert env.step("down")[4]["state_key"] == keys[2]


def test_solver_and_dead_squares():
    board = Board.parse(KEYS["grid"])
    assert solve(board, board.start) == ["down", "right", "right"]
    two = Board.parse(TWO["grid"])
    assert solve(two, two.start) is None  # both boxes stuck against the top wall
    live = live_cells(two)
    assert (1, 2) in live and (1, 1) not in live and (2, 3) not in live  # a box in row 2 never gets up


def test_oracle_solves_generated_boards_and_do_nothing_scores_zero():
    env = gym.make("agent_rl/Sokoban-v0", difficulty=[1, 2], max_turns=40)
    for seed in range(4):
        total, keys, _ = play(env, oracle, seed=seed)
        assert total == 1.0
        total, keys, _ = play(env, lambda m, r: "", seed=seed)
        assert total == 0.0 and len(set(keys)) == 1
    env.close()


def test_hacks_score_zero(env):
    env.reset(options={"task": LINE})
    for action in [
        "<answer>solved</answer>",
        '<tool_call>{"name": "set_board", "arguments": {"grid": "#*#"}}</tool_call>',
        '<tool_call>{"name": "move", "arguments": {"direction": "right", "steps": 3}}</tool_call>',
    ]:
        _, reward, terminated, _, info = env.step(action)
        assert (reward, terminated, info["action_valid"]) == (0.0, False, False)


def test_splits_by_board_hash_and_boards_not_solved_at_start():
    for seed in range(2):
        for split in SPLITS:
            board = sample_board(seed, split, (1,))  # the split is a function of the board: disjoint
            assert board.split == split and board == sample_board(seed, split, (1,))
            assert not board.solved(board.start) and len(solve(board, board.start)) >= 2

"""Built-in Gymnasium environments; importing this package registers ``agent_rl/<Name>-v0``."""

from __future__ import annotations

import gymnasium as gym

REGISTERED: dict[str, str] = {}  # id -> one-line description, for `agent-rl envs list`


def _register(env_id: str, entry_point: str, description: str, **kwargs) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True, **kwargs)
    REGISTERED[env_id] = description


_register(
    "agent_rl/Arithmetic-v0",
    "envs.arithmetic.env:ArithmeticEnv",
    "arithmetic questions; python tool; reward 1 for the right <answer>",
)
_register(
    "agent_rl/MathTool-v0",
    "envs.math_tool.env:MathToolEnv",
    "reasoning-gym math problems (7 generators, 3 difficulties); python tool; math-verify checks <answer>",
)
_register(
    "agent_rl/Maze-v0",
    "envs.maze.env:MazeEnv",
    "maze walk, one step per turn (up/down/left/right); reward 1 on reaching G",
)
_register(
    "agent_rl/Sokoban-v0",
    "envs.sokoban.env:SokobanEnv",
    "Sokoban, one step per turn (up/down/left/right); reward 1 when every box is on a goal",
)
_register(
    "agent_rl/ShellTask-v0",
    "envs.shell_task.env:ShellTaskEnv",
    "long-horizon file-tree tasks in a sandbox (find a file, fix a config, collect values); in-sandbox check",
)

from envs.maze.env import MazeEnv

__all__ = ["MazeEnv"]

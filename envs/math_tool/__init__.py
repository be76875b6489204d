from envs.math_tool.env import MathToolEnv

__all__ = ["MathToolEnv"]

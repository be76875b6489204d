from envs.scienceworld.env import ScienceWorldEnv

__all__ = ["ScienceWorldEnv"]

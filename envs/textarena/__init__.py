from envs.textarena.env import TextArenaEnv

__all__ = ["TextArenaEnv"]

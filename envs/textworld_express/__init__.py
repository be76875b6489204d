from envs.textworld_express.env import TextWorldExpressEnv

__all__ = ["TextWorldExpressEnv"]

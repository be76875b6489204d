from envs.arithmetic.env import ArithmeticEnv

__all__ = ["ArithmeticEnv"]

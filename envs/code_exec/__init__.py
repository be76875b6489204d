from envs.code_exec.env import CodeExecEnv

__all__ = ["CodeExecEnv"]

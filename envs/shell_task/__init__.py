from envs.shell_task.env import ShellTaskEnv

__all__ = ["ShellTaskEnv"]

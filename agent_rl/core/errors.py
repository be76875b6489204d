"""The one infrastructure error, importable without torch by every layer (sandbox, tools, envs, core).

A sandbox, server or backend failure raises ``InfraError`` (or a subclass that names the failing
service); the rollout engine ends that episode as ``StopReason.INFRA_ERROR``, unscored. A
program's own failure (an exception, a timeout, a crash of the code the agent ran) is an
observation, never an ``InfraError``.
"""


class InfraError(RuntimeError):
    """A sandbox / server / backend failure, not the policy's: the episode ends as INFRA_ERROR."""

"""Errors shared by the core and the tools, importable without torch (tools and envs load fast)."""


class InfraError(RuntimeError):
    """A sandbox / server / backend failure, not the policy's: the episode ends as INFRA_ERROR."""

"""Sandboxes for model-written code: one protocol, three backends, chosen by name or ``auto``.

    sb = make_sandbox(backend="auto", timeout_s=5.0, memory_mb=512)
    res = await sb.exec(code="print(37*91-12)")      # a fresh python3 per call
    res.status, res.stdout                             # ExecStatus.OK, "3355\\n"

``auto`` picks docker when a daemon answers and the image exists, else bubblewrap when it works
here, else the (non-isolated, loudly warned) process backend. See docs/sandbox.md.
"""

from __future__ import annotations

from sandbox.base import ExecResult, ExecStatus, FileStore, Sandbox, SandboxLimits
from sandbox.registry import BACKENDS, available_backends, make_sandbox, resolve_backend

__all__ = [
    "BACKENDS",
    "ExecResult",
    "ExecStatus",
    "FileStore",
    "Sandbox",
    "SandboxLimits",
    "available_backends",
    "make_sandbox",
    "resolve_backend",
]

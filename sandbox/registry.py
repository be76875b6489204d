"""Backend registry, ``auto`` resolution and :func:`make_sandbox`.

A backend is one :class:`Backend` entry: a factory and a probe that says whether it works here
(and why not). Backends import lazily, so ``import sandbox`` stays cheap and the docker SDK is
only loaded when docker is used.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from sandbox.base import Sandbox, SandboxLimits

log = logging.getLogger("sandbox")


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # imported on first use
    factory: str  # callable(limits, **options) -> Sandbox
    probe: str  # callable() -> (works: bool, reason: str), cached by the module
    isolated: bool

    def load(self, attr: str) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), attr)


#: ``auto`` tries them in this order.
BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    BACKENDS[backend.name] = backend


register_backend(Backend("docker", "sandbox.docker", "DockerSandbox", "probe", isolated=True))
register_backend(Backend("bwrap", "sandbox.bwrap", "BwrapSandbox", "probe", isolated=True))
register_backend(Backend("process", "sandbox.process", "ProcessSandbox", "probe", isolated=False))

_auto_choice: str | None = None
_auto_lock = threading.Lock()


def available_backends() -> dict[str, tuple[bool, str]]:
    """``name -> (works here, reason)`` for every registered backend (probes are cached)."""
    out = {}
    for name, b in BACKENDS.items():
        try:
            out[name] = b.load(b.probe)()
        except Exception as exc:  # noqa: BLE001 - a broken backend is reported, not raised
            out[name] = (False, f"{type(exc).__name__}: {exc}")
    return out


def resolve_backend(backend: str = "auto") -> str:
    """The backend ``backend`` names; ``auto`` is resolved once per process."""
    global _auto_choice
    if backend != "auto":
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; known: auto, {', '.join(BACKENDS)}")
        return backend
    with _auto_lock:
        if _auto_choice is None:
            reasons = []
            for name, b in BACKENDS.items():
                try:
                    works, why = b.load(b.probe)()
                except Exception as exc:  # noqa: BLE001
                    works, why = False, f"{type(exc).__name__}: {exc}"
                if works:
                    _auto_choice = name
                    break
                reasons.append(f"{name}: {why}")
            else:  # pragma: no cover - the process backend always works
                raise RuntimeError("no sandbox backend works here: " + "; ".join(reasons))
            if reasons:
                log.info("sandbox backend auto -> %s (skipped %s)", _auto_choice, "; ".join(reasons))
        return _auto_choice


def make_sandbox(
    backend: str = "auto",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    *,
    limits: SandboxLimits | None = None,
    **options: Any,
) -> Sandbox:
    """A new sandbox. Cheap: docker and bwrap sandboxes share one warm pool per (image, limits).

    ``limits`` replaces ``timeout_s`` / ``memory_mb`` when given. ``options`` go to the backend
    (docker: ``image``, ``pool_size``; bwrap: ``pool_size``; process: ``python``).
    """
    name = resolve_backend(backend)
    if limits is None:
        limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb)
    b = BACKENDS[name]
    return b.load(b.factory)(limits, **options)

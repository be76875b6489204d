"""Fixtures of the sandbox suite: isolated backends on one-worker pools, and a host guard.

Hostile programs only ever go to ``docker`` and ``bwrap`` (never ``process``: it is not isolated,
and as root ``kill -9 -1`` or a fork bomb there would take the machine down).
"""

from __future__ import annotations

import pytest
from sandbox_helpers import HOSTILE, ISOLATED, HostGuard, require_bwrap, run

from sandbox import make_sandbox


@pytest.fixture(params=ISOLATED)
def isolated_backend(request) -> str:
    if request.param == "bwrap":
        require_bwrap()
    return request.param


@pytest.fixture
def hostile_sb(isolated_backend):
    """A sandbox on a ONE-worker pool, so every call of a test lands on the same worker."""
    sb = make_sandbox(backend=isolated_backend, limits=HOSTILE, pool_size=1)
    yield sb
    run(sb.close())


@pytest.fixture
def host_guard():
    guard = HostGuard()
    yield guard
    try:
        guard.check()
    finally:
        guard.close()

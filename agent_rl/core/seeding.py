"""Explicit, derived seeds: every random draw's seed is a hash of the parts that identify it."""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any) -> int:
    """Explicit, derived seeds: the same parts always give the same seed."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little") & 0x7FFFFFFF

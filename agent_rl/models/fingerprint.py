"""Which weights a sampler holds: a fingerprint the trainer compares with its own.

A fingerprint is a string. At the start of a run it is the content digest of the learner's weights
(``sha256:<hex>`` over every tensor's name, dtype, shape and bytes, in name order); after the
weight sync of version ``v`` it is a tag the trainer sets, ``<run>/v<v>``. The trainer sends it
with the weights; the engine keeps it once the weights are loaded (never before) and reports it on
request, with the dtype it samples in. A sampler that reports another fingerprint holds other
weights: another run's, or its start-up checkpoint after a restart.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def content_digest(state_dict: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the tensors: names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return "sha256:" + h.hexdigest()


def version_tag(run: str, version: int) -> str:
    """The fingerprint of the weights a run sent at ``version``."""
    return f"{run}/v{version}"


def _run_version(tag: Any) -> tuple[str, int] | None:
    """``RUN/vN`` -> (RUN, N); None for anything else (a digest, None)."""
    if not isinstance(tag, str) or "/v" not in tag:
        return None
    run, _, v = tag.rpartition("/v")
    return (run, int(v)) if v.isdigit() else None


def same_run_at_least(got: Any, expected: str) -> bool:
    """``got`` is a tag of the run that sent ``expected`` at the same or a later version: a sampler
    that several pushers of one run share (the trainer and its rollout workers, one server) may hold
    that run's next version by the time it is asked."""
    a, b = _run_version(got), _run_version(expected)
    return a is not None and b is not None and a[0] == b[0] and a[1] >= b[1]


def same_run_earlier(got: Any, expected: str) -> bool:
    """``got`` is a tag of the run that sent ``expected`` at an earlier version: on a server that several
    pushers of one run share, a pusher that lags one version behind pushed over the newer one."""
    a, b = _run_version(got), _run_version(expected)
    return a is not None and b is not None and a[0] == b[0] and a[1] < b[1]


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` / ``"bfloat16"`` / ``"torch.float32"`` -> ``bfloat16`` / ``float32``."""
    return str(dtype).removeprefix("torch.")

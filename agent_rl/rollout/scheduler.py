"""Continuous batching at turn granularity: one backend call for every episode waiting on the model.

Episodes submit their next request with ``await scheduler.generate(request)``. While the backend
is busy, requests queue up; as soon as it is free, everything queued goes out as one batch (at
most ``max_batch_requests``; the rest go next). Nobody waits for stragglers: episodes still in an
environment step join a later batch, so tool time overlaps generation. When all episodes step
their envs at the same moment, capping the batch at half of them splits them into two cohorts
that alternate: one generates while the other waits on its tools (free on a CPU, where a batch
costs in proportion to its size; on a GPU a smaller batch costs almost as much as a full one).
A failed call fails only the episodes whose requests were in it; a request the backend failed on
its own (an exception in its slot of the results, ``backends/base.py``) fails only its episode.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from agent_rl.rollout.backends.base import (
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
)

# event-loop turns to let episodes that are ready right now (an env step just finished) submit
# before a batch goes out; each turn costs microseconds
SETTLE_TURNS = 4


def _settable(e: BaseException) -> BaseException:
    """``e`` as an exception a future can hold: asyncio refuses StopIteration (it would end the
    awaiting coroutine's generator), which left every episode of the batch waiting forever."""
    if isinstance(e, StopIteration | StopAsyncIteration):
        wrapped = RuntimeError(f"the backend raised {type(e).__name__} (a policy or iterator ran out): {e!r}")
        wrapped.__cause__ = e
        return wrapped
    return e


class GenerationScheduler:
    def __init__(self, backend: InferenceBackend, metrics: Counter[str], max_batch_requests: int | None = None):
        self.backend = backend
        self.metrics = metrics
        self.max_batch_requests = max_batch_requests  # None: everything waiting goes in one call
        self._pending: list[tuple[GenerationRequest, asyncio.Future[GenerationResult]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """The backend's result for ``request``; raises what the backend raised for its batch, or for
        this request alone."""
        future: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            for _ in range(SETTLE_TURNS):
                await asyncio.sleep(0)
            cut = len(self._pending) if self.max_batch_requests is None else self.max_batch_requests
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            t0 = time.perf_counter()
            try:
                results = await self.backend.generate([r for r, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"the backend returned {len(results)} results for {len(batch)} requests")
            except Exception as e:  # noqa: BLE001 - handed to exactly the episodes of this batch
                self.metrics["rollout/failed_generate_calls"] += 1
                for _, future in batch:
                    if not future.done():
                        future.set_exception(_settable(e))
                continue
            finally:
                self.metrics["time/generate_s"] += time.perf_counter() - t0
            self.metrics["rollout/generate_calls"] += 1
            self.metrics["rollout/generate_requests"] += len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    self.metrics["rollout/failed_generate_requests"] += 1
                    future.set_exception(_settable(result))
                else:
                    future.set_result(result)

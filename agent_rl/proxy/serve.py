"""``agent-rl proxy``: the capture proxy on its own, over a checkpoint and the hf backend.

A program points the official client at ``http://HOST:PORT/v1``; what it sampled is readable at
``GET /v1/sessions`` (the recorded segments). Training runs start their own proxy per rollout
(``programs.py``); this command is for trying an agent program against a policy by hand.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agent_rl.models.loading import load_model, load_tokenizer
from agent_rl.proxy.app import DEFAULT_SESSION, ProxyService, create_proxy_app
from agent_rl.rollout.render import ChatRenderer
from agent_rl.rollout.scheduler import GenerationScheduler
from tools.formats import detect_format, get_format


def build_service(
    model_path: str,
    *,
    served_name: str = "policy",
    tool_format: str = "auto",
    dtype: str = "float32",
    device: str = "cpu",
    max_new_tokens: int = 512,
    max_total_tokens: int = 4096,
    backend: Any = None,
) -> ProxyService:
    """A proxy over ``model_path`` (hf backend unless ``backend`` is given) with one default session."""
    from agent_rl.rollout.backends.hf import HfBackend

    tokenizer = load_tokenizer(model_path)
    fmt = get_format(detect_format(tokenizer) if tool_format == "auto" else tool_format)
    if backend is None:
        backend = HfBackend(load_model(model_path, dtype, device), tokenizer.pad_token_id, max_batch_size=64)
    scheduler = GenerationScheduler(backend, Counter())

    async def sample(requests: list) -> list:

        return list(await asyncio.gather(*(scheduler.generate(r) for r in requests), return_exceptions=True))

    service = ProxyService(
        ChatRenderer(tokenizer),
        fmt,
        sample,
        [served_name],
        max_new_tokens=max_new_tokens,
        max_total_tokens=max_total_tokens,
    )
    service.open_session(DEFAULT_SESSION)
    return service


def serve_proxy(service: ProxyService, host: str = "127.0.0.1", port: int = 8001, api_key: str | None = None) -> None:
    """Blocks until interrupted; prints the base URL once the socket is bound."""
    from agent_rl.rollout.backends.server import bind, check_exposure, uvicorn_server

    check_exposure(host, api_key)
    sock = bind(host, port)
    print(
        f"agent-rl proxy: http://{host}:{sock.getsockname()[1]}/v1 (model {', '.join(service.model_names)})", flush=True
    )
    uvicorn_server(create_proxy_app(service, api_key)).run(sockets=[sock])

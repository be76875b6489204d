"""``agent-rl serve``: our own OpenAI-compatible completions server over the ``hf`` backend.

It implements the token-id subset of ``/v1/completions`` that the ``openai`` backend uses, in the
response shape of ``vllm serve`` (token-id prompts, ``n=1`` per prompt item, ``temperature``,
``top_p``, ``max_tokens``, ``seed``, ``stop_token_ids``, ``ignore_eos``, ``logprobs`` with top
logprobs, ``return_token_ids``, ``return_tokens_as_token_ids``, ``skip_special_tokens``, and
``prompt_logprobs``: what a remote teacher scores rows with), plus ``/v1/models``, ``/health``,
``/tokenize`` (vLLM's shape) and what a trainer needs to keep the server's policy current:

- ``POST /v1/update_weights?version=N`` with a safetensors-serialized state dict as the body, or
  with JSON ``{"path": ..., "version": N}`` naming a ``.safetensors`` file, a directory of them, or
  a ``torch.save``-d state dict on disk;
- ``GET /v1/policy_version``; every completion also reports the ``policy_version`` that sampled it;
- ``learner.lora``: a safetensors body of adapter tensors whose header holds the LoRA config
  (``agent_rl/models/lora.py``) wraps the model with that adapter once and swaps it in place
  from then on; every completion then reports ``adapter`` (name, version, sha256 of the adapter
  tensors read back from the model).

With an API key (``--api-key``, or the ``OPENAI_API_KEY`` environment variable the ``openai``
backend also reads, ``rollout.backend.api_key_env``) every ``/v1`` endpoint needs
``Authorization: Bearer <key>``; a request without it or with another key gets 401 and changes
nothing (``/health`` stays open). Without a key the server binds only a loopback address:
``serve`` refuses any other host, since anyone who reaches ``/v1/update_weights`` replaces the policy.

Concurrent HTTP requests are batched: a queue gathers the requests that arrive less than
``batch_wait_ms`` apart (at most 10 such gaps; plus all that queued up during the previous batch), and one hf
generate call samples them together in a worker thread, off the event loop. Logprobs are those of
the distribution sampled from (after temperature and top-p), like vLLM's ``processed_logprobs``.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import torch
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from agent_rl.models import lora
from agent_rl.models.fingerprint import content_digest, dtype_name
from agent_rl.models.loading import load_model, load_tokenizer
from agent_rl.rollout.backends.base import GenerationRequest, GenerationResult
from agent_rl.rollout.backends.openai_http import is_loopback

TOKEN_ID_PREFIX = "token_id:"


class CompletionRequest(BaseModel):
    """The accepted fields; anything else is rejected by name (a silently ignored option is a bug)."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: list[int] | list[list[int]] = Field(description="token ids, or a list of token-id prompts")
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = 1
    stream: bool = False
    echo: bool = False
    seed: int | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = Field(None, ge=0, description="top logprobs per token; 0: only the sampled token's")
    prompt_logprobs: int | None = Field(
        None, ge=0, description="vLLM's: each prompt token's logprob and the top-k of its position"
    )
    skip_special_tokens: bool = True
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    user: str | None = None


class ServerState:
    """The model behind the endpoints: one hf backend, a batching queue and a lock against updates."""

    def __init__(
        self, backend: Any, tokenizer: Any, model_name: str, batch_wait_ms: float = 5.0, max_batch_size: int = 64
    ):
        self.backend = backend
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.batch_wait_s = batch_wait_ms / 1000.0
        self.max_batch_size = max_batch_size
        self.queue: asyncio.Queue[tuple[GenerationRequest, asyncio.Future]] | None = None
        self.lock: asyncio.Lock | None = None
        self.metrics = {"batches": 0, "requests": 0, "max_batch": 0}
        # the weights it samples from (models/fingerprint.py): what the last push named, None if unknown
        self.fingerprint: str | None = None
        self._pieces: dict[int, str] = {}

    async def start(self) -> asyncio.Task:
        self.queue, self.lock = asyncio.Queue(), asyncio.Lock()
        return asyncio.create_task(self._batch_loop())

    async def generate(self, request: GenerationRequest) -> tuple[GenerationResult, int]:
        """Queue one request; returns its result and the policy version that sampled it."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        await self.queue.put((request, future))
        return await future

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            # keep gathering while requests keep coming (gaps under batch_wait_s), for at most
            # 10 gaps: a burst of requests that trickles in on a busy machine stays one batch
            deadline = loop.time() + 10 * self.batch_wait_s
            while len(items) < self.max_batch_size:
                if not self.queue.empty():
                    items.append(self.queue.get_nowait())
                    continue
                wait = min(self.batch_wait_s, deadline - loop.time())
                if wait <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(self.queue.get(), wait))
                except TimeoutError:
                    break
            await self._run(items)  # per-row temperature, top_p and seed: one hf call for all

    async def _run(self, group: list[tuple[GenerationRequest, asyncio.Future]]) -> None:
        requests = [r for r, _ in group]
        async with self.lock:
            version = self.backend.policy_version
            try:
                results = await asyncio.to_thread(self.backend.generate_sync, requests)
            except Exception as e:  # noqa: BLE001 - the model failed: every request of the batch gets the error
                for _, future in group:
                    if not future.done():
                        future.set_exception(e)
                return
        self.metrics["batches"] += 1
        self.metrics["requests"] += len(group)
        self.metrics["max_batch"] = max(self.metrics["max_batch"], len(group))
        for (_, future), result in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):  # failed alone (backends/base.py)
                future.set_exception(result)
            else:
                future.set_result((result.at_version(version), version))

    async def update_weights(
        self, state_dict: dict[str, torch.Tensor], version: int, adapter_config: dict | None = None
    ) -> None:
        if lora.is_adapter(state_dict):  # learner.lora: the adapter alone, swapped in place (the base stays)
            async with self.lock:
                await asyncio.to_thread(self.backend.update_weights, state_dict, version, adapter_config)
            return
        model = self.backend.model
        own = model.state_dict()
        unexpected = sorted(set(state_dict) - set(own))
        if unexpected:
            raise ValueError(f"unknown parameter names {unexpected[:5]} (the model has e.g. {sorted(own)[:3]})")
        wrong = [k for k, v in state_dict.items() if tuple(v.shape) != tuple(own[k].shape)]
        if wrong:
            raise ValueError(f"shape mismatch for {wrong[:5]}: got {[tuple(state_dict[k].shape) for k in wrong[:5]]}")
        async with self.lock:  # never in the middle of a batch
            await asyncio.to_thread(self.backend.update_weights, _complete(state_dict, own), version)

    async def score_prompts(self, prompts: list[list[int]], k: int) -> list[list[dict | None]]:
        """vLLM's ``prompt_logprobs``: per prompt, None for token 0, then for token j a map from token id
        (a string) to {logprob, rank, decoded_token}: token j's, and the top-k of the distribution at j
        (temperature 1, the raw logits, as vLLM computes them)."""
        async with self.lock:  # never while the weights change
            return await asyncio.to_thread(self._score_prompts, prompts, k)

    @torch.no_grad()
    def _score_prompts(self, prompts: list[list[int]], k: int, rows_per_forward: int = 16) -> list[list[dict | None]]:
        model, out = self.backend.model, []
        device = next(model.parameters()).device
        for i in range(0, len(prompts), rows_per_forward):
            chunk = prompts[i : i + rows_per_forward]
            S = max(len(p) for p in chunk)
            ids_BS = torch.tensor([p + [self.tokenizer.pad_token_id] * (S - len(p)) for p in chunk], device=device)
            mask_BS = torch.tensor([[1] * len(p) + [0] * (S - len(p)) for p in chunk], device=device)
            logp_BSV = torch.log_softmax(model(input_ids=ids_BS, attention_mask=mask_BS).logits[:, :-1].float(), dim=-1)
            for b, p in enumerate(chunk):
                lp_NV, target_N = logp_BSV[b, : len(p) - 1], ids_BS[b, 1 : len(p)]
                lp_N = lp_NV.gather(-1, target_N[:, None]).squeeze(-1)
                rank_N = (lp_NV > lp_N[:, None]).sum(-1) + 1
                top_lp, top_ids = lp_NV.topk(k, dim=-1) if k else (lp_NV[:, :0], target_N[:, None][:, :0])
                rows: list[dict | None] = [None]
                for t, lp, rank, tids, tlps in zip(
                    p[1:], lp_N.tolist(), rank_N.tolist(), top_ids.tolist(), top_lp.tolist(), strict=True
                ):
                    entry = {
                        str(tid): {"logprob": tlp, "rank": r + 1, "decoded_token": self._piece(tid)}
                        for r, (tid, tlp) in enumerate(zip(tids, tlps, strict=True))
                    }
                    entry[str(t)] = {"logprob": lp, "rank": rank, "decoded_token": self._piece(t)}
                    rows.append(entry)
                out.append(rows)
        return out

    # ------------------------------------------------------------------------------------------
    def choice(self, index: int, req: CompletionRequest, prompt: list[int], result: GenerationResult) -> dict[str, Any]:
        """One completion choice in vLLM's response shape."""
        ids = result.token_ids
        as_ids = req.return_tokens_as_token_ids
        pieces = [self._piece(t) for t in ids]
        logprobs = None
        if req.logprobs is not None:
            offsets, pos = [], 0
            for p in pieces:
                offsets.append(pos)
                pos += len(p)
            top = None
            if req.logprobs > 0:
                top = [
                    {self._key(t, as_ids): lp for t, lp in zip(tids, tlps, strict=True)}
                    for tids, tlps in zip(result.topk_ids or [], result.topk_logprobs or [], strict=True)
                ]
            logprobs = {
                "text_offset": offsets,
                "token_logprobs": list(result.logprobs),
                "tokens": [self._key(t, as_ids) for t in ids],
                "top_logprobs": top,
            }
        stopped = result.finish_reason == "stop" and ids and ids[-1] in req.stop_token_ids
        return {
            "index": index,
            "text": self.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens),
            "logprobs": logprobs,
            "finish_reason": result.finish_reason,
            "stop_reason": ids[-1] if stopped else None,
            "prompt_token_ids": prompt if req.return_token_ids else None,
            "token_ids": ids if req.return_token_ids else None,
        }

    def _key(self, token_id: int, as_ids: bool) -> str:
        return f"{TOKEN_ID_PREFIX}{token_id}" if as_ids else self._piece(token_id)

    def _piece(self, token_id: int) -> str:
        """One token decoded on its own (cached: a completion decodes every token for text_offset)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return piece


def _complete(state_dict: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A partial update keeps the current values of the parameters it does not name."""
    return {k: state_dict.get(k, v) for k, v in own.items()}


def _error(status: int, message: str) -> JSONResponse:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 422: "BadRequestError"}.get(
        status, "InternalServerError"
    )
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status}, status)


def _unrunnable(req: CompletionRequest, prompts: list[list[int]], vocab: int, context: int | None) -> str | None:
    """Why the model cannot run ``req`` (None when it can): what torch refuses, or a context overflow."""
    if req.seed is not None and not -(2**63) <= req.seed < 2**64:
        return "seed: must be in [-2**63, 2**64)"
    if any(not -(2**63) <= t < 2**63 for t in req.stop_token_ids):
        return "stop_token_ids: must be 64-bit integers"
    if req.logprobs is not None and req.logprobs > vocab:
        return f"logprobs: at most the vocabulary size, {vocab}"
    if req.prompt_logprobs is not None and req.prompt_logprobs > vocab:
        return f"prompt_logprobs: at most the vocabulary size, {vocab}"
    longest = max(len(p) for p in prompts)
    if context is not None and longest + req.max_tokens > context:
        return (
            f"prompt ({longest} tokens) + max_tokens ({req.max_tokens}) exceeds the model's context of {context} tokens"
        )
    return None


def load_state_dict_file(path: str) -> dict[str, torch.Tensor]:
    """A ``.safetensors`` file, a directory of them (a saved checkpoint), or a ``torch.save``-d dict."""
    from safetensors.torch import load_file

    p = Path(path)
    try:
        if p.is_dir():
            files = sorted(p.glob("*.safetensors"))
            if not files:
                raise ValueError(f"path '{path}': a directory without .safetensors files")
            out: dict[str, torch.Tensor] = {}
            for f in files:
                out.update(load_file(f))
        elif not p.is_file():
            raise ValueError(f"path '{path}' does not exist")
        elif p.suffix == ".safetensors":
            out = load_file(p)
        else:
            out = torch.load(p, map_location="cpu", weights_only=True)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a corrupt or foreign file (SafetensorError, UnpicklingError, ...)
        raise ValueError(f"path '{path}': cannot read a state dict: {type(e).__name__}: {e}") from None
    if not isinstance(out, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in out.items()):
        raise ValueError(f"path '{path}': not a state dict (names to tensors) but a {type(out).__name__}")
    return out


def require_key(api_key: str | None) -> Any:
    """A FastAPI dependency: the bearer token must equal ``api_key`` (None: no check), else 401."""
    bearer = HTTPBearer(auto_error=False, description="the server's --api-key")

    # FastAPI's idiom; Annotated cannot name the local ``bearer`` under postponed annotations
    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        if api_key is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not secrets.compare_digest(given.encode(), api_key.encode()):
            raise HTTPException(
                401, "missing or wrong API key (Authorization: Bearer <key>)", {"WWW-Authenticate": "Bearer"}
            )

    return check


def create_app(state: ServerState, api_key: str | None = None) -> FastAPI:
    """The app; with ``api_key`` every ``/v1`` route needs it as a bearer token."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        task = await state.start()
        yield
        task.cancel()

    app = FastAPI(title="agent-rl serve", lifespan=lifespan)
    guarded = [Depends(require_key(api_key))]

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return _error(400, problems)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        response = _error(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models", dependencies=guarded)
    async def models():
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "owned_by": "agent-rl"}]}

    @app.get("/v1/policy_version", dependencies=guarded)
    async def policy_version():
        # what it samples from: the fingerprint the last push carried (models/fingerprint.py; at start the
        # content digest of the checkpoint it loaded) and the dtype
        dtype = next(state.backend.model.parameters()).dtype
        return {
            "policy_version": state.backend.policy_version,
            "fingerprint": state.fingerprint,
            "dtype": dtype_name(dtype),
        }

    @app.post("/v1/completions", dependencies=guarded)
    async def completions(req: CompletionRequest):
        if req.n != 1 or req.stream or req.echo:
            return _error(
                400, f"supported: n=1, stream=false, echo=false; got n={req.n}, stream={req.stream}, echo={req.echo}"
            )
        prompts = req.prompt if req.prompt and isinstance(req.prompt[0], list) else [req.prompt]
        if not all(prompts):
            return _error(400, "prompt: every prompt needs at least one token id")
        vocab = state.backend.model.get_input_embeddings().num_embeddings
        if any(not 0 <= t < vocab for p in prompts for t in p):
            return _error(400, f"prompt: token ids must be in [0, {vocab})")
        problem = _unrunnable(req, prompts, vocab, getattr(state.backend.model.config, "max_position_embeddings", None))
        if problem:  # refused here, not in the batch: a batch fails as a whole
            return _error(400, problem)
        requests = [
            GenerationRequest(
                prompt_ids=list(p),
                max_new_tokens=req.max_tokens,
                temperature=req.temperature,
                top_p=req.top_p,
                stop_token_ids=list(req.stop_token_ids),
                ignore_eos=req.ignore_eos,
                topk=req.logprobs or 0,
                seed=req.seed,
            )
            for p in prompts
        ]
        scored = await state.score_prompts(prompts, req.prompt_logprobs) if req.prompt_logprobs is not None else None
        outs = await asyncio.gather(*(state.generate(r) for r in requests))
        choices = [state.choice(i, req, p, res) for i, (p, (res, _)) in enumerate(zip(prompts, outs, strict=True))]
        for i, c in enumerate(choices):
            c["prompt_logprobs"] = scored[i] if scored is not None else None
        completion_tokens = sum(len(res.token_ids) for res, _ in outs)
        prompt_tokens = sum(len(p) for p in prompts)
        # a JSONResponse skips FastAPI's recursive encoder (slow on thousands of per-token entries)
        return JSONResponse(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": state.model_name,
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
                "policy_version": min(v for _, v in outs),
                "adapter": outs[0][0].adapter,  # learner.lora: the adapter the hf backend held (None without)
            }
        )

    @app.post("/tokenize", dependencies=guarded)
    async def tokenize(body: dict):  # vLLM's: {"prompt": text, "add_special_tokens"} -> {"tokens", "count"}
        if not isinstance(body.get("prompt"), str):
            return _error(400, "prompt: a string to tokenize")
        tokens = state.tokenizer.encode(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True)))
        context = getattr(state.backend.model.config, "max_position_embeddings", None)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": context}

    @app.post("/v1/update_weights", dependencies=guarded)
    async def update_weights(request: Request, version: int | None = None, fingerprint: str | None = None):
        try:
            adapter_config = None  # an adapter's LoRA config, in a safetensors body's header
            if request.headers.get("content-type", "").startswith("application/json"):
                body = await request.json()
                if not isinstance(body, dict) or "path" not in body or "version" not in body:
                    return _error(400, "JSON body needs 'path' and 'version'")
                try:
                    version = int(body["version"])
                except (TypeError, OverflowError):  # null, a list, infinity (a bad string is a ValueError)
                    return _error(400, f"version: an integer, got {body['version']!r}")
                state_dict = await asyncio.to_thread(load_state_dict_file, str(body["path"]))
                fingerprint = body.get("fingerprint")
            else:
                if version is None:
                    return _error(400, "query parameter 'version' is required with a safetensors body")
                from safetensors import SafetensorError
                from safetensors.torch import load

                payload = await request.body()
                try:
                    state_dict = load(payload)
                except SafetensorError as e:
                    return _error(400, f"body: not a safetensors state dict: {e}")
                adapter_config = lora.read_adapter_metadata(payload)
            state.fingerprint = None  # an update that fails half-way leaves weights of no known run
            await state.update_weights(state_dict, version, adapter_config)
            state.fingerprint = fingerprint
        except ValueError as e:
            return _error(400, str(e))
        return {"policy_version": state.backend.policy_version, "num_tensors": len(state_dict)}

    return app


def build_state(
    model_path: str, dtype: str = "float32", device: str = "cpu", served_name: str | None = None, **batching: Any
) -> ServerState:
    from agent_rl.rollout.backends.hf import HfBackend

    tokenizer = load_tokenizer(model_path)
    model = load_model(model_path, dtype, device)
    backend = HfBackend(model, tokenizer.pad_token_id, max_batch_size=batching.get("max_batch_size", 64))
    state = ServerState(backend, tokenizer, served_name or model_path, **batching)
    state.fingerprint = content_digest(model.state_dict())  # a trainer whose weights these are pushes nothing
    return state


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (``port=0``: a free one, read back with ``getsockname``)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def uvicorn_server(app: Any) -> Any:
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))


def check_exposure(host: str, api_key: str | None) -> None:
    """A non-loopback bind without an API key is refused (one line naming the fix)."""
    if api_key is None and not is_loopback(host):
        raise ValueError(
            f"--host {host} is not a loopback address and the server has no API key: anyone who reaches it "
            f"could replace the policy through /v1/update_weights; pass --api-key KEY or set OPENAI_API_KEY "
            f"(the trainer sends the variable named by rollout.backend.api_key_env)"
        )


def serve(state: ServerState, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None) -> None:
    """Blocks until interrupted; prints the base URL once the socket is bound."""
    check_exposure(host, api_key)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    auth = "API key required" if api_key else "no API key"
    print(f"agent-rl serve: http://{host}:{actual}/v1 (model {state.model_name}, {auth})", flush=True)
    uvicorn_server(create_app(state, api_key)).run(sockets=[sock])


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """Run an ASGI app (e.g. ``create_app(state)``) on a free port in a background thread; yields its /v1 URL."""
    sock = bind(host, 0)
    server = uvicorn_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("agent-rl serve did not start listening within 30 s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

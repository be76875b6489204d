"""The ``vllm`` backend: in-process vLLM (``AsyncLLM``), token prompts in, ids + logprobs out.

Written against vLLM's documented API (the ``vllm`` extra pins the version):

- engine: ``AsyncEngineArgs`` + ``AsyncLLM.from_engine_args`` and ``AsyncLLM.generate(prompt,
  sampling_params, request_id)``, an async iterator of ``RequestOutput`` whose last item has
  ``outputs[0].token_ids``, ``.logprobs`` (one ``{token_id: Logprob}`` dict per sampled token) and
  ``.finish_reason`` (https://docs.vllm.ai/en/latest/api/vllm/v1/engine/async_llm/);
- prompts: ``TokensPrompt(prompt_token_ids=...)`` (https://docs.vllm.ai/en/latest/api/vllm/inputs/);
- sampling: ``SamplingParams(n, temperature, top_p, max_tokens, seed, stop_token_ids, ignore_eos,
  logprobs, detokenize)`` (https://docs.vllm.ai/en/latest/api/vllm/sampling_params/); with
  ``logprobs_mode="processed_logprobs"`` the logprobs are those of the distribution sampled from
  (after temperature / top-p), the ones the learner's importance ratios need
  (https://docs.vllm.ai/en/latest/api/vllm/config/model/ ``logprobs_mode``);
- weight updates from the learner: the RLHF examples' worker extension
  (``worker_extension_cls``) whose method runs on every worker through ``collective_rpc`` and
  calls ``self.model_runner.model.load_weights(weights=[(name, tensor), ...])``
  (https://docs.vllm.ai/en/latest/examples/offline_inference/rlhf.html,
  https://docs.vllm.ai/en/latest/examples/offline_inference/rlhf_utils.html); generation is
  paused around the update (``pause_generation`` / ``resume_generation``) and the prefix cache is
  reset, since KV blocks computed by the old weights must not be reused.

vLLM needs a GPU and is imported lazily; without it the backend fails with an explanation. The
engine lives on its own event loop in a background thread, so ``generate`` can be awaited from any
loop (the rollout engine runs one ``asyncio.run`` per step).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from agent_rl.core.errors import InfraError
from agent_rl.rollout.backends.base import GenerationRequest, GenerationResult

EXTENSION = "agent_rl.rollout.backends.vllm.WeightSyncExtension"


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "rollout.backend.name=vllm needs vLLM and a CUDA GPU: pip install -e '.[vllm]' "
            "(or use rollout.backend.name=hf on CPU, or name=openai against a running `vllm serve`)"
        ) from e
    return vllm


class WeightSyncExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); its methods run on every worker."""

    def agent_rl_load_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        model = self.model_runner.model  # the worker's model runner (vLLM's GPU worker)
        device = next(model.parameters()).device
        weights = [(name, t.to(device)) for name, t in named_tensors]
        model.load_weights(weights=weights)
        return len(weights)


class VllmBackend:
    def __init__(self, cfg: Any, model_cfg: Any, model: Any = None):
        vllm = import_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.policy_version = 0
        self._local_model = model  # the learner's module: what update_weights(None, v) sends
        args = AsyncEngineArgs(
            model=model_cfg.path,
            dtype=model_cfg.dtype,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            tensor_parallel_size=cfg.tensor_parallel_size,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.enable_prefix_caching,
            logprobs_mode=cfg.logprobs_mode,
            worker_extension_cls=EXTENSION,
        )
        self._vllm = vllm
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine", daemon=True)
        self._thread.start()

        async def start() -> Any:
            return AsyncLLM.from_engine_args(args)

        self.engine = self._call(start())

    def _call(self, coro: Any) -> Any:
        """Run a coroutine on the engine's loop from a thread that is not that loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # ------------------------------------------------------------------------------------------
    async def generate(self, requests: list[GenerationRequest], seed: int | None = None) -> list[GenerationResult]:
        from agent_rl.core.seeding import derive_seed

        seeds = [r.seed if r.seed is not None else (None if seed is None else derive_seed(seed, i)) for i, r in enumerate(requests)]
        futures = [
            asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._one(r, s), self._loop))
            for r, s in zip(requests, seeds, strict=True)
        ]
        return list(await asyncio.gather(*futures))

    def sampling_params(self, r: GenerationRequest, seed: int | None) -> Any:
        return self._vllm.SamplingParams(
            n=1,
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_new_tokens,
            seed=seed,
            stop_token_ids=list(r.stop_token_ids),
            ignore_eos=r.ignore_eos,
            logprobs=r.topk,  # the sampled token's logprob is always included; 0 adds no others
            detokenize=False,  # ids are all we read: never decode and re-encode
        )

    async def _one(self, r: GenerationRequest, seed: int | None) -> GenerationResult:
        from vllm.inputs import TokensPrompt

        final = None
        try:
            async for output in self.engine.generate(
                TokensPrompt(prompt_token_ids=list(r.prompt_ids)), self.sampling_params(r, seed), uuid.uuid4().hex
            ):
                final = output
        except Exception as e:  # engine death is the infrastructure's failure, not the policy's
            raise InfraError(f"vLLM engine: {e!r}") from e
        if final is None:
            raise InfraError("vLLM engine returned no output")
        return to_result(final.outputs[0], r.topk).at_version(self.policy_version)

    # ------------------------------------------------------------------------------------------
    def update_weights(self, state_dict: dict | None, version: int) -> None:
        """Load the learner's weights into every worker; later samples carry ``version``."""
        if state_dict is None:
            if self._local_model is None:
                raise ValueError("update_weights(None, ...): the vllm backend was built without the learner's model")
            state_dict = self._local_model.state_dict()
        named = [(k, v.detach()) for k, v in state_dict.items()]

        async def update() -> None:
            await self.engine.pause_generation()
            try:
                await self.engine.collective_rpc("agent_rl_load_weights", args=(named,))
                await self.engine.reset_prefix_cache()
            finally:
                await self.engine.resume_generation()

        self._call(update())
        self.policy_version = version

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


def to_result(completion: Any, topk: int) -> GenerationResult:
    """A vLLM ``CompletionOutput`` -> ``GenerationResult`` (``logprobs``: one {id: Logprob} per token)."""
    ids = list(completion.token_ids)
    per_token = completion.logprobs
    if per_token is None or len(per_token) != len(ids):
        raise InfraError(f"vLLM returned {0 if per_token is None else len(per_token)} logprob entries for {len(ids)} tokens")
    logprobs = [float(d[t].logprob) for t, d in zip(ids, per_token, strict=True)]
    finish = completion.finish_reason
    if finish not in ("stop", "length"):
        raise InfraError(f"vLLM finished a request with {finish!r}")
    result = GenerationResult(token_ids=ids, logprobs=logprobs, finish_reason=finish)
    if topk:
        # each dict holds the top-k by rank plus the sampled token when it ranks below k
        best = [sorted(d.items(), key=lambda kv: kv[1].rank)[:topk] for d in per_token]
        result.topk_ids = [[t for t, _ in row] for row in best]
        result.topk_logprobs = [[float(lp.logprob) for _, lp in row] for row in best]
    return result

"""LoRA vs full fine-tuning: bytes and seconds per weight sync, optimizer-state + gradient memory.

The model: the tiny checkpoint (``--model``, ~0.9M parameters) or, with ``--size 100m``, a Qwen2
built from its config with hidden 768, 16 layers, intermediate 2048 (~98M parameters; the tiny
tokenizer). LoRA: rank ``--rank`` on every attention and MLP projection (``learner.lora``'s
default targets).

(a) sync, median over ``--rounds`` of each:
    - ``hf``: a sampler's own copy of the model (not colocated) gets the step's weights through
      ``HfBackend.update_weights``: the adapter (loaded in place, hash read back) vs the full
      state dict; bytes = the tensors handed over;
    - ``serve``: the ``openai`` backend pushes to ``agent-rl serve`` (in a thread, loopback HTTP):
      the adapter (``learner.lora``) vs the full weights; bytes = the HTTP body; seconds include
      gathering, serialization, the request, and the server's load.
    - ``vllm`` (``--vllm``; needs vLLM): one in-process engine started with LoRA enabled: the
      adapter as a new LoRA request vs a full reload of the weights into the engine (in place,
      generation paused); bytes = the tensors handed over.
(b) memory after one ``Learner.update`` (4 rows x 64 tokens): bytes of every parameter's
    ``.grad`` plus every tensor in AdamW's state, full fine-tuning vs LoRA. Counted from the
    tensors themselves (``numel * element_size``), not a process-level RSS sample.

    OMP_NUM_THREADS=1 python bench/lora_sync.py --model DIR [--size tiny|100m] [--rounds 5] [--rank 8] [--vllm]

Prints one JSON line per measurement (stdout; its progress, part i/n, on stderr).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_rl.config import LearnerConfig, LoraConfig
from agent_rl.learner.learner import Learner
from agent_rl.models import lora
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends.hf import HfBackend
from agent_rl.run.progress import script_progress


def build_100m(tiny: str, out: Path) -> str:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = AutoConfig.from_pretrained(tiny)
    cfg.update(
        {
            "hidden_size": 768,
            "num_hidden_layers": 16,
            "intermediate_size": 2048,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "layer_types": ["full_attention"] * 16,
        }
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(out)
    return str(out)


def nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def timed(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sync_hf(path: str, cfg: LoraConfig, rounds: int) -> list[dict]:
    out = []
    trainer_full, sampler_full = load_model(path), HfBackend(load_model(path), 0)
    sd = {k: v.detach().clone() for k, v in trainer_full.state_dict().items()}
    out.append(
        {
            "sync": "hf",
            "weights": "full",
            "bytes": nbytes(sd),
            "seconds": timed(
                lambda: sampler_full.update_weights(
                    {k: v.detach().clone() for k, v in trainer_full.state_dict().items()}, 1
                ),
                rounds,
            ),
        }
    )
    trainer = lora.apply_lora(load_model(path), cfg)
    sampler = HfBackend(lora.apply_lora(load_model(path), cfg), 0)
    adapter = lora.adapter_state(trainer)
    out.append(
        {
            "sync": "hf",
            "weights": "lora",
            "bytes": nbytes(adapter),
            "seconds": timed(lambda: sampler.update_weights(lora.adapter_state(trainer), 1), rounds),
        }
    )
    assert sampler.adapter.sha256 == lora.content_hash(adapter)
    return out


def sync_serve(path: str, cfg: LoraConfig, rounds: int) -> list[dict]:
    from agent_rl.proxy.serve import server_app
    from agent_rl.rollout.backends import OpenAIBackendConfig
    from agent_rl.rollout.backends.openai_http import OpenAIBackend
    from agent_rl.rollout.backends.server import build_state, serve_in_thread

    out = []
    for kind, model in (("full", load_model(path)), ("lora", lora.apply_lora(load_model(path), cfg))):
        with serve_in_thread(server_app(build_state(path))) as url:
            client = OpenAIBackend(OpenAIBackendConfig(base_url=url, api_key_env=None), "bench", model=model)
            version = iter(range(1, 10**6))
            seconds = timed(lambda: client.update_weights(None, next(version)), rounds)
            out.append({"sync": "serve", "weights": kind, "bytes": len(client._payload(None)), "seconds": seconds})
    return out


def sync_vllm(path: str, cfg: LoraConfig, rounds: int) -> list[dict]:
    from agent_rl.config import load_config
    from agent_rl.rollout.backends import BACKENDS

    run_cfg = load_config(
        None,
        [
            "rollout.backend.name=vllm",
            f"model.path={path}",
            "rollout.backend.enforce_eager=true",
            "rollout.backend.kv_cache_gb=1",
            "rollout.backend.max_model_len=256",
        ],
    )
    policy = lora.apply_lora(load_model(path), cfg)
    backend = BACKENDS(run_cfg.rollout.backend)(run_cfg.rollout.backend, run_cfg.model, model=policy)
    version = iter(range(1, 10**6))
    try:
        full = {k: v.detach().clone() for k, v in load_model(path).state_dict().items()}
        out = [
            {
                "sync": "vllm",
                "weights": "full",
                "bytes": nbytes(full),
                "seconds": timed(lambda: backend.update_weights(full, next(version)), rounds),
            },
            {
                "sync": "vllm",
                "weights": "lora",
                "bytes": nbytes(lora.adapter_state(policy)),
                "seconds": timed(lambda: backend.update_weights(None, next(version)), rounds),
            },
        ]
    finally:
        backend.close()
    return out


def memory(path: str, cfg: LoraConfig) -> list[dict]:
    from tests.learner.helpers import parts, step_batch

    out = []
    for kind in ("full", "lora"):
        torch.manual_seed(0)
        model = load_model(path)
        if kind == "lora":
            model = lora.apply_lora(model, cfg)
        learner = Learner(model, LearnerConfig(lr=1e-4, micro_batch_size=4, update_ratio_metric=False))
        batch, adv_BT = step_batch(model.config.vocab_size, B=4, T=64)
        batch.loss_mask_BT[:, :] = batch.attention_mask_BT
        learner.update(batch, adv_BT, parts("token_mean"))
        grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
        state = sum(
            t.numel() * t.element_size()
            for s in learner.optimizer.state.values()
            for t in s.values()
            if torch.is_tensor(t) and t.dim() > 0
        )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        out.append(
            {
                "memory": kind,
                "parameters": sum(p.numel() for p in model.parameters()),
                "trainable": trainable,
                "grad_bytes": grads,
                "optimizer_state_bytes": state,
                "total_bytes": grads + state,
            }
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the tiny checkpoint (agent-rl init-model tiny --out DIR)")
    p.add_argument("--size", choices=["tiny", "100m"], default="tiny")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--only", choices=["sync", "memory"], default=None)
    p.add_argument("--vllm", action="store_true", help="also the in-process vllm backend (starts an engine)")
    args = p.parse_args()
    cfg = LoraConfig(rank=args.rank, alpha=2.0 * args.rank)
    parts = []
    if args.only in (None, "sync"):
        parts += [("sync hf", sync_hf), ("sync serve", sync_serve)] + ([("sync vllm", sync_vllm)] if args.vllm else [])
    if args.only in (None, "memory"):
        parts.append(("memory", lambda path, cfg, rounds: memory(path, cfg)))
    progress = script_progress("bench/lora_sync", len(parts), unit="part")
    with tempfile.TemporaryDirectory() as tmp:
        if args.size == "100m":
            progress.phase("building the 100M model")
        path = build_100m(args.model, Path(tmp) / "m100") if args.size == "100m" else args.model
        for name, part in parts:
            progress.phase(f"{name} ({args.rounds} rounds)" if name.startswith("sync") else name)
            rows = part(path, cfg, args.rounds)
            for row in rows:
                print(json.dumps({"size": args.size, "rank": args.rank, **row}), flush=True)
            by = {r.get("weights", r.get("memory")): r for r in rows}
            key = "seconds" if name.startswith("sync") else "total_bytes"
            progress.advance({f"full {key}": by["full"][key], f"lora {key}": by["lora"][key]})
    progress.finish()


if __name__ == "__main__":
    main()

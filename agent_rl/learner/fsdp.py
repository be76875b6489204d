"""torch.distributed plumbing of the learner: process group, FSDP2 sharding, rows per rank, reductions.

Without a process group (``learner.world_size: 1``, the default) every function here is the
identity or its single-process equivalent, so the one-process path pays nothing.

Rows: each rank trains on a contiguous block of the step's rows (``shard_rows``); blocks are
padded to one size with copies of the first row whose loss mask is zero, so every rank runs the
same number of micro-batches (FSDP's collectives must match) and the padding adds nothing to the
loss, the gradient or the step-global counts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from agent_rl.core.types import TrainBatch


def rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_process_group(device: str = "cpu") -> None:
    """Join the group described by the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT).

    NCCL on CUDA devices, gloo otherwise. Without those variables a one-rank group on a free
    loopback port is created (FSDP2's mixed precision / CPU offload on a single process).
    """
    if dist.is_initialized():
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks: modules whose class the model lists in ``_no_split_modules``."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers found (its _no_split_modules is {sorted(names)})")
    return layers


def shard_model(
    model: torch.nn.Module,
    mixed_precision: str = "none",
    cpu_offload: bool = False,
    activation_checkpointing: bool = False,
) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` every decoder layer, then the root (embeddings, final norm, LM head).

    ``mixed_precision: bf16`` computes in bf16 and reduce-scatters gradients in fp32 (the sharded
    fp32 parameters stay the optimizer's master weights). ``cpu_offload`` keeps sharded
    parameters, gradients and optimizer state on the CPU. Without a process group only activation
    checkpointing applies (FSDP needs one; ``init_process_group`` makes a one-rank group).
    """
    if activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not (dist.is_available() and dist.is_initialized()):
        return model
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if mixed_precision == "bf16":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU: complete on rank 0, empty on the others (a collective)."""
    if not (dist.is_available() and dist.is_initialized()):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a (possibly DTensor) parameter or gradient."""
    return t.to_local() if hasattr(t, "to_local") else t


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """Element-wise sum / max of a list of floats over ranks (float64)."""
    if rank_and_world()[1] == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (a list of one outside a process group)."""
    world = rank_and_world()[1]
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank."""
    if rank_and_world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()


def rows_of_rank(num_rows: int, rank: int, world: int) -> tuple[int, int]:
    """The ``[start, end)`` block of rows of ``rank`` (blocks of ceil(B / world), the last ones shorter)."""
    per = -(-num_rows // world)
    return min(rank * per, num_rows), min((rank + 1) * per, num_rows)


def shard_rows(batch: TrainBatch, *per_row: torch.Tensor) -> tuple[TrainBatch, list[torch.Tensor]]:
    """This rank's rows of ``batch`` and of each ``[B, ...]`` tensor, padded to the common block size.

    Padding rows copy row 0 with a zero loss mask (and zeros in ``per_row``): they count for no
    token, sequence or group and their loss is 0.
    """
    rank, world = rank_and_world()
    if world == 1:
        return batch, list(per_row)
    B = batch.batch_size
    per = -(-B // world)
    start, end = rows_of_rank(B, rank, world)
    idx = torch.arange(start, end)
    pad = per - (end - start)
    if pad:
        idx = torch.cat([idx, torch.zeros(pad, dtype=torch.long)])
    shard = batch.select(idx)
    tensors = [t[idx].clone() for t in per_row]
    if pad:
        shard.loss_mask_BT = shard.loss_mask_BT.clone()
        shard.loss_mask_BT[per - pad :] = 0
        for t in tensors:
            t[per - pad :] = 0
    return shard, tensors


def map_rows(
    batch: TrainBatch, fn: Callable[[TrainBatch], tuple[torch.Tensor | None, ...]]
) -> tuple[torch.Tensor | None, ...]:
    """``fn`` on the whole batch, computed as one block of rows per rank and gathered on every rank.

    ``fn`` returns ``[b, ...]`` tensors (or None); under FSDP every rank must call this (the
    forward passes are collectives).
    """
    world = rank_and_world()[1]
    if world == 1:
        return fn(batch)
    shard, _ = shard_rows(batch)
    outs = fn(shard)
    gathered: list[torch.Tensor | None] = []
    for t in outs:
        if t is None:
            gathered.append(None)
            continue
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        gathered.append(torch.cat(parts)[: batch.batch_size])
    return tuple(gathered)

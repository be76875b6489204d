"""Shared builders of the learner tests: a hand-made step batch, multi-rank runs over gloo."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch

from agent_rl.algorithms import AGGREGATIONS, KLS, POLICY_LOSSES
from agent_rl.algorithms.plan import ObjectiveParts
from agent_rl.config import LearnerConfig
from agent_rl.core.types import TrainBatch


def step_batch(vocab: int, B: int = 6, T: int = 12, seed: int = 0) -> tuple[TrainBatch, torch.Tensor]:
    """B rows in 3 groups of 2, right-padded, prompt of 3 tokens, different response lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths_B = torch.tensor([12, 9, 7, 12, 5, 10])[:B]
    attn_BT = (torch.arange(T)[None] < lengths_B[:, None]).long()
    loss_BT = attn_BT.clone()
    loss_BT[:, :3] = 0  # the prompt
    ids_BT = torch.randint(0, vocab, (B, T), generator=g) * attn_BT
    batch = TrainBatch(
        input_ids_BT=ids_BT,
        attention_mask_BT=attn_BT,
        loss_mask_BT=loss_BT,
        position_ids_BT=torch.arange(T).expand(B, T).clone(),
        rollout_logprobs_BT=-torch.rand(B, T, generator=g) * loss_BT,
        old_logprobs_BT=None,
        rewards_B=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])[:B],
        group_index_B=torch.tensor([0, 0, 1, 1, 2, 2])[:B],
        turn_index_BT=torch.zeros(B, T, dtype=torch.long),
        policy_version_B=torch.zeros(B, dtype=torch.long),
    )
    advantages_BT = torch.randn(B, T, generator=g) * loss_BT
    return batch, advantages_BT


def parts(aggregation: str = "token_mean", loss: str = "ppo_clip") -> ObjectiveParts:
    return ObjectiveParts(
        loss=POLICY_LOSSES.parse_config(loss),
        aggregation=AGGREGATIONS.parse_config(aggregation),
        kl=KLS.parse_config("k3"),
    )


def learner_cfg(**kw: Any) -> LearnerConfig:
    return LearnerConfig(**{"lr": 1e-3, "micro_batch_size": 16, **kw})


def _worker(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    from agent_rl.learner import fsdp

    fsdp.init_process_group("cpu")
    try:
        result = fn(*args)
        if rank == 0:
            torch.save(result, os.path.join(out_dir, "result.pt"))
    finally:
        torch.distributed.destroy_process_group()


def run_ranks(world: int, fn: Callable[..., Any], *args: Any, tmp_dir: str) -> Any:
    """``fn(*args)`` on ``world`` spawned gloo ranks; rank 0's return value."""
    import torch.multiprocessing as mp

    from agent_rl.learner.fsdp import free_port

    mp.start_processes(_worker, args=(world, free_port(), fn, args, str(tmp_dir)), nprocs=world, start_method="fork")
    return torch.load(os.path.join(tmp_dir, "result.pt"), weights_only=False)


def train_cmd(*extra: str) -> list[str]:
    """``agent-rl train`` with ``extra`` arguments, as a subprocess command."""
    return [sys.executable, "-m", "agent_rl.cli", "train", *extra]


def env(**extra: str) -> dict[str, str]:
    """The CLI environment with one OpenMP thread (deterministic CPU runs)."""
    from tests.conftest import cli_env

    return {**cli_env(), "OMP_NUM_THREADS": "1", **extra}


def run(cmd: list[str], **env_extra: str) -> subprocess.CompletedProcess:
    from tests import cli_runner
    from tests.conftest import ROOT

    return cli_runner.run(cmd, ROOT, env(**env_extra), timeout=600)  # a process forked from a preloaded one

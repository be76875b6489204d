"""Small builders shared by the policy-loss tests (float64, so hand arithmetic matches to 1e-6)."""

from __future__ import annotations

import math

import torch

from agent_rl.algorithms.aggregation import token_mean
from agent_rl.algorithms.registry import AggregationInputs, ComponentConfig, LossInputs, LossOutput

F64 = torch.float64


def t(values, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=F64, requires_grad=requires_grad)


def logs(probs) -> list:
    """Elementwise natural log of a (nested) list of probabilities."""
    if isinstance(probs, (list, tuple)):
        return [logs(p) for p in probs]
    return math.log(probs)


def inputs(logprobs, old_logprobs, advantages, mask=None, **extra) -> LossInputs:
    """LossInputs from nested lists; ``logprobs_BT`` requires grad. Extra fields are tensors or lists."""
    logp = t(logprobs, requires_grad=True)
    fields = {k: (t(v) if isinstance(v, list) else v) for k, v in extra.items()}
    mask_BT = t(mask) if mask is not None else torch.ones_like(logp)
    return LossInputs(
        logprobs_BT=logp, old_logprobs_BT=t(old_logprobs), advantages_BT=t(advantages), loss_mask_BT=mask_BT, **fields
    )


def reduce(out: LossOutput, x: LossInputs) -> torch.Tensor:
    """token_mean over the call, the aggregation the tests use throughout."""
    mask = x.loss_mask_BT
    agg = AggregationInputs(num_tokens=float(mask.sum()), num_sequences=float(mask.shape[0]), num_groups=1.0)
    return token_mean(out.loss_BT, mask, agg, ComponentConfig())


def loss_and_grad(fn, cfg, x: LossInputs, *extra_grads: torch.Tensor):
    """(token-mean loss as float, d loss / d logprobs_BT[, d loss / d each extra tensor])."""
    loss = reduce(fn(x, cfg), x)
    grads = torch.autograd.grad(loss, [x.logprobs_BT, *extra_grads], allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(v) for g, v in zip(grads, [x.logprobs_BT, *extra_grads])]
    return (float(loss.detach()), *grads)


def assert_close(actual, expected, atol: float = 1e-6) -> None:
    a = torch.as_tensor(actual, dtype=F64)
    e = torch.as_tensor(expected, dtype=F64)
    assert a.shape == e.shape, (a.shape, e.shape)
    assert torch.allclose(a, e, atol=atol, rtol=0), f"\nactual   {a.tolist()}\nexpected {e.tolist()}"

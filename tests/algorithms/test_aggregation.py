"""Loss aggregation: hand examples per mode, step-global counts, micro-batch invariance.

Shared example, 3 rows in 2 groups (loss values, x = masked out):

    row  group  loss      mask     L   row sum
    0    0      1 2 x     1 1 0    2   3
    1    0      4 5 6     1 1 1    3   15
    2    1      7 8 9     1 1 1    3   24

token_mean, seq_mean_token_mean, seq_mean_token_sum and seq_mean_token_sum_norm (horizon 3) also
match verl 0.9.1 ``agg_loss`` on this example and on random ones, whole-batch and micro-batched
with its global denominators (checked outside CI; verl is not a test dependency).
"""

from __future__ import annotations

import math

import pytest
import torch

from agent_rl.algorithms import AGGREGATIONS
from agent_rl.algorithms.aggregation import aggregation_inputs_for, select_rows
from agent_rl.algorithms.registry import AggregationInputs

LOSS = torch.tensor([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]])
MASK = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 1, 1]])
GROUPS = torch.tensor([0, 0, 1])


def agg(key: str, loss=LOSS, mask=MASK, x: AggregationInputs | None = None, **cfg) -> float:
    entry = AGGREGATIONS.get(key)
    x = x if x is not None else aggregation_inputs_for(mask, GROUPS)
    return float(entry.fn(loss, mask, x, entry.config(**cfg)))


def test_aggregation_inputs_for_counts():
    x = aggregation_inputs_for(torch.cat([MASK, torch.zeros(1, 3)]), torch.tensor([0, 0, 1, 2]))
    assert x.num_tokens == 8  # 2 + 3 + 3
    assert x.num_sequences == 3  # the empty 4th row does not count (as in verl)
    assert x.num_groups == 2  # group 2 has no loss token
    assert x.group_num_tokens_B.tolist() == [5, 5, 3, 0]
    assert x.max_response_tokens == 3  # the padded width by default
    assert aggregation_inputs_for(MASK, GROUPS, max_response_tokens=4096).max_response_tokens == 4096
    part = select_rows(x, slice(1, 3))
    assert part.group_num_tokens_B.tolist() == [5, 3] and part.num_tokens == 8


def test_token_mean():
    # (3 + 15 + 24) / 8 tokens
    assert agg("token_mean") == pytest.approx(42 / 8)


def test_seq_mean_token_mean():
    # row means 3/2, 15/3, 24/3 = 1.5, 5, 8 -> 14.5 / 3 rows
    assert agg("seq_mean_token_mean") == pytest.approx(14.5 / 3)


def test_seq_mean_token_sum():
    # row sums 3 + 15 + 24 = 42 over 3 rows
    assert agg("seq_mean_token_sum") == pytest.approx(14.0)


def test_seq_mean_token_sum_norm():
    # 42 / (3 rows * horizon 3); with a configured constant 10: 42 / 30
    assert agg("seq_mean_token_sum_norm") == pytest.approx(42 / 9)
    assert agg("seq_mean_token_sum_norm", normalizer=10.0) == pytest.approx(42 / 30)


def test_prompt_mean():
    # group 0: (3 + 15) / 5 tokens = 3.6; group 1: 24 / 3 = 8 -> (3.6 + 8) / 2 groups
    assert agg("prompt_mean") == pytest.approx(5.8)


def test_length_power():
    # alpha 0.5: weights L^-0.5 = (2^-0.5, 3^-0.5, 3^-0.5): (3*0.7071068 + 15*0.5773503 + 24*0.5773503)/3
    assert agg("length_power") == pytest.approx((3 / math.sqrt(2) + 39 / math.sqrt(3)) / 3)
    assert agg("length_power") == pytest.approx(8.2126600, abs=1e-6)
    # alpha 0 is seq_mean_token_mean, alpha 1 is seq_mean_token_sum
    assert agg("length_power", alpha=0.0) == pytest.approx(agg("seq_mean_token_mean"))
    assert agg("length_power", alpha=1.0) == pytest.approx(agg("seq_mean_token_sum"))


def test_missing_step_fields_raise():
    x = AggregationInputs(num_tokens=8, num_sequences=3, num_groups=2)
    with pytest.raises(ValueError, match="group_num_tokens_B"):
        agg("prompt_mean", x=x)
    with pytest.raises(ValueError, match="max_response_tokens"):
        agg("seq_mean_token_sum_norm", x=x)


def random_step(seed: int, B: int = 9, T: int = 8, extreme: bool = False):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, T, generator=g) * (1e4 if extreme else 1.0)
    mask = (torch.rand(B, T, generator=g) > 0.4).float()
    mask[seed % B] = 0  # an empty row
    groups = torch.randint(0, 4, (B,), generator=g)
    return loss, mask, groups


@pytest.mark.parametrize("key", AGGREGATIONS.names())
@pytest.mark.parametrize("micro", [1, 2, 4])
def test_micro_batches_sum_to_the_whole_step(key, micro):
    entry = AGGREGATIONS.get(key)
    cfg = entry.config()
    for seed in range(3):
        loss, mask, groups = random_step(seed)
        x = aggregation_inputs_for(mask, groups)
        whole_loss = loss.clone().requires_grad_(True)
        whole = entry.fn(whole_loss, mask, x, cfg)
        whole.backward()
        parts_loss = loss.clone().requires_grad_(True)
        total = torch.zeros(())
        for s in range(0, loss.shape[0], micro):
            rows = slice(s, s + micro)
            part = entry.fn(parts_loss[rows], mask[rows], select_rows(x, rows), cfg)
            part.backward()
            total = total + part.detach()
        assert whole.item() != 0.0
        assert total.item() == pytest.approx(whole.item(), rel=1e-5, abs=1e-6)
        torch.testing.assert_close(parts_loss.grad, whole_loss.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("key", AGGREGATIONS.names())
def test_padding_changes_nothing_and_extremes_are_finite(key):
    entry = AGGREGATIONS.get(key)
    loss, mask, groups = random_step(5, extreme=True)
    x = aggregation_inputs_for(mask, groups, max_response_tokens=100.0)
    out = entry.fn(loss, mask, x, entry.config())
    assert torch.isfinite(out)
    # two padding columns with huge losses and masked positions full of garbage
    pad_loss = torch.cat(
        [torch.where(mask > 0, loss, torch.full_like(loss, 1e30)), torch.full((loss.shape[0], 2), -1e30)], 1
    )
    pad_mask = torch.cat([mask, torch.zeros(mask.shape[0], 2)], 1)
    x_pad = aggregation_inputs_for(pad_mask, groups, max_response_tokens=100.0)
    assert entry.fn(pad_loss.nan_to_num(), pad_mask, x_pad, entry.config()).item() == pytest.approx(
        out.item(), rel=1e-5
    )

"""bench/vs_trl_turns.py gives TRL a multi-turn row as GRPOTrainer builds it from a tool episode."""

from __future__ import annotations

import torch

from bench.vs_trl_turns import trl_inputs


def test_rows_become_left_padded_prompts_and_one_masked_completion():
    rows = [
        {
            "token_ids": [1, 2, 3, 10, 11, 20, 21, 12],
            "loss_mask": [0, 0, 0, 1, 1, 0, 0, 1],
        },  # call, tool result, answer
        {"token_ids": [4, 5, 13, 14, 15], "loss_mask": [0, 0, 1, 1, 1]},
    ]
    x = trl_inputs(rows, torch.tensor([0.5, -0.5]))
    assert x["prompt_ids"].tolist() == [[1, 2, 3], [0, 4, 5]] and x["prompt_mask"].tolist() == [[1, 1, 1], [0, 1, 1]]
    assert x["completion_ids"].tolist() == [[10, 11, 20, 21, 12], [13, 14, 15, 0, 0]]
    assert x["completion_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert x["tool_mask"].tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]]
    assert int(x["num_items_in_batch"]) == 6 == sum(sum(r["loss_mask"]) for r in rows)
    assert x["advantages"].tolist() == [0.5, -0.5] and x["old_per_token_logps"] is None

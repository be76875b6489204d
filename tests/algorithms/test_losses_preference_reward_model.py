"""The Bradley-Terry reward model: its score position, its pair accuracy, ``agent-rl train-rm`` end to end."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
import torch

from agent_rl.cli import main
from agent_rl.commands.train_rm import pair_accuracy
from agent_rl.train.scorers import sequence_rewards


def test_pair_accuracy_counts_ties_as_half():
    #  right, tie, wrong -> (1 + .5 + 0) / 3
    assert pair_accuracy(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 0.0, 3.0])) == pytest.approx(0.5)


def test_reward_is_the_head_at_the_last_policy_token():
    class Positions(torch.nn.Module):  # the head's output at position t is t
        def forward(self, input_ids, attention_mask):
            B, T = input_ids.shape
            return SimpleNamespace(logits=torch.arange(T, dtype=torch.float32).expand(B, T).unsqueeze(-1))

    #             P  P  a  a  E  pad          P  a  o  a  a  E
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 0, 1, 1, 1]])
    batch = SimpleNamespace(
        input_ids_BT=torch.zeros(2, 6, dtype=torch.long), attention_mask_BT=torch.ones(2, 6), loss_mask_BT=mask
    )
    assert sequence_rewards(Positions(), batch).tolist() == [4.0, 5.0]


def pairs(n: int, seed: int = 0) -> list[dict]:
    """Chosen answers are full sentences, rejected ones bare numbers with '!!': learnable by a tiny model."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randrange(50), rng.randrange(50)
        out.append(
            {
                "prompt": f"What is {a}+{b}?",
                "chosen": f"The answer is {a + b}.",
                "rejected": f"{a + b + rng.randrange(1, 9)}!!",
            }
        )
    return out


def test_train_rm_ranks_held_out_pairs(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in pairs(32)))
    out = tmp_path / "rm"
    rc = main(["train-rm", "--data", str(data), "--model", str(tiny_model_dir), "--out", str(out),
               "--steps", "12", "--batch-pairs", "8", "--lr", "1e-3", "--heldout-frac", "0.25"])  # fmt: skip
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["heldout_pairs"] == 8 and metrics["train_pairs"] == 24
    assert metrics["heldout_accuracy_before"] == 0.5  # the zero head scores every response alike
    assert metrics["heldout_accuracy"] >= 0.85  # measured: 1.0 (8 of 8), loss .693 -> .089 in 12 steps
    assert "held-out pair accuracy" in capsys.readouterr().out
    assert (out / "config.json").exists()  # a from_pretrained-loadable reward model


def test_train_rm_refuses_labelled_samples(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "labels.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "completion": "2", "label": True}) + "\n")
    rc = main(["train-rm", "--data", str(data), "--model", str(tiny_model_dir), "--out", str(tmp_path / "rm")])
    assert rc == 2 and "train-rm needs pairs" in capsys.readouterr().err

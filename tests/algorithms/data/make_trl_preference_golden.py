"""Writes ``trl_preference_golden.json``: TRL's DPO (sigmoid, cDPO), RPO (sigmoid + sft) and KTO
losses and gradients on fixed per-token logprobs. A reference, not run in CI (TRL is not a dependency).

TRL's own loss code runs (``DPOTrainer._compute_loss``, ``KTOTrainer._compute_loss``) on a trainer
object made without ``__init__`` (no model, dataset or tokenizer), with a stand-in model whose
forward returns the fixed per-token logprobs (zero where the label is -100, as TRL's fused LM head
does). The gradient is taken with respect to those logprobs. TRL 1.16's sigmoid loss ignores
``label_smoothing`` (cDPO), so our ``dpo.label_smoothing`` has a hand-computed test only. Run it with TRL beside the project's
torch, outside the repository's venv, e.g.::

    pip install --target /tmp/trlpkgs --no-deps trl==1.16.0 datasets multiprocess
    PYTHONPATH=/tmp/trlpkgs .venv/bin/python tests/algorithms/data/make_trl_preference_golden.py
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import torch
import trl
from accelerate import Accelerator
from trl import DPOTrainer, KTOTrainer

OUT = Path(__file__).with_name("trl_preference_golden.json")
F64 = torch.float64


class FixedLogprobs(torch.nn.Module):
    """Stand-in model: per-token logprobs of the next token, zero where the label is -100."""

    def __init__(self, table: dict[int, torch.Tensor]):
        super().__init__()
        self.table = table  # id(input_ids) -> logprobs [B, T-1] (the leaf for the main batch)

    def forward(self, input_ids, labels=None, **_):
        logp = self.table[id(input_ids)]
        keep = (labels[:, 1:] != -100).to(F64)
        zeros = torch.zeros_like(logp)
        return SimpleNamespace(
            log_probs=logp * keep,
            entropy=zeros,
            mean_logits=zeros,
            is_top1=zeros.bool(),
            aux_loss=None,
            log_sum_sq_probs=zeros,
        )


def _fixed(rows: int, width: int, seed: int, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [rows, width+1], completion_mask [rows, width+1], logprobs [rows, width]): one prompt
    token, then ``lengths[i]`` completion tokens, then padding."""
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(rows, width, generator=gen, dtype=F64) * 3.0 - 0.05
    ids = torch.randint(3, 50, (rows, width + 1), generator=gen)
    mask = torch.zeros(rows, width + 1, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, 1 : 1 + n] = 1
    return ids, mask, logp


def _trainer(cls, **attrs):
    t = cls.__new__(cls)
    t.accelerator = Accelerator(cpu=True)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t._total_train_tokens, t._tp_size, t.aux_loss_enabled, t.ref_model = 0, 1, False, None
    t.precompute_ref_logps = True
    for k, v in attrs.items():
        setattr(t, k, v)
    return t


def dpo_case(
    name: str,
    loss_types: list[str],
    loss_weights: list[float],
    beta: float,
    label_smoothing: float,
    chosen_lengths,
    rejected_lengths,
    seed: int,
):
    pairs, width = len(chosen_lengths), 5
    ids, cmask, logp = _fixed(2 * pairs, width, seed, list(chosen_lengths) + list(rejected_lengths))
    gen = torch.Generator().manual_seed(seed + 1)
    ref = -torch.rand(2 * pairs, generator=gen, dtype=F64) * 6.0 - 1.0
    leaf = logp.clone().requires_grad_(True)
    model = FixedLogprobs({id(ids): leaf}).train()
    t = _trainer(
        DPOTrainer, model=model, beta=beta, label_smoothing=label_smoothing, loss_types=loss_types, loss_weights=loss_weights,
        ld_alpha=None, f_divergence_type="reverse_kl", f_alpha_divergence_coef=1.0, use_weighting=False,
    )  # fmt: skip
    inputs = {
        "input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": cmask,
        "ref_chosen_logps": ref[:pairs], "ref_rejected_logps": ref[pairs:],
    }  # fmt: skip
    loss = t._compute_loss(model, inputs, False)
    (grad,) = torch.autograd.grad(loss, [leaf])
    return name, {
        "trainer": "DPOTrainer", "loss_type": loss_types, "loss_weights": loss_weights, "beta": beta,
        "label_smoothing": label_smoothing, "rows": "chosen rows 0..P-1, then rejected rows P..2P-1",
        "logprobs_BT": logp.tolist(), "loss_mask_BT": cmask[:, 1:].tolist(), "ref_seq_logps_B": ref.tolist(),
        "loss": float(loss.detach()), "grad_BT": grad.tolist(),
    }  # fmt: skip


def kto_case(
    name: str, beta: float, desirable_weight: float, undesirable_weight: float, labels: list[bool], lengths, seed: int
):
    rows, width = len(labels), 5
    ids, cmask, logp = _fixed(rows, width, seed, lengths)
    kl_ids, kl_mask, kl_logp = _fixed(rows, width, seed + 7, [width] * rows)
    gen = torch.Generator().manual_seed(seed + 1)
    ref = -torch.rand(rows, generator=gen, dtype=F64) * 6.0 - 1.0
    ref_kl = kl_logp.sum(-1) - torch.rand(rows, generator=gen, dtype=F64) * 0.8 + 0.1  # KL estimate > 0
    leaf = logp.clone().requires_grad_(True)
    model = FixedLogprobs({id(ids): leaf, id(kl_ids): kl_logp}).train()
    t = _trainer(
        KTOTrainer, model=model, beta=beta, desirable_weight=desirable_weight, undesirable_weight=undesirable_weight,
        loss_type="kto", calculate_KL=True,
    )  # fmt: skip
    inputs = {
        "input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": cmask,
        "KL_input_ids": kl_ids, "KL_attention_mask": torch.ones_like(kl_ids), "KL_completion_mask": kl_mask,
        "label": torch.tensor(labels), "ref_logps": ref, "ref_KL_logps": ref_kl,
    }  # fmt: skip
    loss = t._compute_loss(model, inputs, False)
    (grad,) = torch.autograd.grad(loss, [leaf])
    return name, {
        "trainer": "KTOTrainer", "loss_type": "kto", "beta": beta, "desirable_weight": desirable_weight,
        "undesirable_weight": undesirable_weight, "labels_B": labels,
        "logprobs_BT": logp.tolist(), "loss_mask_BT": cmask[:, 1:].tolist(), "ref_seq_logps_B": ref.tolist(),
        "kl_seq_logps_B": (kl_logp * kl_mask[:, 1:]).sum(-1).tolist(), "ref_kl_seq_logps_B": ref_kl.tolist(),
        "kl": t._metrics["train"]["kl"][-1], "loss": float(loss.detach()), "grad_BT": grad.tolist(),
    }  # fmt: skip


def main() -> None:
    cases = dict(
        [
            dpo_case("dpo_sigmoid", ["sigmoid"], [1.0], 0.1, 0.0, [5, 3, 4], [2, 5, 4], seed=11),
            dpo_case("dpo_sigmoid_beta05", ["sigmoid"], [1.0], 0.5, 0.0, [4, 4, 1], [5, 2, 3], seed=12),
            # RPO as TRL writes it: sigmoid + alpha * sft; equal chosen lengths (TRL's NLL is a batch token mean)
            dpo_case("rpo_sigmoid_sft", ["sigmoid", "sft"], [1.0, 1.0], 0.1, 0.0, [4, 4, 4], [2, 5, 3], seed=13),
            dpo_case("rpo_sigmoid_sft_alpha05", ["sigmoid", "sft"], [1.0, 0.5], 0.2, 0.0, [3, 3], [5, 1], seed=14),
            kto_case("kto", 0.1, 1.0, 1.0, [True, False, True, False, False], [5, 3, 4, 2, 5], seed=21),
            kto_case(
                "kto_weighted", 0.5, 1.33, 0.7, [True, True, False, False, True, False], [1, 5, 3, 4, 2, 5], seed=22
            ),
        ]
    )
    OUT.write_text(
        json.dumps({"trl_version": trl.__version__, "torch_version": torch.__version__, "cases": cases}, indent=1)
        + "\n"
    )
    print(f"wrote {OUT} (TRL {trl.__version__}): " + ", ".join(f"{k} {v['loss']:.6f}" for k, v in cases.items()))


if __name__ == "__main__":
    main()

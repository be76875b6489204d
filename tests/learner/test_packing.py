"""Packed micro-batches (``learner.packing``) and token budgets (``learner.max_tokens_per_micro_batch``)
compute what the padded micro-batches compute: logprobs, entropy, loss, gradients, values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from agent_rl.algorithms import AGGREGATIONS
from agent_rl.algorithms.credit.common import copied_prefix_mask
from agent_rl.config import CriticConfig
from agent_rl.learner import packing, varlen
from agent_rl.learner.critic import Critic, load_value_model
from agent_rl.learner.learner import Learner
from agent_rl.learner.logprobs import token_logprobs
from agent_rl.models.loading import load_model
from tests.learner.helpers import learner_cfg, parts, run_ranks, step_batch
from tests.learner.test_learner import rel_diff

# step_batch: 6 rows of lengths 12, 9, 7, 12, 5, 10 (prompt 3 tokens), groups 0 0 1 1 2 2
LENGTHS = [12, 9, 7, 12, 5, 10]
PACKED_BUDGET = {"packing": True, "max_tokens_per_micro_batch": 24}


def test_pack_layout_and_round_trip():
    batch, _ = step_batch(50, B=3, T=12)  # lengths 12, 9, 7
    p = packing.pack(batch)
    assert p.src_rows_N.tolist() == [0] * 12 + [1] * 9 + [2] * 7
    assert p.position_ids_1N[0].tolist() == list(range(12)) + list(range(9)) + list(range(7))
    assert p.segments == [(0, 12, 0, 0), (12, 21, 12, 12), (21, 28, 21, 21)]
    assert p.index_BT[2].tolist() == list(range(21, 28)) + [-1] * 5
    # the head's pairs: hidden n predicts token n + 1 of the same row (not across 11 | 12, 20 | 21)
    h_P, y_P, b_D, t_D, _ = p.predictions(batch.input_ids_BT, dedupe=False)
    assert h_P.tolist() == list(range(11)) + list(range(12, 20)) + list(range(21, 27))
    assert torch.equal(y_P, batch.input_ids_BT[b_D, t_D]) and t_D.min() == 1
    assert torch.equal(p.unpack(p.gather(batch.input_ids_BT)), batch.input_ids_BT * batch.attention_mask_BT)


def test_pack_refuses_positions_it_cannot_split():
    batch, _ = step_batch(50, B=2, T=12)
    batch.position_ids_BT = batch.position_ids_BT.clone()
    batch.position_ids_BT[1] += 12  # row 1 continues row 0's positions (12 follows 11)
    with pytest.raises(ValueError, match="row 1 cannot be packed"):
        packing.pack(batch)
    batch.position_ids_BT[1] = torch.tensor([0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12])  # a jump inside row 1
    with pytest.raises(ValueError, match="row 1 cannot be packed"):
        packing.pack(batch)


class _Leaky(torch.nn.Module):
    """Each output is the running mean of the embeddings: it ignores packed position ids."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)

    def get_input_embeddings(self):
        return self.emb

    def forward(self, input_ids, position_ids=None, use_cache=False):
        h = self.emb(input_ids).cumsum(1) / torch.arange(1, input_ids.shape[1] + 1)[None, :, None]
        return SimpleNamespace(logits=h)


def test_a_model_that_mixes_packed_sequences_is_refused():
    with pytest.raises(ValueError, match="_Leaky lets packed sequences attend to each other"):
        packing.check_isolation(_Leaky())


def test_token_budget_plans_by_hand():
    # packed, budget 24, first-fit longest first: 12+12 | 10+9+5 | 7
    assert packing.plan(LENGTHS, 16, 24, packed=True) == [[0, 3], [1, 4, 5], [2]]
    # padded, budget 24: a bin costs rows x its longest row: 12,12 | 10,9 | 7,5
    assert packing.plan(LENGTHS, 16, 24, packed=False) == [[0, 3], [1, 5], [2, 4]]
    assert packing.plan(LENGTHS, 16, 5, packed=True) == [[0], [3], [5], [1], [2], [4]]  # too long: alone
    assert packing.plan(LENGTHS, 4, None, packed=True) == [[0, 1, 2, 3], [4, 5]]
    # two ranks, longest first to the lighter (ties: fewer rows, then rank 0):
    # 12 -> r0, 12 -> r1, 10 -> r0, 9 -> r1 (21 < 22), 7 -> r1, 5 -> r0: rows 0 4 5 (27) | 1 2 3 (28)
    assert packing.balanced_rows(LENGTHS, 2) == [[0, 4, 5], [1, 2, 3]]


@pytest.mark.parametrize("attention", ["sdpa", "eager", "sdpa_checkpointed"])
def test_packed_logprobs_entropy_topk_and_gradients_equal_padded(tiny_model_dir, attention):
    # sdpa: row-by-row attention (varlen.py); eager: transformers' block-diagonal mask from the
    # position ids; checkpointed: the recompute in backward gets the row bounds again
    model = load_model(str(tiny_model_dir), "float32", "cpu")
    if attention == "eager":
        model.set_attn_implementation("eager")
    if attention == "sdpa_checkpointed":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
    batch, _ = step_batch(model.config.vocab_size)
    topk_BTK = torch.randint(0, model.config.vocab_size, (6, 12, 3), generator=torch.Generator().manual_seed(1))
    results = {}
    for packed in (False, True):
        model.zero_grad()
        lp, ent, topk = token_logprobs(model, batch, 0.9, True, chunk_tokens=7, topk_ids_BTK=topk_BTK, packed=packed)
        (lp.sum() + 0.3 * ent.sum() + 0.1 * topk.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[packed] = (lp.detach(), ent.detach(), topk.detach(), grads)
    for a, b in zip(results[True][:3], results[False][:3], strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert results[True][0][batch.attention_mask_BT == 0].abs().max() == 0  # padding: 0
    assert rel_diff(results[True][3], results[False][3]) <= 1e-5
    assert model.config._attn_implementation == ("eager" if attention == "eager" else varlen.NAME)


def update(model_dir: str, aggregation: str, loss_mask=None, **cfg_kw) -> dict:
    """Gradients and metrics of one update on the hand-made batch (``loss_mask``: replaces its mask)."""
    torch.manual_seed(0)
    model = load_model(model_dir, "float32", "cpu")
    learner = Learner(model, learner_cfg(**{"micro_batch_size": 6, "adam_eps": 1e-6, **cfg_kw}), temperature=0.9)
    batch, adv_BT = step_batch(model.config.vocab_size)
    if loss_mask is not None:
        batch.loss_mask_BT = loss_mask(batch.loss_mask_BT)
        adv_BT = adv_BT * batch.loss_mask_BT
    old, _ = learner.score(learner.model, batch)
    batch.old_logprobs_BT = old + 0.05 * batch.loss_mask_BT  # ratios != 1: the clip is exercised
    metrics = learner.update(batch, adv_BT, parts(aggregation))
    grads = {
        n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        for n, p in learner.model.named_parameters()
    }
    return {"metrics": metrics, "grads": grads, "old": old}


def assert_same_update(a: dict, b: dict) -> None:
    assert rel_diff(a["grads"], b["grads"]) <= 1e-5
    assert torch.allclose(a["old"], b["old"], atol=1e-5, rtol=0)
    for k in ("train/loss", "train/grad_norm", "train/mismatch_kl", "train/tokens"):
        assert math.isclose(a["metrics"][k], b["metrics"][k], rel_tol=1e-5, abs_tol=1e-7), k


@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS.names()))
def test_packed_token_budget_update_equals_padded(tiny_model_dir, aggregation):
    padded = update(str(tiny_model_dir), aggregation)
    assert_same_update(update(str(tiny_model_dir), aggregation, **PACKED_BUDGET), padded)


def test_packed_update_with_a_credit_methods_loss_mask(tiny_model_dir):
    # row 3 forked from row 2 at token 6: its copied prefix is out of the loss; row 0 has a hole
    # (an observation inside the response) at tokens 6-8
    rows = [
        (0, SimpleNamespace(episode_id=i, parent_id=2 if i == 3 else None, branch_point=6 if i == 3 else None))
        for i in range(6)
    ]

    def credit_mask(mask_BT):
        out_BT = copied_prefix_mask(rows, mask_BT)
        out_BT[0, 6:9] = 0
        return out_BT

    padded = update(str(tiny_model_dir), "seq_mean_token_mean", credit_mask)
    assert padded["metrics"]["train/tokens"] == 9 + 6 + 4 + 6 + 2 + 7 - 3  # response tokens by hand
    assert_same_update(update(str(tiny_model_dir), "seq_mean_token_mean", credit_mask, **PACKED_BUDGET), padded)


def critic_step(model_dir: str, **cfg_kw) -> dict:
    torch.manual_seed(0)
    critic = Critic(
        load_value_model(model_dir), CriticConfig(lr=1e-2, value_clip=0.1), learner_cfg(micro_batch_size=6, **cfg_kw)
    )
    # transformers' token-classification head applies dropout 0.1 in training: its random mask has
    # the layout's shape, so the two layouts agree only in expectation; off for the comparison
    critic.model.dropout.p = 0.0
    batch, _ = step_batch(critic.model.config.vocab_size)
    values = critic.values(batch)
    old_BT = values + 0.2 * batch.loss_mask_BT * torch.linspace(
        -1, 1, batch.input_ids_BT.shape[1]
    )  # some clipped, some not
    metrics = critic.update(batch, 3.0 * batch.loss_mask_BT, old_BT)
    values_after = critic.values(batch)
    grads = {n: p.grad for n, p in critic.model.named_parameters() if p.grad is not None}
    return {"metrics": metrics, "grads": grads, "values": values_after}


def test_packed_critic_equals_padded(tiny_model_dir):
    padded, packed = critic_step(str(tiny_model_dir)), critic_step(str(tiny_model_dir), **PACKED_BUDGET)
    assert rel_diff(packed["grads"], padded["grads"]) <= 1e-5
    assert torch.allclose(packed["values"], padded["values"], atol=1e-5, rtol=0)
    assert packed["values"].abs().max() > 0  # one step moved the zero-initialised head
    for k in ("critic/loss", "critic/value_mse", "critic/clip_frac"):
        assert math.isclose(packed["metrics"][k], padded["metrics"][k], rel_tol=1e-5, abs_tol=1e-7), k


def packed_update_on_ranks(model_dir: str) -> dict:
    return update(model_dir, "prompt_mean", packing=True, max_tokens_per_micro_batch=15)


@pytest.mark.distributed
def test_two_fsdp_ranks_packed_equal_one_padded_process(tiny_model_dir, tmp_path):
    # rows dealt by tokens: rank 0 gets rows 0, 4, 5 (12 + 5 + 10), rank 1 rows 1, 2, 3 (9 + 7 + 12);
    # budget 15: rank 0 runs 12 | 10 + 5 and one empty filler, rank 1 runs 12 | 9 | 7;
    # prompt_mean's group token counts cross ranks (group 0 = rows 0 and 1)
    single = update(str(tiny_model_dir), "prompt_mean")
    double = run_ranks(2, packed_update_on_ranks, str(tiny_model_dir), tmp_dir=tmp_path)
    assert_same_update(double, single)

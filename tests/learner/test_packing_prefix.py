"""Shared-prefix packing (``learner.share_prefixes``): a prefix that rows share is computed once, and
logprobs, entropy, loss, gradients and values equal the unshared computation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_rl.learner import prefix
from agent_rl.learner.logprobs import token_logprobs
from agent_rl.models.loading import load_model
from tests.learner.helpers import step_batch
from tests.learner.test_learner import rel_diff
from tests.learner.test_packing import assert_same_update, critic_step, update

PROMPT = 17  # >= prefix.MIN_SHARED_TOKENS


def shared_batch(vocab: int):
    """step_batch's 6 rows (3 groups of 2), widened to 26 columns: each group's rows start with the
    same 17-token prompt; row 3 is a fork of row 2 at token 20; row 4 is only the prompt."""
    batch, _ = step_batch(vocab, T=26, seed=3)
    lengths_B = torch.tensor([26, 22, 24, 25, 17, 21])
    attn_BT = (torch.arange(26)[None] < lengths_B[:, None]).long()
    g = torch.Generator().manual_seed(5)
    ids_BT = torch.randint(0, vocab, (6, 26), generator=g)
    for a, b in ((0, 1), (2, 3), (4, 5)):
        ids_BT[b, :PROMPT] = ids_BT[a, :PROMPT]
    ids_BT[3, :20] = ids_BT[2, :20]
    loss_BT = attn_BT.clone()
    loss_BT[:, :PROMPT] = 0
    loss_BT[3, :20] = 0  # the fork's copied tokens are trained on once, in row 2
    batch.input_ids_BT, batch.attention_mask_BT, batch.loss_mask_BT = ids_BT * attn_BT, attn_BT, loss_BT
    batch.rollout_logprobs_BT = -torch.rand(6, 26, generator=g) * loss_BT
    return batch, torch.randn(6, 26, generator=g) * loss_BT


def test_clusters_and_layout_by_hand(tiny_model_dir):
    batch, _ = shared_batch(50)
    p = prefix.shared_pack(batch)
    #  rows 0+1: prompt 17 once, then 9 + 5;  rows 2+3: 20 shared, then 4 + 5;  rows 4+5: 17, then 0 + 4
    assert p.segments == [
        (0, 17, 0, 0),
        (17, 26, 0, 17),
        (26, 31, 0, 17),
        (31, 51, 31, 31),
        (51, 55, 31, 51),
        (55, 60, 31, 51),
        (60, 77, 60, 60),
        (77, 77, 60, 77),
        (77, 81, 60, 77),
    ]
    assert p.input_ids_1N.shape[1] == 81 == int(batch.attention_mask_BT.sum()) - 17 - 20 - 17
    assert p.index_BT[1, :17].tolist() == list(range(17)) and p.index_BT[1, 17:22].tolist() == list(range(26, 31))
    assert p.position_ids_1N[0, 51:55].tolist() == [20, 21, 22, 23]  # a suffix keeps its row's positions
    assert torch.equal(p.unpack(p.gather(batch.input_ids_BT)), batch.input_ids_BT * batch.attention_mask_BT)


def test_a_prefix_shorter_than_the_minimum_is_not_shared():
    batch, _ = shared_batch(50)
    n = prefix.MIN_SHARED_TOKENS - 1
    batch.input_ids_BT[1, n] = (batch.input_ids_BT[0, n] + 1) % 50  # rows 0 and 1 now share MIN - 1 tokens
    p = prefix.shared_pack(batch)
    assert p.segments[:2] == [(0, 26, 0, 0), (26, 48, 26, 26)]


def test_a_row_joins_the_cluster_where_it_saves_most():
    """Two prompts of 12 tokens that share an 8-token header: each group shares its whole prompt
    (the header alone would save less); a fork sharing 10 tokens joins its best cluster."""
    header, pos = list(range(1, 9)), torch.arange(16)
    a = torch.tensor(header + [20, 21, 22, 23] + [30, 31, 32, 33])
    b = torch.tensor(header + [40, 41, 42, 43] + [30, 31, 32, 33])
    rows = [a, a.clone(), a.clone(), b, b.clone()]
    rows[2][12:] = torch.tensor([34, 35, 36, 37])
    fork = a.clone()
    fork[10:] = torch.tensor([9, 9, 9, 9, 9, 9])
    got = prefix.clusters([*rows, fork], [pos] * 6)
    # rows 0-2 share 12; the fork shares 10 with them: 3 x 10 = 30 tokens saved vs 2 x 12 = 24 before
    assert got == [([0, 1, 2, 5], 10), ([3, 4], 16)]


def reference_clusters(ids_B: list[list[int]], pos_B: list[list[int]]) -> list[tuple[list[int], int]]:
    """The clustering rule written out pair by pair in plain Python."""

    def shared(a: int, b: int) -> int:
        n = 0
        while n < min(len(ids_B[a]), len(ids_B[b])) and ids_B[a][n] == ids_B[b][n] and pos_B[a][n] == pos_B[b][n]:
            n += 1
        return n

    out: list[tuple[list[int], int]] = []
    for b in range(len(ids_B)):
        best, best_gain = -1, 0
        for k, (rows, s) in enumerate(out):
            n = shared(rows[0], b)
            gain = (
                0
                if n < prefix.MIN_SHARED_TOKENS
                else n
                if len(rows) == 1
                else len(rows) * min(s, n) - (len(rows) - 1) * s
            )
            if gain > best_gain:
                best, best_gain = k, gain
        if best < 0:
            out.append(([b], 0))
        else:
            rows, s = out[best]
            n = shared(rows[0], b)
            out[best] = ([*rows, b], n if len(rows) == 1 else min(s, n))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 20), st.integers(0, 12), st.integers(0, 1)), min_size=1, max_size=12
    )
)
def test_clusters_equal_the_pairwise_rule(specs):
    """Rows built from 4 prompts of 14 tokens, each cut at some length and continued by a few
    tokens of its own, some shifted by one position: the batched comparison gives the clusters the
    pairwise rule gives."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 6, (4, 14), generator=g).tolist()
    ids_B, pos_B = [], []
    for p, cut, extra, shift in specs:
        row = prompts[p][: min(cut, 14)] + [(7 * p + j) % 6 for j in range(extra)]
        row = row or [0]
        ids_B.append(row)
        pos_B.append(list(range(shift, shift + len(row))))
    got = prefix.clusters([torch.tensor(r) for r in ids_B], [torch.tensor(r) for r in pos_B])
    assert got == reference_clusters(ids_B, pos_B)


@pytest.mark.parametrize("with_topk", [False, True])
def test_shared_logprobs_entropy_and_gradients_equal_unshared(tiny_model_dir, with_topk):
    model = load_model(str(tiny_model_dir), "float32", "cpu")
    batch, _ = shared_batch(model.config.vocab_size)
    topk_BTK = (
        torch.randint(0, model.config.vocab_size, (6, 26, 2), generator=torch.Generator().manual_seed(1))
        if with_topk
        else None
    )
    w_BT = torch.rand(6, 26, generator=torch.Generator().manual_seed(2))  # a different weight per row and token
    results = {}
    for share in (False, True):
        model.zero_grad()
        out = token_logprobs(
            model, batch, 0.9, True, chunk_tokens=16, topk_ids_BTK=topk_BTK, packed=True, share_prefixes=share
        )
        loss = (w_BT * out[0]).sum() + 0.3 * (w_BT * out[1]).sum() + (0.1 * out[2].sum() if with_topk else 0)
        loss.backward()
        results[share] = ([o.detach() for o in out], {n: p.grad.clone() for n, p in model.named_parameters()})
    for a, b in zip(results[True][0], results[False][0], strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    assert rel_diff(results[True][1], results[False][1]) <= 1e-5


def test_shared_update_and_critic_equal_unshared(tiny_model_dir, monkeypatch):
    import tests.learner.test_packing as tp

    monkeypatch.setattr(tp, "step_batch", lambda vocab, **_: shared_batch(vocab))
    unshared = update(str(tiny_model_dir), "seq_mean_token_mean", packing=True)
    assert_same_update(update(str(tiny_model_dir), "seq_mean_token_mean", packing=True, share_prefixes=True), unshared)
    a, b = (
        critic_step(str(tiny_model_dir), packing=True),
        critic_step(str(tiny_model_dir), packing=True, share_prefixes=True),
    )
    assert rel_diff(b["grads"], a["grads"]) <= 1e-5
    assert torch.allclose(b["values"], a["values"], atol=1e-5, rtol=0)


def test_sharing_is_refused_where_it_cannot_be_exact(tiny_model_dir):
    model = load_model(str(tiny_model_dir), "float32", "cpu")
    model.set_attn_implementation("eager")
    batch, _ = shared_batch(model.config.vocab_size)
    with pytest.raises(ValueError, match="share_prefixes: Qwen2ForCausalLM uses eager attention"):
        token_logprobs(model, batch, packed=True, share_prefixes=True)
    with pytest.raises(ValueError, match="needs learner.packing: true"):
        token_logprobs(model, batch, share_prefixes=True)
    assert prefix.MIN_SHARED_TOKENS <= PROMPT


def test_a_training_run_with_packing_equals_the_padded_run(tmp_path, tiny_model_dir):
    # the quickstart's path (colocated hf sampler sharing the learner's module, switched to
    # agent_rl_varlen_sdpa): two steps, the same samples and the same updates
    from tests.test_trainer import trainer

    runs = {}
    for name, extra in {
        "padded": [],
        "packed": ["learner.packing=true", "learner.share_prefixes=true", "learner.max_tokens_per_micro_batch=400"],
    }.items():
        torch.manual_seed(0)
        t = trainer(tmp_path / name, tiny_model_dir, "algorithm.kl.coef=0.01", *extra)
        runs[name] = [t.step(s) for s in range(2)]
    for padded, packed in zip(runs["padded"], runs["packed"], strict=True):
        assert packed["train/tokens"] == padded["train/tokens"]
        for k in ("train/loss", "train/grad_norm", "train/mismatch_kl"):
            assert abs(packed[k] - padded[k]) <= 1e-5 * max(1.0, abs(padded[k])), k

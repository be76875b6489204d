"""The sdpo / opsd teacher's forward packed (``learner.packing``, ``share_prefixes``) == padded."""

from __future__ import annotations

import pytest
import torch

from agent_rl.learner.logprobs import packed_scoring
from agent_rl.learner.teacher import (
    EmaTeacher,
    compute_teacher_logprobs,
    splice_teacher_context,
)
from agent_rl.models.loading import load_model


def teacher_rows(vocab: int):
    """6 right-padded student rows (a shared 12-token prompt, responses of 3-14 tokens), each with
    a teacher context of 0-9 tokens spliced in after the prompt."""
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(1, vocab, (12,), generator=g)
    lengths = [15, 26, 20, 13, 26, 18]
    ids_BT, mask_BT = torch.zeros(6, 26, dtype=torch.long), torch.zeros(6, 26, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids_BT[b, :12], ids_BT[b, 12:n] = prompt, torch.randint(1, vocab, (n - 12,), generator=g)
        mask_BT[b, :n] = 1
    context = torch.randint(1, vocab, (9,), generator=g).tolist()
    contexts = [context, context, context[:4], [], context, context[:4]]
    return splice_teacher_context(ids_BT, mask_BT, [12] * 6, contexts, pad_id=0)


@pytest.mark.parametrize("share", [False, True])
def test_packed_teacher_logprobs_equal_padded(tiny_model_dir, share):
    teacher = EmaTeacher(load_model(str(tiny_model_dir)), decay=0.5)
    ids_BS, mask_BS, positions_BT = teacher_rows(int(teacher.model.config.vocab_size))
    ref_BT, ref_ids_BTK, ref_lp_BTK = compute_teacher_logprobs(
        teacher.model, ids_BS, mask_BS, positions_BT, 0.7, topk=3
    )
    with packed_scoring(True, share):
        out_BT, ids_BTK, lp_BTK = compute_teacher_logprobs(teacher.model, ids_BS, mask_BS, positions_BT, 0.7, topk=3)
    assert int((positions_BT >= 1).sum()) > 100 and bool((ref_BT != 0).any())
    assert torch.allclose(out_BT, ref_BT, atol=1e-5, rtol=0)
    assert torch.equal(ids_BTK, ref_ids_BTK)
    assert torch.allclose(lp_BTK, ref_lp_BTK, atol=1e-5, rtol=0)
    # outside the context the forward is the padded one again
    assert torch.equal(compute_teacher_logprobs(teacher.model, ids_BS, mask_BS, positions_BT, 0.7), ref_BT)

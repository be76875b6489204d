"""A teacher behind an OpenAI-compatible server (``teacher_path: openai:URL``): `agent-rl serve` on
loopback serves a second tiny model; its prompt logprobs (and top-k) of the batch's token ids equal
the hf FrozenTeacher's; another tokenizer, or a chat-only API, is refused at start."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from agent_rl.learner.remote_teacher import RemoteTeacher, parse_remote
from agent_rl.learner.teacher import (
    compute_teacher_logprobs,
    splice_teacher_context,
    teacher_logprobs,
)
from agent_rl.proxy.serve import server_app
from agent_rl.rollout.backends.server import (
    ServerState,
    build_state,
    serve_in_thread,
)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("teacher") / "t"
    shutil.copytree(tiny_model_dir, path)  # the student's tokenizer, other weights
    model = AutoModelForCausalLM.from_pretrained(path)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(path)
    return path


def rows(tokenizer):
    """Three right-padded rows of different lengths, one with a spliced-in context (a teacher row)."""
    texts = ["What is 2 + 3 * 4?", "Compute 17 - 5.", "Use the python tool: print(6 * 7)"]
    ids = [tokenizer.encode(t) for t in texts]
    T = max(len(i) for i in ids)
    ids_BT = torch.tensor([i + [tokenizer.pad_token_id] * (T - len(i)) for i in ids])
    mask_BT = torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i in ids])
    ctx = tokenizer.encode("Verified solution: 14")
    return splice_teacher_context(ids_BT, mask_BT, [0, 3, 0], [[], ctx, []], tokenizer.pad_token_id)


def test_served_logprobs_equal_the_hf_teachers(teacher_dir, tiny_tokenizer):
    from agent_rl.models.loading import load_model

    state = build_state(str(teacher_dir), served_name="teacher")
    hf = load_model(str(teacher_dir), "float32", "cpu").eval()
    ids_BS, mask_BS, pos_BT = rows(tiny_tokenizer)
    with serve_in_thread(server_app(state)) as url:
        assert parse_remote(f"openai:{url}#teacher") == (url, "teacher")
        remote = RemoteTeacher(f"openai:{url}", tiny_tokenizer, rows_per_request=2)  # the only model; 2 requests
        assert remote.model == "teacher"
        got_BT = teacher_logprobs(remote, ids_BS, mask_BS, pos_BT, 1.0)
        got = teacher_logprobs(remote, ids_BS, mask_BS, pos_BT, 1.0, topk=5)
        with pytest.raises(ValueError, match="temperature 1"):
            remote.score(ids_BS, mask_BS, pos_BT, 0.7)
    want_BT, want_ids, want_lp = compute_teacher_logprobs(hf, ids_BS, mask_BS, pos_BT, 1.0, topk=5)
    has = pos_BT >= 1
    assert has.sum() > 20 and bool((got_BT[~has] == 0).all())
    torch.testing.assert_close(got_BT, want_BT, atol=1e-5, rtol=0)
    torch.testing.assert_close(got[0], want_BT, atol=1e-5, rtol=0)
    assert torch.equal(got[1][has], want_ids[has])  # the same top-5 ids, in the same order
    torch.testing.assert_close(got[2], want_lp, atol=1e-5, rtol=0)


def test_another_tokenizer_or_a_chat_only_api_is_refused_at_start(tmp_path, teacher_dir, tiny_tokenizer):
    from fastapi import FastAPI

    from agent_rl.models.loading import load_tokenizer

    swapped = tmp_path / "swapped"  # the student's tokenizer with the ids of two tokens swapped
    shutil.copytree(teacher_dir, swapped)
    spec = json.loads((swapped / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = (
        tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer.encode("3"))[0],
        tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer.encode("7"))[0],
    )
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (swapped / "tokenizer.json").write_text(json.dumps(spec))
    served = build_state(str(teacher_dir))
    other = ServerState(served.backend, load_tokenizer(str(swapped)), "other")  # the same model, another tokenizer
    differs = r"its tokenizer differs from the student's .*must share the student's tokenizer"
    with serve_in_thread(server_app(other)) as url, pytest.raises(ValueError, match=differs):
        RemoteTeacher(f"openai:{url}", tiny_tokenizer)

    def models() -> dict:
        return {"data": [{"id": "gpt"}]}

    def answer(body: dict) -> dict:  # text only, whatever the request asked for
        return {"choices": [{"index": 0, "text": "hi", "message": {"role": "assistant", "content": "hi"}}]}

    chat = FastAPI()  # a chat-only API: models and chat completions, nothing that scores token ids
    chat.get("/v1/models")(models)
    chat.post("/v1/chat/completions")(answer)
    with serve_in_thread(chat) as url, pytest.raises(ValueError, match=r"has no /v1/completions \(a chat-only API\)"):
        RemoteTeacher(f"openai:{url}", tiny_tokenizer)
    text_only = FastAPI()  # completions that ignore prompt_logprobs
    text_only.post("/v1/completions")(answer)
    no_logprobs = r"holds no prompt_logprobs per prompt token \(a chat-only API\)"
    with serve_in_thread(text_only) as url, pytest.raises(ValueError, match=no_logprobs):
        RemoteTeacher(f"openai:{url}#gpt", tiny_tokenizer)
    with pytest.raises(ValueError, match="expected openai:http://host:port/v1"):
        parse_remote("openai:localhost:8000")


def test_a_served_teacher_in_a_training_step(tmp_path, teacher_dir, tiny_model_dir):
    """g_opd with teacher_path openai:URL: the trainer's teacher is the server; one step runs."""
    from tests.test_trainer import trainer

    with serve_in_thread(server_app(build_state(str(teacher_dir), served_name="t"))) as url:
        t = trainer(
            tmp_path / "run", tiny_model_dir, "algorithm.loss.name=g_opd", f"algorithm.loss.teacher_path=openai:{url}#t"
        )
        assert isinstance(t.models["teacher"].teacher, RemoteTeacher)
        metrics = t.step(1)
    assert not any(math.isnan(v) for v in metrics.values() if isinstance(v, float))


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_serve_as_the_teacher(vllm_server, teacher_dir, tiny_tokenizer):
    """`vllm serve` (docs/vllm.md's command) serving the second tiny model: its prompt logprobs of the
    rows equal the hf teacher's (vLLM's CPU kernels: within 1e-4), its top-5 ids too. The server is the
    vLLM group's one of the tiny model (tests/conftest.py), the teacher's weights pushed into it (the
    same architecture and tokenizer): one server start fewer."""
    from agent_rl.models.loading import load_model

    hf = load_model(str(teacher_dir), "float32", "cpu").eval()
    vllm_server.push_weights(hf, 1, "teacher")
    remote = RemoteTeacher(f"openai:{vllm_server.url()}", tiny_tokenizer)
    ids_BS, mask_BS, pos_BT = rows(tiny_tokenizer)
    got_BT, got_ids, got_lp = remote.score(ids_BS, mask_BS, pos_BT, 1.0, topk=5)
    want_BT, want_ids, want_lp = compute_teacher_logprobs(hf, ids_BS, mask_BS, pos_BT, 1.0, topk=5)
    torch.testing.assert_close(got_BT, want_BT, atol=1e-4, rtol=0)
    torch.testing.assert_close(got_lp, want_lp, atol=1e-4, rtol=0)
    has = pos_BT >= 1
    assert (got_ids[has][:, 0] == want_ids[has][:, 0]).float().mean() > 0.95  # the argmax (near-ties may swap)

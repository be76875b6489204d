"""Agent programs as episodes: the example agent through the proxy, token-exact trajectories, one
segment per episode; crashes and hangs end as agent errors with their traceback."""

from __future__ import annotations

import time

import pytest

from agent_rl.core.types import StopReason
from tests.proxy.conftest import Recording, assert_exact, engine, specs


def test_example_agent_with_the_oracle_is_one_exact_segment_per_episode(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    backend = Recording(ScriptedBackend(oracle, tiny_tokenizer))
    eng = engine(tiny_tokenizer, backend)
    out = eng.run_sync(specs(6), seed=1)
    assert [t.stop_reason for t in out] == [StopReason.DONE] * 6
    assert [t.reward for t in out] == [1.0] * 6  # the agent ran the oracle's python itself and answered
    assert [(t.info["segments"], t.info["segment_breaks"], t.info["calls"], len(t.turns_N)) for t in out] == [
        (1, 0, 2, 2)
    ] * 6
    assert [t.group_id for t in out] == ["g0", "g0", "g1", "g1", "g2", "g2"]
    assert_exact(out, backend)
    assert eng.metrics["proxy/spliced_calls"] == 6 and eng.metrics["proxy/segment_breaks"] == 0


def test_example_agent_on_the_tiny_model_is_token_exact(tiny_model_dir, tiny_tokenizer):
    from agent_rl.models.loading import load_model
    from agent_rl.rollout.backends.hf import HfBackend

    backend = Recording(HfBackend(load_model(str(tiny_model_dir), "float32", "cpu"), tiny_tokenizer.pad_token_id, 64))
    out = engine(tiny_tokenizer, backend).run_sync(specs(4), seed=0)
    assert all(t.stop_reason == StopReason.DONE and t.reward is not None for t in out)
    assert [t.info["segments"] for t in out] == [1] * 4
    assert_exact(out, backend)


def test_history_rewrite_gives_two_segments(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    out = engine(
        tiny_tokenizer,
        ScriptedBackend(oracle, tiny_tokenizer),
        "tests.proxy.sample_programs:rewrites_history",
        reward="tests.proxy.sample_programs:judge_length",
    ).run_sync(specs(1))
    assert [(t.info["segment"], t.info["segments"], t.info["segment_breaks"], t.reward) for t in out] == [
        (0, 2, 1, 1.0),
        (1, 2, 1, 1.0),
    ]


@pytest.mark.parametrize("crash_is_failure", [False, True])
def test_a_crash_is_an_agent_error_with_its_traceback(tiny_tokenizer, crash_is_failure):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    out = engine(
        tiny_tokenizer,
        ScriptedBackend(oracle, tiny_tokenizer),
        "tests.proxy.sample_programs:crashes",
        crash_is_failure=crash_is_failure,
    ).run_sync(specs(2))
    assert [t.stop_reason for t in out] == [StopReason.AGENT_ERROR] * 2
    assert all(
        "ZeroDivisionError" in t.info["error"] and "tests/proxy/sample_programs.py" in t.info["error"] for t in out
    )
    assert [t.reward for t in out] == ([0.0, 0.0] if crash_is_failure else [None, None])
    assert [t.trainable for t in out] == [crash_is_failure] * 2


def test_a_hang_ends_at_the_time_limit_with_where_it_hung(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    t0 = time.monotonic()
    out = engine(
        tiny_tokenizer, ScriptedBackend(oracle, tiny_tokenizer), "tests.proxy.sample_programs:hangs", timeout_s=3.0
    ).run_sync(specs(2))
    assert time.monotonic() - t0 < 15
    assert [t.stop_reason for t in out] == [StopReason.AGENT_ERROR] * 2
    assert all("timed out after 3.0s" in t.info["error"] and "in hangs" in t.info["error"] for t in out)
    assert any("time.sleep(3600)" in t.info["error"] for t in out)  # the line it hung on
    assert all(t.reward is None for t in out)  # what it sampled is kept, not trained


def test_an_async_program_streams(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from envs.arithmetic.policies import oracle

    out = engine(
        tiny_tokenizer, ScriptedBackend(oracle, tiny_tokenizer), "tests.proxy.sample_programs:solve_async"
    ).run_sync(specs(2))
    assert [(t.stop_reason, t.reward, t.info["calls"]) for t in out] == [(StopReason.DONE, 0.0, 1)] * 2


def test_bad_program_paths_are_one_line_errors(tiny_tokenizer):
    from agent_rl.rollout.backends.scripted import ScriptedBackend

    with pytest.raises(ValueError, match="agent.program.*nope"):
        engine(tiny_tokenizer, ScriptedBackend(lambda m, r: "", tiny_tokenizer), "tests.proxy.sample_programs:nope")

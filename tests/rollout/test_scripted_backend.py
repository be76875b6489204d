"""A scripted policy's episodes do not depend on what runs beside them or before them (SFT
demonstrations are the same whatever the engine's scheduling)."""

from __future__ import annotations

from agent_rl.config import load_config
from agent_rl.envloader import env_factory
from agent_rl.rollout.backends.scripted import ScriptedBackend
from agent_rl.rollout.engine import RolloutEngine
from agent_rl.rollout.episode import EpisodeSpec
from agent_rl.rollout.render import ChatRenderer
from envs.arithmetic.policies import weak_teacher


def run(tokenizer, specs, concurrency: int) -> dict[str, tuple[list[int], float]]:
    cfg = load_config(None, ["sandbox.backend=process", f"rollout.concurrency={concurrency}"])
    backend = ScriptedBackend(weak_teacher, tokenizer, seed=7)
    engine = RolloutEngine(backend, ChatRenderer(tokenizer), env_factory(cfg.env, sandbox_backend="process"), cfg.rollout)
    try:
        return {t.group_id: (t.token_ids_T, t.reward) for t in engine.run_sync(specs)}
    finally:
        engine.close()


def test_weak_teacher_episodes_do_not_depend_on_order_or_concurrency(tiny_tokenizer):
    specs = [EpisodeSpec(seed=i, group_id=f"demo-{i}", options={"split": "train"}, sample_seed=1000 + i) for i in range(24)]
    forward = run(tiny_tokenizer, specs, concurrency=24)
    assert run(tiny_tokenizer, specs[::-1], concurrency=1) == forward
    # the teacher's coin flips differ between episodes: some answer at once, some call the tool
    assert len({len(ids) for ids, _ in forward.values()}) > 1

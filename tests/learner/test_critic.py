"""The critic learns a known value function; clipping bounds its move per step."""

from __future__ import annotations

import torch

from agent_rl.config import CriticConfig
from agent_rl.learner.critic import Critic, load_value_model
from tests.learner.helpers import learner_cfg, step_batch


def known_values(batch) -> torch.Tensor:
    """V*(state before token t) = (id of token t-1 - 10) / 8: readable from the last token seen."""
    prev_BT = torch.cat([torch.zeros_like(batch.input_ids_BT[:, :1]), batch.input_ids_BT[:, :-1]], dim=1)
    return (prev_BT - 10).float() / 8 * batch.loss_mask_BT


def synthetic_batch(seed: int):
    """Rows of tokens 10..17 (8 ids, so the task is learnable in a few dozen steps)."""
    batch, _ = step_batch(8, seed=seed)
    batch.input_ids_BT = batch.input_ids_BT + 10
    return batch


STEPS = 60


def test_critic_learns_a_known_value_function(tiny_model_dir):
    torch.manual_seed(0)
    critic = Critic(
        load_value_model(str(tiny_model_dir)), CriticConfig(lr=3e-3, value_clip=None), learner_cfg(micro_batch_size=8)
    )
    held_out = synthetic_batch(999)
    assert critic.values(held_out).abs().max() == 0  # zero-initialised head
    for i in range(STEPS):
        batch = synthetic_batch(i)
        metrics = critic.update(batch, known_values(batch), critic.values(batch))
    mask = held_out.loss_mask_BT.bool()
    mse = float(((critic.values(held_out) - known_values(held_out))[mask] ** 2).mean())
    baseline = float(((known_values(held_out)[mask] - known_values(held_out)[mask].mean()) ** 2).mean())
    # the best constant predictor has the targets' variance (~0.08); the critic gets far below it
    print(f"critic held-out mse {mse:.5f} vs constant predictor {baseline:.5f}")
    assert mse < 0.01 < baseline, (mse, baseline)
    assert metrics["critic/value_mse"] < 0.02 and metrics["critic/lr"] == 3e-3


def test_value_clipping_picks_the_larger_error(tiny_model_dir):
    torch.manual_seed(0)
    critic = Critic(load_value_model(str(tiny_model_dir)), CriticConfig(lr=1e-2, value_clip=0.1), learner_cfg())
    batch, _ = step_batch(critic.model.config.vocab_size)
    mask_BT = batch.loss_mask_BT.float()
    returns_BT = 5.0 * mask_BT
    # V = 0, V_old = 0.5: V_clip = 0.5 + clamp(-0.5, -0.1, 0.1) = 0.4; (0.4 - 5)^2 = 21.16 < (0 - 5)^2 = 25
    m = critic.update(batch, returns_BT, critic.values(batch) + 0.5 * mask_BT)
    assert m["critic/clip_frac"] == 0.0
    # V ~ 0 (one small step later), V_old = -0.5: V_clip = -0.4; (-0.4 - 5)^2 = 29.16 > ~25: clipped
    m = critic.update(batch, returns_BT, critic.values(batch) - 0.5 * mask_BT)
    assert m["critic/clip_frac"] == 1.0


def test_gae_end_to_end_with_critic_warmup(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    t = trainer(
        tmp_path,
        tiny_model_dir,
        "algorithm.advantage.name=gae",
        "learner.critic={lr: 1e-3, warmup_steps: 1}",
        "algorithm.loss_options.entropy_coef=0.05",
    )
    assert t.models["critic"].critic is not None and t.models["critic"].critic.cfg.warmup_steps == 1
    first = t.step(0)  # VAPO warm-up: only the critic trains
    assert first["train/critic_warmup"] == 1.0 and "critic/loss" in first and t.learner.version == 0
    second = t.step(1)
    assert "train/loss" in second and "critic/value_mse" in second and t.learner.version == 1
    assert second["time/weight_sync_s"] >= 0

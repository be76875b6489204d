"""The env loader answers what the core asks about an environment: here, the SFT teacher."""

from __future__ import annotations

import pytest

from agent_rl.config import load_config
from agent_rl.run.envloader import sft_teacher


def test_sft_teacher_null_means_the_envs_declared_teacher():
    cfg = load_config(None, ["env.id=agent_rl/Arithmetic-v0"])
    assert cfg.sft.teacher is None
    assert sft_teacher(cfg) == "envs.arithmetic.policies:weak_teacher"
    assert sft_teacher(load_config(None, ["sft.teacher=my_pkg.policies:teacher"])) == "my_pkg.policies:teacher"


def test_an_env_without_a_declared_teacher_asks_for_sft_teacher():
    cfg = load_config(None, ["env.id=agent_rl/ToolLatency-v0", "env.plugins=[agent_rl.distributed.latency_env]"])
    with pytest.raises(ValueError) as info:
        sft_teacher(cfg)
    assert str(info.value) == (
        "config key 'sft.teacher': environment 'agent_rl/ToolLatency-v0' declares no scripted SFT teacher; "
        "set sft.teacher to a module:function policy"
    )

"""Config mistakes answer before torch is imported, with the nearest valid names; run directories
stand for their newest checkpoint; an eval whose episodes mostly failed exits 1 and says why."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

from agent_rl.algorithms.registry import STATUSES
from agent_rl.cli import main
from agent_rl.commands import catalog_text
from agent_rl.commands.catalog import names_snapshot
from agent_rl.config import ConfigError, load_config
from agent_rl.core.names import load_names
from agent_rl.core.rawconfig import did_you_mean, parse_yaml
from agent_rl.core.rundirs import resolve_model_path
from envs.arithmetic.env import ArithmeticEnv
from tests.conftest import ROOT, cli_env

QUICK = str(ROOT / "configs" / "quickstart.yaml")


def test_the_names_snapshot_equals_the_registries_and_the_config():
    """Regenerate with the command in its "regenerate" key when this fails."""
    assert load_names() == json.loads(json.dumps(names_snapshot())), load_names()["regenerate"]
    assert catalog_text.STATUSES == STATUSES


def test_config_errors_come_before_torch_is_imported(tmp_path):
    """One subprocess runs the CLI on five mistakes and then looks at ``sys.modules``."""
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("trainer:\n  steps: 2\n  lr: [1, 2\nmodel:\n  path: x\n")
    script = f"""
import sys
from agent_rl.cli import main
cases = [
    ["train", {QUICK!r}, "trainer.stpes=2"],
    ["train", {QUICK!r}, "algorithm.loss.name=cipso"],
    ["eval", {QUICK!r}, "env.id=agent_rl/Arithmetc-v0"],
    ["sft", {QUICK!r}, "model.path={tmp_path / "none"}"],
    ["train", {str(bad_yaml)!r}],
]
print([main(c) for c in cases])
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[2, 2, 2, 2, 2]", "[]"]
    errors = out.stderr.splitlines()
    assert errors[0].startswith("error: unknown config key 'trainer.stpes' (did you mean 'steps'?); allowed keys here:")
    assert errors[1].startswith(
        "error: config key 'algorithm.loss': unknown policy_loss 'cipso' (did you mean 'cispo' or "
    )
    assert errors[2].startswith(
        "error: config key 'env.id': unknown environment 'agent_rl/Arithmetc-v0' (did you mean 'agent_rl/Arithmetic-v0'"
    )
    assert errors[3].startswith(f"error: model.path={tmp_path / 'none'}: no such directory")
    # the unclosed [ of line 3, not line 4 where the parser noticed it
    assert errors[4] == (
        f"error: {bad_yaml}:3:7: not valid YAML: while parsing a flow sequence that starts here: "
        "expected ',' or ']', but got ':' (noticed at line 4)"
    )
    assert len(errors) == 5  # one line each, no traceback


def test_the_full_validation_suggests_the_nearest_names_too():
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer\.stpes' \(did you mean 'steps'\?\); allowed"):
        load_config(QUICK, ["trainer.stpes=2"])
    with pytest.raises(ConfigError, match=r"unknown policy_loss 'cipso' \(did you mean 'cispo' or "):
        load_config(QUICK, ["algorithm.loss.name=cipso"])
    assert did_you_mean("grop", ["grpo", "gae", "rloo"]) == " (did you mean 'grpo'?)"
    assert did_you_mean("zzz", ["grpo"]) == ""


def test_a_yaml_error_without_an_open_construct_points_at_its_line():
    with pytest.raises(ConfigError) as e:
        parse_yaml("trainer:\n  steps: 2\n   lr: 3\n", "c.yaml", is_file=True)
    assert str(e.value) == "c.yaml:3:6: not valid YAML: mapping values are not allowed here"


def _run_dir(root, steps=(2, 4), adapter=False):
    """A run directory as the trainer leaves it (the files these functions read)."""
    root.mkdir()
    (root / "config.yaml").write_text("model: {path: base}\n")
    for s in steps:
        model = root / "checkpoints" / f"step_{s:06d}" / "model"
        model.mkdir(parents=True)
        (model / ("adapter_config.json" if adapter else "config.json")).write_text("{}")
    return root


def test_a_run_directory_stands_for_its_newest_checkpoint(tmp_path):
    run = _run_dir(tmp_path / "run")
    assert resolve_model_path(str(run)) == str(run / "checkpoints" / "step_000004" / "model")
    assert resolve_model_path(str(run), step=2) == str(run / "checkpoints" / "step_000002" / "model")
    with pytest.raises(
        ValueError, match=r"no checkpoint step 3 with a model/ \(checkpoints: step_000002, step_000004\)"
    ):
        resolve_model_path(str(run), step=3)
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)  # not a run directory: the path itself
    lora = _run_dir(tmp_path / "lora", steps=(1,), adapter=True)
    with pytest.raises(ValueError, match=r"is a LoRA adapter, not a whole model; merge it with `agent-rl export"):
        resolve_model_path(str(lora))
    cfg = load_config(QUICK, [f"model.path={run}"])
    assert cfg.model.path == str(run / "checkpoints" / "step_000004" / "model")


def test_eval_of_a_directory_that_is_no_run(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}: a directory without config.yaml, not a run directory\n"
    assert main(["eval", QUICK, "--step", "3"]) == 2
    assert "--step 3: give a run directory, not a config file" in capsys.readouterr().err


class RewardRaises(ArithmeticEnv):
    """Arithmetic whose reward function fails on every answer."""

    async def score(self, answer, text):
        raise ZeroDivisionError("the reward function divided by zero")


def test_an_eval_whose_episodes_mostly_failed_exits_1_and_says_why(tmp_path, tiny_model_dir, capsys):
    gym.register("test/RewardRaises-v0", entry_point=RewardRaises, disable_env_checker=True)
    try:
        args = [
            f"model.path={tiny_model_dir}",
            "env.id=test/RewardRaises-v0",
            "eval.policy=envs.arithmetic.policies:oracle",
        ]
        code = main(["eval", QUICK, *args, "eval.episodes=3", f"run.dir={tmp_path}", "tracking.progress=false"])
    finally:
        gym.registry.pop("test/RewardRaises-v0")
    out, err = capsys.readouterr()
    assert code == 1
    assert "  errors (3 of 3 episodes, excluded from the scores):" in out
    assert (
        "3 x env_error ZeroDivisionError, first: step: ZeroDivisionError('the reward function divided by zero')" in out
    )
    assert err.startswith("error: 3 of 3 episodes ended in env or infrastructure errors (more than 25% of them)")

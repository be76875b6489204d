"""docs/adding-an-environment.md: its example, run as written, as a user's plugin package."""

from __future__ import annotations

import json
import re
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agent_rl.config import load_config
from agent_rl.envloader import load_plugins
from agent_rl.eval import run_eval
from tests.conftest import ROOT

GUIDE = ROOT / "docs" / "adding-an-environment.md"

# a user's scripted policies for the example (the guide points to them as my_envs.policies:oracle)
POLICIES = '''
SOLUTIONS = {
    "sum_sq": "def f(xs):\\n    return sum(x * x for x in xs)\\n",
    "evens": "def f(xs):\\n    return [x for x in xs if x % 2 == 0]\\n",
}


def oracle(messages, rng=None):
    task = "sum_sq" if "squares" in messages[0]["content"] else "evens"
    return "```python\\n" + SOLUTIONS[task] + "```"


def hack(messages, rng=None):  # claims success without computing anything, then leaves
    return "```python\\nimport sys\\nprint('correct'); print('OK'); sys.exit(0)\\n```"
'''


def example_code() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "the guide has exactly one python block: the example"
    return blocks[0]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("userpkg")
    (root / "my_envs").mkdir()
    (root / "my_envs" / "__init__.py").write_text("")
    (root / "my_envs" / "listfun.py").write_text(example_code())
    (root / "my_envs" / "policies.py").write_text(POLICIES)
    sys.path.insert(0, str(root))
    load_plugins(["my_envs.listfun"])  # what `env.plugins: [my_envs.listfun]` does
    yield root
    sys.path.remove(str(root))


def test_the_example_fits_in_60_lines():
    assert len(example_code().splitlines()) <= 60


def test_check_env_and_episodes(plugin):
    from my_envs.policies import hack, oracle

    env = gym.make("my_envs/ListFun-v0")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        seen = set()
        for seed in range(6):
            for policy, expected in ((oracle, 1.0), (hack, 0.0)):
                obs, info = env.reset(seed=seed)
                seen.add(info["task_id"])
                obs, reward, terminated, _, step_info = env.step(policy(obs))
                assert (reward, terminated, step_info["action_valid"]) == (expected, True, True)
        assert seen == {"sum_sq", "evens"}
        env.reset(seed=0)
        obs, reward, terminated, _, info = env.step("no code here")
        assert (reward, terminated, info["action_valid"]) == (0.0, False, False)
        assert obs[0]["content"].startswith("error:")
    finally:
        env.close()


def test_eval_and_envs_list_load_the_plugin(plugin, tiny_model_dir, tmp_path, capsys):
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [
        "env.id=my_envs/ListFun-v0", "env.plugins=[my_envs.listfun]", "env.options={}", f"model.path={tiny_model_dir}",
        "rollout.max_new_tokens=256", "eval.policy=my_envs.policies:oracle", "eval.episodes=4", "eval.k=2", f"run.dir={tmp_path}",
    ])
    result, run_dir = run_eval(cfg, log=lambda *a: None)
    assert (result.pass_at_k, result.success, result.episodes, result.errors) == (1.0, 1.0, 8, 0)
    assert len((run_dir / "trajectories" / "eval.jsonl").read_text().splitlines()) == 8
    assert json.loads((run_dir / "eval.json").read_text())["env"] == "my_envs/ListFun-v0"

    from agent_rl.cli import main

    assert main(["envs", "list", "--plugins", "my_envs.listfun", "--width", "250"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "my_envs/ListFun-v0" in line)
    assert "python" in row and "1 if f is right on the hidden inputs" in row and "3" in row

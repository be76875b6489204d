"""Plugins from installed packages: a distribution's ``agent_rl.*`` entry points register its env and
its objective with no config. Each test writes a minimal distribution (a ``.dist-info`` directory
and the plugin package) into a directory on ``PYTHONPATH``, where importlib.metadata finds it as
if pip had installed it, and runs in a fresh process (a plugin loads once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT, cli_env

ENV_MODULE = '''
import gymnasium as gym


class EchoEnv(gym.Env):
    """Say the word back."""

    metadata = {"render_modes": [], "tools": (), "reward": "1 when the reply is the word"}

    def __init__(self, max_turns: int = 1):
        self.max_turns = max_turns
        self.observation_space = gym.spaces.Text(16)
        self.action_space = gym.spaces.Text(16)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "echo", {}

    def step(self, action):
        return "", float(action == "echo"), True, False, {}


gym.register(id="echo_plugin/Echo-v0", entry_point="echo_plugin.envs:EchoEnv")
'''

OBJECTIVE_MODULE = '''
def register():
    from agent_rl.algorithms.registry import ComponentConfig, register_advantage

    class EchoAdvantageConfig(ComponentConfig):
        pass

    @register_advantage("echo_advantage", config=EchoAdvantageConfig)  # no status: counted as an interpretation
    def echo_advantage(x, cfg):
        """Echo advantage (a test plugin).

        A_it = 0."""
        raise NotImplementedError
'''

ENTRY_POINTS = """
[agent_rl.envs]
echo = echo_plugin.envs

[agent_rl.objectives]
echo_advantage = echo_plugin.objectives:register
"""


def install(root: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    """What ``pip install`` leaves behind that importlib.metadata reads, plus the package itself."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for path, source in modules.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source)


def run(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, *argv], check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def echo_plugin(root: Path) -> Path:
    install(
        root,
        "echo-plugin",
        ENTRY_POINTS,
        {
            "echo_plugin/__init__.py": "",
            "echo_plugin/envs.py": ENV_MODULE,
            "echo_plugin/objectives.py": OBJECTIVE_MODULE,
        },
    )
    return root


def test_an_installed_env_is_creatable_and_its_objective_accepted_by_load_config(tmp_path):
    script = textwrap.dedent("""
        import gymnasium as gym

        from agent_rl.config import load_config
        from agent_rl.run.envloader import env_factory
        from agent_rl.core.plugins import load_entry_points

        cfg = load_config(None, ["algorithm.advantage.name=echo_advantage", "env.id=echo_plugin/Echo-v0"])
        load_entry_points()  # again: nothing is registered twice
        env = env_factory(cfg.env)()
        obs, _ = env.reset(seed=0)
        print(cfg.algorithm.advantage.name, obs, env.step("echo")[1], type(gym.make("echo_plugin/Echo-v0").unwrapped).__name__)
    """)
    r = run(echo_plugin(tmp_path), "-c", script)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["echo_advantage", "echo", "1.0", "EchoEnv"]


def test_envs_list_and_objectives_list_show_the_plugin(tmp_path):
    root = echo_plugin(tmp_path)
    r = run(root, "-m", "agent_rl.cli", "envs", "list", "--width", "200")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "echo_plugin/Echo-v0" in r.stdout and "Say the word back." in r.stdout
    assert "agent_rl/Arithmetic-v0" in r.stdout
    r = run(root, "-m", "agent_rl.cli", "objectives", "list")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "echo_advantage" in r.stdout and "grpo" in r.stdout


def test_a_broken_plugin_fails_in_one_line_naming_it(tmp_path):
    install(
        tmp_path,
        "broken-plugin",
        "[agent_rl.envs]\nbroken = broken_plugin.envs\n",
        {
            "broken_plugin/__init__.py": "",
            "broken_plugin/envs.py": "raise RuntimeError('no such thing')\n",
        },
    )
    r = run(tmp_path, "-m", "agent_rl.cli", "envs", "list")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        (
            "error: plugin 'broken' (entry point group 'agent_rl.envs') of distribution 'broken-plugin': "
            "loading 'broken_plugin.envs' failed: RuntimeError: no such thing"
        )
    ]

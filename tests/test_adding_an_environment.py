"""docs/adding-an-environment.md, run as written: its files, its commands, its claims."""

from __future__ import annotations

import json
import re
import shlex
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agent_rl.run.envloader import load_plugins
from tests import cli_runner
from tests.conftest import ROOT, cli_env

GUIDE = ROOT / "docs" / "adding-an-environment.md"


def guide_files() -> dict[str, str]:
    """The guide's python blocks by the file name on their first line (``# name.py: ...``)."""
    blocks = re.findall(r"^```python\n# (\S+\.py)\b.*?\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    files = {name: f"# {name}\n{body}" for name, body in blocks}
    assert sorted(files) == ["listfun.py", "listfun_policies.py"]
    return files


def guide_commands() -> list[str]:
    """The guide's one bash block, one command per line (continuations joined)."""
    [block] = re.findall(r"^```bash\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A user's working directory: the guide's two files and agent-rl's configs/."""
    root = tmp_path_factory.mktemp("user")
    for name, text in guide_files().items():
        (root / name).write_text(text)
    (root / "configs").symlink_to(ROOT / "configs")
    return root


@pytest.fixture(scope="module")
def plugin(workdir):
    sys.path.insert(0, str(workdir))
    load_plugins(["listfun"])  # what `env.plugins: [listfun]` does
    yield workdir
    sys.path.remove(str(workdir))


def test_the_example_fits_in_60_lines():
    assert len(guide_files()["listfun.py"].splitlines()) <= 60


def test_check_env_and_episodes(plugin):
    from listfun_policies import hack, oracle

    env = gym.make("listfun/ListFun-v0")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        for split, tasks in (("train", {"sum_sq", "evens"}), ("test", {"rev", "top"})):
            seen = set()
            for seed in range(4):
                for policy, expected in ((oracle, 1.0), (hack, 0.0)):
                    obs, info = env.reset(seed=seed, options={"split": split})
                    seen.add(info["task_id"])
                    assert [t["function"]["name"] for t in info["tools"]] == ["python"]
                    obs, reward, terminated, _, step_info = env.step(policy(obs))
                    assert (reward, terminated, step_info["action_valid"]) == (expected, True, True)
            assert seen == tasks
        obs, info = env.reset(options={"task": "rev"})  # a replay of info["task"]
        assert info["task_id"] == "rev" and env.step(oracle(obs))[1] == 1.0
        env.reset(seed=0)
        obs, reward, terminated, _, info = env.step("no code here")
        assert (reward, terminated, info["action_valid"]) == (0.0, False, False)
        assert obs[0]["content"].startswith("error: no tool call and no <answer>")
        obs, _, _, truncated, info = env.step(
            '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
        )
        assert obs == [{"role": "tool", "content": "42"}] and info["action_valid"] and not truncated
        assert env.step("still thinking")[3]  # the third turn without an answer truncates
    finally:
        env.close()


def test_splits_are_checked(plugin):
    with pytest.raises(ValueError, match="unknown split 'val'; known: train, test"):
        gym.make("listfun/ListFun-v0", split="val")
    env = gym.make("listfun/ListFun-v0")
    try:
        with pytest.raises(ValueError, match="unknown split 'val'; known: train, test"):
            env.reset(seed=0, options={"split": "val"})
    finally:
        env.close()


def table_row(table: str, first_cell: str) -> list[str]:
    """The cells of the row of a rich table (``show_lines``) whose first cell is ``first_cell``,
    each cell's wrapped lines joined: the column widths, and so the wrapping, follow the other rows."""
    blocks, block = [], []
    for line in table.splitlines():
        if line.startswith("│"):
            block.append([cell.strip() for cell in line.strip("│").split("│")])
        elif block:
            blocks.append(block)
            block = []
    rows = [[" ".join(part for part in column if part) for column in zip(*b, strict=True)] for b in blocks]
    return next(row for row in rows if row[0] == first_cell)


def test_the_commands_run_as_written(workdir):
    commands = guide_commands()
    assert len(commands) == 3
    outputs = []
    for command in commands:
        words = shlex.split(command, comments=True)
        env = cli_env()
        while "=" in words[0] and not words[0].startswith("-"):  # leading VAR=value assignments
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[0] == "agent-rl", command
        r = cli_runner.run(words, workdir, env, timeout=600)  # a process forked from a preloaded one
        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-4000:])
        outputs.append(r.stdout)
    row = table_row(outputs[1], "listfun/ListFun-v0")
    assert row[2:] == ["python", "3", "1 if f is right on the hidden inputs"], row
    assert "mean@1 1.000" in outputs[2]
    summary = json.loads((workdir / "runs" / "listfun-eval" / "eval.json").read_text())
    assert (summary["env"], summary["split"], summary["success"], summary["errors"]) == (
        "listfun/ListFun-v0",
        "test",
        1.0,
        0,
    )
    assert len((workdir / "runs" / "listfun-eval" / "trajectories" / "eval.jsonl").read_text().splitlines()) == 4

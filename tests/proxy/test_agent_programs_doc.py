"""docs/agent-programs.md, run as written: its commands in a user's directory (configs/ and
examples/ of this repository), and its claims about the example."""

from __future__ import annotations

import json
import re
import shlex
import sys
import time

import pytest

from tests import cli_runner
from tests.conftest import ROOT, cli_env

GUIDE = ROOT / "docs" / "agent-programs.md"


def commands() -> list[str]:
    [block] = re.findall(r"^```bash\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("example", ["arithmetic_agent.py", "agents_sdk_agent.py"])
def test_the_example_is_short_and_imports_nothing_of_ours(example):
    text = (ROOT / "examples" / example).read_text()
    assert len(text.splitlines()) < 60 and f"({len(text.splitlines())} lines" in GUIDE.read_text()
    assert "agent_rl" not in re.sub(r'""".*?"""', "", text, flags=re.DOTALL).replace("agent_rl.", "")
    assert not re.search(r"^\s*(from|import) (agent_rl|envs|tools|sandbox)\b", text, re.MULTILINE)


@pytest.mark.slow
def test_the_commands_run_as_written(tmp_path):
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    proxy = None
    try:
        for line in commands():
            argv = shlex.split(line.rstrip("& "))
            argv = (
                [sys.executable, "-m", "agent_rl.cli", *argv[1:]]
                if argv[0] == "agent-rl"
                else [sys.executable, *argv[1:]]
            )
            if line.endswith("&"):  # in the background, as the shell runs it: a child of the preloaded server too
                proxy = cli_runner.start(argv, tmp_path, cli_env())
                deadline = time.monotonic() + 300
                while "\n" not in proxy.stdout.read_text() and proxy.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                first = proxy.stdout.read_text().split("\n")[0]
                assert "agent-rl serve: http://127.0.0.1:8765/v1" in first, (first, proxy.stderr.read_text()[-3000:])
                time.sleep(1)
                continue
            r = cli_runner.run(argv, tmp_path, cli_env(), timeout=400)  # a process forked from a preloaded one
            assert r.returncode == 0, f"{line}\n{r.stderr[-3000:]}"
        [run_dir] = (tmp_path / "runs").glob("agent_smoke-*")
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows] == [1, 2]
        assert all(
            row["proxy/segments"] == row["rollout/episodes"] == 4 and row["proxy/segment_breaks"] == 0 for row in rows
        )
        assert all(row["train/mismatch_logprob_abs_max"] < 1e-4 for row in rows)  # the learner scores the sampled ids
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=30)

"""A run whose episodes in flight cannot fit in the machine's memory is refused at start, in one line
naming how many fit (``agent_rl/run/capacity.py``). The memory is injected: nothing here depends on
this machine's."""

from __future__ import annotations

import pytest

from agent_rl.cli import main
from agent_rl.config import load_config
from agent_rl.run import capacity
from agent_rl.run.capacity import capacity_error, cgroup_room_mb, check_capacity, meminfo_available_mb
from envs.textworld_express.env import TextWorldExpressEnv
from tests.conftest import ROOT

CODE = str(ROOT / "configs" / "code_exec.yaml")
TWX = str(ROOT / "configs" / "twx_coin.yaml")


@pytest.fixture
def docker_12mb(monkeypatch):
    """A docker code episode weighs 12 MB here, whatever the bench measured."""
    monkeypatch.setitem(capacity.SANDBOX_EPISODE_MB, "docker", 12.0)


def test_code_episodes_that_do_not_fit_are_refused_naming_how_many_fit(docker_12mb):
    cfg = load_config(CODE, ["sandbox.backend=docker", "rollout.concurrency=96"])
    # 96 x 12 MB = 1152 MB = 1.125 GiB > 1000 MB (0.977 GiB); floor(1000 / 12) = 83
    assert capacity_error(cfg, available=1000.0) == (
        "96 concurrent episodes of agent_rl/CodeExec-v0 on the docker sandbox (~12 MB each) need ~1.1 GiB, "
        "this machine has 1.0 GiB available: at most 83 fit; set rollout.concurrency=83"
    )
    assert capacity_error(cfg, available=1152.0) is None  # 96 x 12 exactly: they fit
    with pytest.raises(ValueError, match="at most 83 fit"):
        check_capacity(cfg, available=1000.0)


def test_jvm_episodes_count_what_the_env_declares(monkeypatch):
    monkeypatch.setattr(TextWorldExpressEnv, "episode_memory_mb", 100.0)
    cfg = load_config(TWX, ["rollout.concurrency=32"])
    # 32 x 100 MB = 3200 MB = 3.125 GiB > 2000 MB (1.953 GiB); floor(2000 / 100) = 20
    assert capacity_error(cfg, available=2000.0) == (
        "32 concurrent episodes of agent_rl/TextWorldExpress-v0 (~100 MB each) need ~3.1 GiB, "
        "this machine has 2.0 GiB available: at most 20 fit; set rollout.concurrency=20"
    )


def test_rollout_workers_multiply_and_the_fix_is_per_worker(docker_12mb):
    cfg = load_config(
        CODE,
        ["sandbox.backend=docker", "distributed.backend=process", "distributed.process.num_rollout_workers=2"],
    )
    # 2 workers x 64 = 128 episodes x 12 MB = 1536 MB = 1.5 GiB; 83 fit, 41 per worker
    assert capacity_error(cfg, available=1000.0) == (
        "128 concurrent episodes of agent_rl/CodeExec-v0 on the docker sandbox (~12 MB each, 2 rollout workers) "
        "need ~1.5 GiB, this machine has 1.0 GiB available: at most 83 fit; set rollout.concurrency=41"
    )
    # not one episode per worker fits: no concurrency would do
    assert capacity_error(cfg, available=20.0).endswith("at most 1 fit; free memory or use a larger machine")


def test_eval_never_has_more_in_flight_than_its_episodes(docker_12mb):
    cfg = load_config(CODE, ["sandbox.backend=docker", "rollout.concurrency=96"])
    assert capacity_error(cfg, available=1000.0, most_episodes=83) is None  # 83 x 12 = 996 MB
    assert "84 concurrent episodes" in capacity_error(cfg, available=1000.0, most_episodes=84)


def test_auto_counts_the_largest_backend_and_unmeasured_envs_are_not_checked(monkeypatch):
    monkeypatch.setattr(capacity, "SANDBOX_EPISODE_MB", {"docker": 10.0, "bwrap": 11.0, "process": 20.0})
    cfg = load_config(CODE, ["sandbox.backend=auto", "rollout.concurrency=100"])
    assert capacity_error(cfg, available=1024.0) == (
        "100 concurrent episodes of agent_rl/CodeExec-v0 on the auto sandbox (~20 MB each, auto counted as process, "
        "the largest) need ~2.0 GiB, this machine has 1.0 GiB available: at most 51 fit; set rollout.concurrency=51"
    )
    maze = load_config(str(ROOT / "configs" / "maze.yaml"), ["rollout.concurrency=100000"])
    assert capacity_error(maze, available=1.0) is None  # a pure-Python env: nothing measured, nothing refused


def test_the_shipped_configs_fit_in_half_of_24_gib():
    """Every recipe, and the quickstart, at its own concurrency fits in 12 GiB available (a 24 GiB
    machine with half of it taken)."""
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(configs) >= 10
    refused = {c.name: capacity_error(load_config(str(c), []), available=12 * 1024.0) for c in configs}
    assert {name: e for name, e in refused.items() if e is not None} == {}


def test_the_cli_refuses_in_one_line_before_anything_loads(docker_12mb, tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(capacity, "available_mb", lambda: 1000.0)
    runs = tmp_path / "runs"
    overrides = [f"model.path={tiny_model_dir}", "sandbox.backend=docker", f"run.root={runs}"]
    argv = ["eval", CODE, *overrides, "rollout.concurrency=96", "eval.episodes=96", "eval.k=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: 96 concurrent episodes of agent_rl/CodeExec-v0 on the docker sandbox (~12 MB each) need ~1.1 GiB, "
        "this machine has 1.0 GiB available: at most 83 fit; set rollout.concurrency=83"
    )
    assert main(["train", CODE, *overrides, "rollout.concurrency=96"]) == 2
    assert capsys.readouterr().err.strip().endswith("at most 83 fit; set rollout.concurrency=83")
    assert not runs.exists()


# -- the memory available ---------------------------------------------------------------------------
GIB = 1 << 30


def _write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_meminfo_available(tmp_path):
    _write(tmp_path / "meminfo", "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   16777216 kB\n")
    assert meminfo_available_mb(tmp_path / "meminfo") == 16384.0


def test_cgroup_v1_limit_less_usage_without_inactive_files(tmp_path):
    _write(tmp_path / "self-cgroup", "7:pids:/x\n5:memory:/docker/abc\n")
    d = tmp_path / "fs" / "memory" / "docker" / "abc"
    _write(d / "memory.limit_in_bytes", str(2 * GIB))
    _write(d / "memory.usage_in_bytes", str(3 * GIB // 2))
    _write(d / "memory.stat", f"cache 1\ntotal_inactive_file {GIB // 2}\nhierarchical_memory_limit {4 * GIB}\n")
    # 2 GiB - (1.5 GiB - 0.5 GiB) = 1 GiB
    assert cgroup_room_mb(tmp_path / "self-cgroup", tmp_path / "fs") == 1024.0
    _write(d / "memory.stat", f"total_inactive_file 0\nhierarchical_memory_limit {GIB * 7 // 4}\n")
    # the parent's 1.75 GiB binds: 1.75 - 1.5 = 0.25 GiB
    assert cgroup_room_mb(tmp_path / "self-cgroup", tmp_path / "fs") == 256.0
    _write(d / "memory.limit_in_bytes", str(9223372036854771712))  # v1's "no limit"
    _write(d / "memory.stat", "total_inactive_file 0\nhierarchical_memory_limit 9223372036854771712\n")
    assert cgroup_room_mb(tmp_path / "self-cgroup", tmp_path / "fs") is None


def test_cgroup_v1_inside_a_container_reads_its_own_mount(tmp_path):
    _write(tmp_path / "self-cgroup", "5:memory:/docker/abc\n")  # the host's path, not mounted here
    base = tmp_path / "fs" / "memory"
    _write(base / "memory.limit_in_bytes", str(GIB))
    _write(base / "memory.usage_in_bytes", str(GIB // 4))
    _write(base / "memory.stat", "total_inactive_file 0\n")
    assert cgroup_room_mb(tmp_path / "self-cgroup", tmp_path / "fs") == 768.0


def test_cgroup_v2_takes_the_least_room_of_the_ancestors(tmp_path):
    _write(tmp_path / "self-cgroup", "0::/a/b\n")
    fs = tmp_path / "fs"
    _write(fs / "a" / "b" / "memory.max", str(4 * GIB))
    _write(fs / "a" / "b" / "memory.current", str(GIB))
    _write(fs / "a" / "b" / "memory.stat", "inactive_file 0\n")
    _write(fs / "a" / "memory.max", str(2 * GIB))
    _write(fs / "a" / "memory.current", str(GIB * 7 // 4))
    _write(fs / "a" / "memory.stat", f"inactive_file {GIB // 4}\n")
    _write(fs / "memory.stat", "inactive_file 0\n")  # the root: no memory.max
    # b: 4 - 1 = 3 GiB; a: 2 - (1.75 - 0.25) = 0.5 GiB
    assert cgroup_room_mb(tmp_path / "self-cgroup", fs) == 512.0
    _write(fs / "a" / "memory.max", "max")
    assert cgroup_room_mb(tmp_path / "self-cgroup", fs) == 3072.0


def test_the_quickstart_is_refused_before_it_builds_anything(tmp_path, monkeypatch):
    from agent_rl.commands.quickstart import quickstart

    monkeypatch.setattr(capacity, "SANDBOX_EPISODE_MB", {"docker": 10.0, "bwrap": 10.0, "process": 10.0})
    monkeypatch.setattr(capacity, "available_mb", lambda: 1000.0)
    with pytest.raises(ValueError) as refused:
        quickstart(["rollout.concurrency=101"], root=str(tmp_path / "qs"))  # 1010 MB > 1000 MB
    assert str(refused.value).endswith("at most 100 fit; set rollout.concurrency=100")
    assert not (tmp_path / "qs").exists()
    quickstart_64 = load_config(str(ROOT / "configs" / "quickstart.yaml"), [])
    assert capacity_error(quickstart_64, available=640.0) is None  # its 64 episodes x 10 MB

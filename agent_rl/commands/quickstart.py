"""``agent-rl quickstart``: the main job on a fresh CPU machine.

init-model (tiny) -> SFT on a weak teacher -> GRPO -> held-out evaluation of both, same tasks and
same sampling settings, ending with a before/after table.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agent_rl.commands.sft import sft
from agent_rl.config import Config, load_config
from agent_rl.run.capacity import check_capacity
from agent_rl.run.envloader import init_tiny
from agent_rl.run.progress import EpisodeProgress
from agent_rl.run.runtime import Components
from agent_rl.train.evaluation import evaluate
from agent_rl.train.trainer import Trainer

QUICKSTART_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def _eval(cfg: Config, model_path: Path, name: str = "eval"):

    cfg = cfg.model_copy(deep=True)
    cfg.model.path = str(model_path)
    components = Components(cfg)
    engine = components.engine(temperature=cfg.eval.temperature)
    progress = EpisodeProgress(
        name, cfg.eval.episodes * cfg.eval.k, enabled=cfg.tracking.progress
    )  # episodes done, ETA
    engine.on_episode_done = progress.episode_done
    with progress:
        result, _ = asyncio.run(evaluate(engine, cfg.eval.episodes, cfg.eval.k, split=cfg.eval.split))
    engine.close()
    return result


def quickstart(overrides: list[str] | None = None, root: str | None = None, config: str | Path | None = None) -> int:
    """``config``: a recipe (default ``configs/quickstart.yaml``); ``root``: default ``runs/<its stem>``.
    The tiny tokenizer also learns the text of ``env.id`` when that env offers a corpus."""

    console = Console()
    t0 = time.perf_counter()
    config = Path(config) if config else QUICKSTART_CONFIG
    rootp = Path(root or f"runs/{config.stem}")
    base = [f"run.root={rootp}"]
    cfg = load_config(config, base + list(overrides or []))  # validated before any work
    check_capacity(cfg)  # its episodes in flight fit in this machine's memory
    model_dir = rootp / "models" / "tiny"
    if not (model_dir / "config.json").exists():
        console.rule("1/4 init-model tiny")
        init_tiny(model_dir, seed=cfg.trainer.seed, env_ids=(cfg.env.id,))
    cfg.model.path = str(model_dir)

    console.rule("2/4 SFT on the weak teacher's demonstrations")
    cfg.sft.out = str(rootp / "sft_model")
    sft_dir, _ = sft(cfg, log=console.print)

    console.rule("3/4 RL (GRPO) from the SFT model")
    rl_cfg = cfg.model_copy(deep=True)
    rl_cfg.model.path = str(sft_dir)
    run_dir = Trainer(rl_cfg, log=console.print).train()
    rl_dir = sorted((run_dir / "checkpoints").glob("step_*"))[-1] / "model"

    console.rule(f"4/4 held-out evaluation ({cfg.eval.episodes} tasks of split '{cfg.eval.split}', same seeds)")
    before = _eval(cfg, sft_dir, "eval SFT")
    after = _eval(cfg, rl_dir, "eval SFT + RL")
    table = Table(
        title=f"{cfg.env.id}: held-out success (temperature {cfg.eval.temperature or cfg.rollout.temperature})"
    )
    for col in ("policy", "success", "95% CI", "multi-turn (tool use)", "episodes"):
        table.add_column(col)
    for name, r in (("SFT (weak teacher)", before), ("SFT + RL", after)):
        table.add_row(
            name,
            f"{r.success:.3f}",
            f"[{r.success_ci[0]:.3f}, {r.success_ci[1]:.3f}]",
            f"{r.multi_turn:.3f}",
            str(r.episodes),
        )
    console.print(table)
    gain = 100 * (after.success - before.success)
    minutes = (time.perf_counter() - t0) / 60
    console.print(f"RL gain over SFT: {gain:+.1f} points; total time {minutes:.1f} min; run: {run_dir}")
    summary = {"sft": vars(before), "rl": vars(after), "gain_points": gain, "minutes": minutes, "run_dir": str(run_dir)}
    (rootp / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    console.print(
        f"files: {rootp / 'summary.json'} (this table), {sft_dir} (SFT model), {rl_dir} (RL model), {run_dir}/metrics.jsonl"
    )
    return 0

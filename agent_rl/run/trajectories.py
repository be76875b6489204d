"""A run's saved trajectories and the tokenizer that decodes them (``agent-rl view``, the trackers' tables)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Step:
    """The trajectories of one JSONL file: a training step (``step_000003.jsonl``) or an eval."""

    label: str  # "step 3", "eval"
    trajectories: list[dict[str, Any]]  # ``Trajectory.to_json()`` dicts, as saved


def trajectory_files(run: str | Path) -> list[Path]:
    """``RUN/trajectories/*.jsonl`` (steps in order, then the rest), or the one JSONL file given."""
    p = Path(run)
    if p.is_file():
        return [p]
    folder = p / "trajectories"
    if not p.is_dir():
        raise ValueError(f"run '{run}': no such run directory or JSONL file")
    files = (
        sorted(folder.glob("*.jsonl"), key=lambda f: (not f.stem.startswith("step_"), f.name))
        if folder.is_dir()
        else []
    )
    if not files:
        raise ValueError(f"run '{run}': no trajectories in {folder} (tracking.save_trajectories > 0 writes them)")
    return files


def step_label(path: Path) -> str:
    m = re.fullmatch(r"step_(\d+)", path.stem)
    return f"step {int(m.group(1))}" if m else path.stem


def read_steps(run: str | Path, last: int = 0) -> list[Step]:
    """Every file's trajectories; ``last > 0`` keeps only the last ``last`` training steps (evals stay)."""
    files = trajectory_files(run)
    step_files = [f for f in files if f.stem.startswith("step_")]
    if last > 0:
        drop = set(step_files[:-last])
        files = [f for f in files if f not in drop]
    steps = []
    for path in files:
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from e
            missing = [k for k in ("token_ids_T", "loss_mask_T", "turns_N", "stop_reason") if k not in row]
            if missing:
                raise ValueError(f"{path}:{n}: not a saved Trajectory (missing {', '.join(missing)})")
            rows.append(row)
        steps.append(Step(step_label(path), rows))
    return steps


def tokenizer_path_of(run: str | Path) -> str:
    """``model.path`` of the run's ``config.yaml`` (next to ``trajectories/``, or above the file given)."""
    p = Path(run).resolve()
    for folder in [p, *p.parents][:3]:
        config = folder / "config.yaml"
        if config.is_file():
            path = (yaml.safe_load(config.read_text()) or {}).get("model", {}).get("path")
            if path:
                return str(path)
    raise ValueError(f"run '{run}': no config.yaml with model.path found; pass --tokenizer PATH")


def load_decoder(path: str) -> Any:
    """Something with ``decode(ids, skip_special_tokens=...)``: the ``tokenizers`` file when the
    checkpoint has one (no torch import: the page is written in a second), else transformers'."""
    tokenizer_json = Path(path) / "tokenizer.json"
    if tokenizer_json.is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(tokenizer_json))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class TokenTexts:
    """Each token id decoded on its own (cached): the page shows one span per token."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    def text(self, token_ids: list[int]) -> str:
        return "".join(self(t) for t in token_ids)

"""``agent-rl export RUN [--merge] [--out DIR] [--step N]``: a run's policy out of its checkpoint.

A LoRA run's checkpoint holds the adapter in PEFT's format (``checkpoints/step_N/model/``). Without
``--merge`` the export is that adapter (``PeftModel.from_pretrained(base, DIR)`` loads it; its
``adapter_config.json`` names the base, the run's ``model.path``) plus the tokenizer; with
``--merge`` the adapter is folded into the base weights (W + (alpha / r) B A) and the result is a
plain Hugging Face model (``AutoModelForCausalLM.from_pretrained(DIR)``). A full fine-tuning run's
``model/`` already is a plain model: it is copied (``--merge`` changes nothing).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent_rl.learner import checkpoint as ckpt
from agent_rl.models.loading import load_model, load_tokenizer

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def checkpoint_model(run: Path, step: int | None = None) -> Path:
    """``model/`` of checkpoint ``step`` of ``run`` (None: the newest complete one)."""

    root = Path(run) / "checkpoints"
    path = ckpt.latest(root) if step is None else root / f"step_{step:06d}"
    if path is None or not (path / "model").is_dir():
        have = ", ".join(p.name for p in sorted(root.glob("step_*"))) or "none"
        raise ValueError(
            f"{run}: no checkpoint {'' if step is None else f'step {step} '}with a model/ (checkpoints: {have})"
        )
    return path / "model"


def is_adapter_dir(path: Path) -> bool:
    return all((Path(path) / f).is_file() for f in ADAPTER_FILES)


def export(run: Path, out: Path | None = None, merge: bool = False, step: int | None = None) -> Path:
    """Write the policy of ``run`` to ``out`` (default ``RUN/export`` or ``RUN/export_merged``)."""
    src = checkpoint_model(Path(run), step)
    out = Path(out) if out is not None else Path(run) / ("export_merged" if merge else "export")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out {out} exists and is not empty")
    if not (merge and is_adapter_dir(src)):  # the adapter as it is, or a full fine-tuning run's model
        shutil.copytree(src, out, dirs_exist_ok=True)
        return out
    merged = load_policy(src, merge=True)
    merged.save_pretrained(out)

    load_tokenizer(str(src)).save_pretrained(out)
    return out


def load_policy(path: Path, merge: bool = False, base: str | None = None):
    """The policy stored at ``path``: a plain model, or the base of an adapter (``base``, else the one
    its config names) with the adapter loaded, and merged into it with ``merge``."""

    path = Path(path)
    if not is_adapter_dir(path):
        return load_model(str(path))
    from peft import PeftModel

    base = base or json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
    if not base or not Path(base).exists() and "/" not in base:
        raise ValueError(f"{path}: the adapter's base model '{base}' is not available; pass it explicitly")
    policy = PeftModel.from_pretrained(load_model(base), str(path)).eval()
    return policy.merge_and_unload() if merge else policy

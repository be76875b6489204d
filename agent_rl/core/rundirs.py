"""A run directory where a model or a config is expected: its checkpoints and its ``config.yaml``.

A run directory holds ``config.yaml`` and ``checkpoints/step_NNNNNN/`` (``agent_rl/learner/checkpoint.py``);
each checkpoint's ``model/`` is a ``from_pretrained`` directory (or, for a LoRA run, a PEFT adapter).
``agent-rl eval RUN``, ``model.path=RUN`` and ``--resume RUN`` read them through these functions,
which touch only the file system (no torch), so a wrong path fails before any heavy import.
"""

from __future__ import annotations

from pathlib import Path


def is_run_dir(path: str | Path) -> bool:
    """``path`` is a run directory: it holds the ``config.yaml`` the run was made with."""
    return (Path(path).expanduser() / "config.yaml").is_file()


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (temporary directories never count)."""
    done = sorted(p for p in Path(root).glob("step_*") if p.is_dir())
    return done[-1] if done else None


def checkpoint_model(run: str | Path, step: int | None = None, key: str = "model.path") -> Path:
    """``model/`` of checkpoint ``step`` of ``run`` (None: the newest); ``ValueError`` naming the
    checkpoints there are when there is none, or when it is a LoRA adapter (not a whole model)."""
    root = Path(run).expanduser() / "checkpoints"
    path = latest_checkpoint(root) if step is None else root / f"step_{step:06d}"
    if path is None or not (path / "model").is_dir():
        have = ", ".join(p.name for p in sorted(root.glob("step_*")) if p.is_dir()) or "none"
        which = "" if step is None else f"step {step} "
        raise ValueError(f"{key}={run}: the run has no checkpoint {which}with a model/ (checkpoints: {have})")
    model = path / "model"
    if (model / "adapter_config.json").is_file() and not (model / "config.json").is_file():
        raise ValueError(
            f"{key}={run}: {model} is a LoRA adapter, not a whole model; merge it with "
            f"`agent-rl export {run} --merge` and use the directory it prints"
        )
    return model


def resolve_model_path(path: str, step: int | None = None, key: str = "model.path") -> str:
    """``path`` itself, or for a run directory the ``model/`` of its newest checkpoint (of ``step``)."""
    if not is_run_dir(path) or (Path(path).expanduser() / "config.json").is_file():
        return path
    return str(checkpoint_model(path, step, key))

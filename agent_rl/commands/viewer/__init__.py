"""Static HTML trajectory viewer: ``agent-rl view RUN [--out FILE]`` (tokens coloured by mask / advantage)."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent_rl.commands.viewer.html import render_page
from agent_rl.commands.viewer.paged import write_paged
from agent_rl.run.trajectories import (
    TokenTexts,
    load_decoder,
    read_steps,
    tokenizer_path_of,
)

INLINE_MAX = 200  # episodes on one self-contained page; more: an index page and chunks loaded per page


def write_view(
    run: str | Path,
    out: str | Path | None = None,
    tokenizer_path: str | None = None,
    last: int = 0,
    page_size: int | None = None,
) -> Path:
    """Write the page for a run directory (its ``trajectories/*.jsonl``) or one JSONL file; returns its path.

    ``last > 0``: only the last ``last`` training steps. Up to ``INLINE_MAX`` episodes, one page holds
    them all; beyond (or with ``page_size``), the page holds a filterable index and the first
    page of episodes (``page_size``; default up to 25, fewer when they are long), and the rest load a page at a time from ``<out>.d/`` (``viewer/paged.py``).
    """

    if last < 0:
        raise ValueError(f"--last {last}: must be >= 0 (0: every step)")
    steps = read_steps(run, last)
    path = tokenizer_path or tokenizer_path_of(run)
    try:
        texts = TokenTexts(load_decoder(path))
    except OSError as e:
        raise ValueError(f"cannot load the tokenizer '{path}' ({e}); pass --tokenizer PATH") from e
    run = Path(run)
    if out is None:
        out = run.with_suffix(".html") if run.is_file() else run / "trajectories.html"
    out = Path(out)
    title = f"agent-rl trajectories: {run.resolve().name}"
    if page_size is not None and page_size < 1:
        raise ValueError(f"--page-size {page_size}: must be >= 1")
    if page_size is not None or sum(len(s.trajectories) for s in steps) > INLINE_MAX:
        return write_paged(steps, texts, title, out, env=_env_id(run), page_size=page_size)
    out.write_text(render_page(steps, texts, title=title), encoding="utf-8")
    return out


def _env_id(run: Path) -> str:
    """``env.id`` of the run's config.yaml, for episodes that do not name their env."""

    config = (run if run.is_dir() else run.parent.parent) / "config.yaml"
    if config.is_file():
        return str(((yaml.safe_load(config.read_text()) or {}).get("env") or {}).get("id", ""))
    return ""


__all__ = ["write_view"]

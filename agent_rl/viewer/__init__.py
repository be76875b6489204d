"""Static HTML trajectory viewer: ``agent-rl view RUN [--out FILE]`` (tokens coloured by mask / advantage)."""

from __future__ import annotations

from pathlib import Path


def write_view(run: str | Path, out: str | Path | None = None, tokenizer_path: str | None = None, last: int = 0) -> Path:
    """Write the page for a run directory (its ``trajectories/*.jsonl``) or one JSONL file; returns its path.

    ``last > 0``: only the last ``last`` training steps (a long run's page stays small).
    """
    from agent_rl.viewer.html import render_page
    from agent_rl.viewer.load import (
        TokenTexts,
        load_decoder,
        read_steps,
        tokenizer_path_of,
    )

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
    out.write_text(render_page(steps, texts, title=f"agent-rl trajectories: {run.resolve().name}"), encoding="utf-8")
    return out


__all__ = ["write_view"]

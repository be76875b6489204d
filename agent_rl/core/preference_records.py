"""Preference records read from a JSONL: the one parser of ``trainer.preference_data``, ``agent-rl
train-rm`` and the judge env (``envs/judge.py``), so the three read the same file the same way.

One record a line, TRL's conversational layout:

    {"prompt": [...messages], "chosen": [...messages], "rejected": [...messages], "tools": [...]}   a pair
    {"prompt": [...messages], "completion": [...messages], "label": true, "tools": [...]}          a labelled sample

Each field may be a plain string (one user message for ``prompt``, one assistant message otherwise).
A record comes back as ``{"prompt", "rows": [(messages, reward), ...], "tools", "source"}``: a pair's
rows are (chosen, 1.0) then (rejected, 0.0), a labelled sample's one row has 1.0 when ``label``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def messages_of(value: Any, role: str, where: str) -> list[dict]:
    """``value`` as a message list (a string becomes one ``role`` message); ``ValueError`` otherwise."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    raise ValueError(f"{where}: expected a string or a non-empty list of messages with 'role'")


def parse_record(rec: Any, where: str) -> dict:
    """One decoded JSON line as a record; ``ValueError`` naming ``where`` and the keys expected."""
    if not isinstance(rec, dict) or "prompt" not in rec:
        raise ValueError(f"{where}: expected {{prompt, chosen, rejected}} or {{prompt, completion, label}}")
    prompt = messages_of(rec["prompt"], "user", f"{where} 'prompt'")
    if "chosen" in rec and "rejected" in rec:
        rows = [(messages_of(rec["chosen"], "assistant", f"{where} 'chosen'"), 1.0),
                (messages_of(rec["rejected"], "assistant", f"{where} 'rejected'"), 0.0)]  # fmt: skip
    elif "completion" in rec and isinstance(rec.get("label"), bool):
        rows = [(messages_of(rec["completion"], "assistant", f"{where} 'completion'"), 1.0 if rec["label"] else 0.0)]
    else:
        raise ValueError(f"{where}: expected keys chosen + rejected, or completion + label (true/false)")
    for completion, _ in rows:
        if not any(m["role"] == "assistant" for m in completion):
            raise ValueError(f"{where}: a completion needs at least one assistant message")
    return {"prompt": prompt, "rows": rows, "tools": rec.get("tools"), "source": where}


def load_records(path: str | Path, what: str = "trainer.preference_data.path") -> list[dict]:
    """The records of ``path``; a bad line raises ``ValueError`` naming the file, the line and the keys
    expected (``what``: the setting that named the file, for the messages)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path} ({e.strerror})") from None
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
        records.append(parse_record(rec, f"{path}:{n}"))
    if not records:
        raise ValueError(f"{what}: {path} holds no records")
    return records

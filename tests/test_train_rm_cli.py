"""`agent-rl train-rm` with a model directory that does not exist: one line, nothing written."""

from __future__ import annotations

from agent_rl.cli import main


def test_train_rm_missing_model_is_one_line(tmp_path, capsys):
    data, model, out = tmp_path / "pairs.jsonl", tmp_path / "nope", tmp_path / "rm"
    data.write_text('{"prompt": "1+1?", "chosen": "2", "rejected": "3"}\n')
    assert main(["train-rm", "--data", str(data), "--model", str(model), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        (
            f"error: --model={model}: no such directory (looked for {model}). Build a tiny model with "
            f"`agent-rl init-model tiny --out {model}`, or give a checkpoint directory or a hub id (org/name)"
        )
    ]
    assert not out.exists()

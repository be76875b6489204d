"""The CLI's basics: ``--version``, an example in each subcommand's help, help text on every flag."""

from __future__ import annotations

import argparse

import pytest

from agent_rl.cli import build_parser, main


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("agent-rl ")


def test_every_subcommand_shows_an_example_and_every_flag_has_help():
    missing = []
    for name, sp in _subcommands().items():
        command = sp.prog.split()[-1]  # an alias (proxy) shows its command's example (serve)
        if not (sp.epilog or "").startswith(f"example:\n  agent-rl {command}"):
            missing.append(f"{name}: no example")
        missing += [f"{name} {a.dest}: no help" for a in sp._actions if not a.help]
    assert missing == []

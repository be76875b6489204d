"""An oracle for ShellTask-v0: solves each family in 5-6 tool calls, reading only the conversation.

Each family is a fixed plan of tool calls; the call of turn ``k`` may read the outputs of the
earlier calls (one call per turn, so output ``k`` answers turn ``k``). Calls are written in the env's
tool-call format (``tool_format``, bound by ``agent-rl sft`` / ``eval``).
"""

from __future__ import annotations

import configparser
import posixpath
import random
import re
from collections.abc import Callable

from tools.base import ToolCall
from tools.formats import get_format
from tools.formats.hermes import HERMES

Plan = list[Callable[[list[str], str], ToolCall]]  # (earlier outputs, instruction) -> the next call


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, arguments)


def call_text(name: str, **arguments) -> str:
    """The text of one call in the hermes format."""
    return HERMES.render_calls([call(name, **arguments)])


def _find_file_answer(outputs: list[str], instruction: str) -> str:
    lines = int(re.search(r"has exactly (\d+) lines", instruction).group(1))
    for row in outputs[1].splitlines():
        count, _, path = row.strip().partition(" ")
        if count == str(lines) and path != "total":
            return path
    return "not-found"


def _fixed_config(outputs: list[str], instruction: str) -> str:
    cfg = configparser.ConfigParser()
    cfg.read_string(outputs[0])
    data_dir = posixpath.dirname(outputs[2].strip().splitlines()[0].removeprefix("./"))
    fixes = {
        ("server", "host"): "127.0.0.1",
        ("server", "port"): "8080",
        ("run", "workers"): "4",
        ("run", "mode"): "safe",
        ("paths", "data_dir"): data_dir,
    }
    for line in outputs[1].splitlines():
        found = re.match(r"config error: \[(\w+)\] (\w+) ", line)
        if found:
            section, key = found.groups()
            if not cfg.has_section(section):
                cfg.add_section(section)
            cfg.set(section, key, fixes[(section, key)])
    return "\n".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in cfg[s].items()) for s in cfg.sections())


def _ports(outputs: list[str], instruction: str) -> str:
    names = re.findall(r"^name = (\S+)$", outputs[1], re.MULTILINE)
    ports = re.findall(r"^port = (\d+)$", outputs[1], re.MULTILINE)
    return "".join(f"{n} {p}\n" for n, p in sorted(zip(names, ports, strict=True)))


PLANS: dict[str, Plan] = {
    "find_file": [
        lambda o, i: call("shell", command="find data -type f | sort"),
        lambda o, i: call("shell", command="find data -type f | sort | xargs wc -l"),
        lambda o, i: call("read_file", path=_find_file_answer(o, i)),
        lambda o, i: call("write_file", path="answer.txt", content=_find_file_answer(o, i) + "\n"),
        lambda o, i: call("shell", command="cat answer.txt"),
    ],
    "fix_config": [
        lambda o, i: call("shell", command="cat app/config.ini"),
        lambda o, i: call("shell", command="python3 app/main.py"),
        lambda o, i: call("shell", command="find . -name input.csv"),
        lambda o, i: call("write_file", path="app/config.ini", content=_fixed_config(o, i)),
        lambda o, i: call("shell", command="python3 app/main.py"),
    ],
    "collect": [
        lambda o, i: call("shell", command="find services -name service.conf | sort"),
        lambda o, i: call("shell", command='for f in $(find services -name service.conf | sort); do cat "$f"; done'),
        lambda o, i: call("write_file", path="ports.txt", content=_ports(o, i)),
        lambda o, i: call("read_file", path="ports.txt"),
    ],
}
# how each family's instruction starts
_FAMILY_OF = {
    "Exactly one file": "find_file",
    "python3 app/main.py fails": "fix_config",
    "For every file named": "collect",
}


def oracle(messages: list[dict], rng: random.Random | None = None, *, tool_format: str = "hermes") -> str:
    """The next call of the task's plan; ``submit`` after the last one."""
    fmt = get_format(tool_format)
    instruction = next(m["content"] for m in messages if m["role"] == "user")
    family = next((f for start, f in _FAMILY_OF.items() if instruction.startswith(start)), None)
    outputs = [m["content"] for m in messages if fmt.is_result(m)]
    plan = PLANS.get(family, [])
    return fmt.render_calls([plan[len(outputs)](outputs, instruction) if len(outputs) < len(plan) else call("submit")])

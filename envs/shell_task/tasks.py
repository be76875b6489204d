"""ShellTask task families: a generated file tree, an instruction, and the spec of the final check.

Families (``FAMILIES``), each a function ``(rng, level) -> Task``:

* ``find_file``: exactly one file of a log tree has N lines; write its path to ``answer.txt``.
* ``fix_config``: ``app/main.py`` refuses its broken ``app/config.ini`` (1-3 faults, one of them
  may be a ``data_dir`` that has to be found); fix the config so the program runs.
* ``collect``: gather ``name``/``port`` of every ``service.conf`` of a nested tree (decoy ``.bak``
  and notes files beside them) into ``ports.txt``, sorted by name.

The difficulty knob (``LEVELS``) sets the size and depth of the tree and the number of faults.
Splits are 80/10/10 by a hash of the task, as in Arithmetic-v0.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envs.splits import check_difficulties, check_split, split_of


@dataclass(frozen=True)
class Level:
    files: int  # files in the tree (find_file, collect decoys)
    depth: int  # directory depth of the tree
    faults: int  # config faults (fix_config)
    services: int  # service.conf files (collect)


LEVELS: dict[int, Level] = {
    1: Level(files=6, depth=2, faults=1, services=3),
    2: Level(files=14, depth=3, faults=2, services=5),
    3: Level(files=28, depth=4, faults=3, services=8),
}

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "nova",
    "atlas",
    "orion",
    "vega",
    "lyra",
    "cedar",
    "maple",
    "birch",
    "aspen",
    "river",
    "tundra",
    "harbor",
    "summit",
    "canyon",
    "mesa",
    "quartz",
    "amber",
    "cobalt",
    "ivory",
    "onyx",
    "pearl",
    "ember",
    "frost",
]
EVENTS = ("started job", "finished job", "retrying job", "queued job", "cancelled job", "paused job")
APP_MAIN = (Path(__file__).parent / "app_main.py").read_text()


@dataclass
class Task:
    family: str
    difficulty: int
    instruction: str
    files: dict[str, str]  # path -> content, written into the sandbox at reset
    check: dict  # the checker's spec (expected answer, protected file hashes); never shown
    solution: str  # one line for the teacher context
    protected: list[str] = field(default_factory=list)
    seed: int = 0  # the generator's seed: (family, difficulty, seed) makes the task again

    @property
    def task_id(self) -> str:
        blob = json.dumps([self.family, self.instruction, sorted(self.files.items())], sort_keys=True)
        return "shell-" + hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def split(self) -> str:
        return split_of(self.task_id)

    def check_spec(self) -> dict:
        digest = {p: hashlib.sha256(self.files[p].encode()).hexdigest() for p in self.protected}
        return dict(self.check, family=self.family, protected=digest)

    def to_dict(self) -> dict:
        return {"family": self.family, "difficulty": self.difficulty, "seed": self.seed}


def _dirs(rng: random.Random, root: str, depth: int, n: int) -> list[str]:
    """``n`` distinct directories under ``root``, 1..depth levels deep."""
    out: set[str] = set()
    while len(out) < n:
        parts = [rng.choice(WORDS) for _ in range(rng.randint(1, depth))]
        out.add("/".join([root, *parts]))
    return sorted(out)


def _log(rng: random.Random, lines: int) -> str:
    return "".join(
        f"2026-11-{rng.randint(1, 30):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
        f"worker-{rng.randint(1, 9)} {rng.choice(EVENTS)} {rng.randint(1000, 9999)}\n"
        for _ in range(lines)
    )


def find_file(rng: random.Random, level: Level) -> Task:
    target = rng.randint(10, 40)
    files: dict[str, str] = {}
    dirs = _dirs(rng, "data", level.depth, max(2, level.files // 3))
    while len(files) < level.files:
        path = f"{rng.choice(dirs)}/{rng.choice(WORDS)}-{rng.randint(1, 99)}.log"
        if path not in files:
            counts = [c for c in range(3, 50) if c != target]
            files[path] = _log(rng, rng.choice(counts))
    answer = rng.choice(sorted(files))
    files[answer] = _log(rng, target)
    instruction = (
        f"Exactly one file under data/ has exactly {target} lines. Write its path (relative to the work "
        "directory, like data/x/y.log) as the only line of answer.txt, then call submit."
    )
    check = {"answer_file": "answer.txt", "expected": answer}
    return Task("find_file", 0, instruction, files, check, f"the file is {answer}", protected=sorted(files))


# fault -> (broken value, valid value); data_dir's valid value is the real directory
_GOOD = {("server", "host"): "127.0.0.1", ("server", "port"): "8080", ("run", "workers"): "4", ("run", "mode"): "safe"}
_BROKEN = {
    ("server", "host"): ["0.0.0.0", "example.org"],
    ("server", "port"): ["80", "http", "70000"],
    ("run", "workers"): ["0", "sixteen", "32"],
    ("run", "mode"): ["turbo", "FAST", "unsafe"],
}


def fix_config(rng: random.Random, level: Level) -> Task:
    data_dir = _dirs(rng, "datasets", level.depth, 1)[0]
    rows = [(f"r{i}", rng.randint(1, 500)) for i in range(rng.randint(5, 12))]
    files = {f"{data_dir}/input.csv": "id,amount\n" + "".join(f"{k},{v}\n" for k, v in rows), "app/main.py": APP_MAIN}
    for d in _dirs(rng, "datasets", level.depth, level.files // 4):  # decoy directories without input.csv
        if d != data_dir and not data_dir.startswith(d + "/"):
            files[f"{d}/README.txt"] = "old data, moved\n"
    faults = rng.sample([*_BROKEN, ("paths", "data_dir")], level.faults)
    values = {**_GOOD, ("paths", "data_dir"): data_dir}
    for key in faults:
        values[key] = "data" if key == ("paths", "data_dir") else rng.choice(_BROKEN[key])
    sections: dict[str, list[str]] = {}
    for (section, key), value in values.items():
        sections.setdefault(section, []).append(f"{key} = {value}")
    files["app/config.ini"] = "\n".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in sections.items())
    instruction = (
        "python3 app/main.py fails because app/config.ini is wrong. Fix app/config.ini (only that file) "
        "so that `python3 app/main.py` runs and prints ok total=..., then call submit."
    )
    check = {"program": "app/main.py", "faults": level.faults, "expected": f"ok total={sum(v for _, v in rows)}"}
    fixed = ", ".join(f"[{s}] {k}" for s, k in faults)
    protected = sorted(p for p in files if p != "app/config.ini")
    return Task("fix_config", 0, instruction, files, check, f"fix {fixed}; data_dir is {data_dir}", protected)


def collect(rng: random.Random, level: Level) -> Task:
    names = rng.sample(WORDS, level.services)
    dirs = _dirs(rng, "services", level.depth, level.services)
    files: dict[str, str] = {}
    expected = []
    for name, d in zip(names, dirs):
        port = rng.randint(2000, 9999)
        files[f"{d}/{name}/service.conf"] = (
            f"# service definition\nname = {name}\nport = {port}\nowner = team-{rng.randint(1, 9)}\n"
        )
        expected.append([name, str(port)])
        if rng.random() < 0.5:  # a stale backup with another port
            files[f"{d}/{name}/service.conf.bak"] = f"name = {name}\nport = {port + 1}\n"
    for d in dirs[: level.files // 4]:
        files[f"{d}/notes.txt"] = f"port = {rng.randint(2000, 9999)} was used once\n"
    expected.sort()
    instruction = (
        "For every file named exactly service.conf under services/, take its name and port. Write them "
        "to ports.txt, one line `NAME PORT` per service, sorted by name; then call submit."
    )
    check = {"answer_file": "ports.txt", "expected": expected}
    solution = "ports.txt: " + "; ".join(" ".join(p) for p in expected)
    return Task("collect", 0, instruction, files, check, solution, protected=sorted(files))


FAMILIES: dict[str, Callable[[random.Random, Level], Task]] = {
    "find_file": find_file,
    "fix_config": fix_config,
    "collect": collect,
}


def check_families(families: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    families = (families,) if isinstance(families, str) else tuple(families)
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}; known: {', '.join(FAMILIES)}")
    return families


def sample_task(seed: int, split: str, difficulties: tuple[int, ...], families: tuple[str, ...]) -> Task:
    """The task of ``seed`` in ``split``: deterministic, drawn by rejection on the split hash."""
    check_split(split)
    check_difficulties(difficulties, LEVELS)
    check_families(families)
    rng = random.Random(seed)
    while True:
        task = make_task(rng.choice(families), rng.choice(difficulties), rng.randrange(2**31))
        if task.split == split:
            return task


def make_task(family: str, difficulty: int, seed: int) -> Task:
    """The task ``family`` generates from ``seed`` at ``difficulty``."""
    check_families(family)
    check_difficulties(difficulty, LEVELS)
    task = FAMILIES[family](random.Random(seed), LEVELS[difficulty])
    task.difficulty, task.seed = difficulty, seed
    return task

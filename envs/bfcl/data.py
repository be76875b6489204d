"""BFCL v4's tasks as they ship inside the ``bfcl-eval`` package, read without BFCL's harness.

``bfcl-eval`` is installed pinned and without its dependencies (``make setup``; its own pins would
downgrade this project's stack). Only its data files and its multi-turn API classes are used.

* multi-turn: four categories of 200 tasks (``multi_turn_base`` ...), each a list of user turns, the
  initial state of the API classes it involves, and per user turn the ground-truth calls (strings
  such as ``"cd(folder='document')"``, read here with ``ast``, never evaluated);
* single-turn (Python): questions with function docs and ``possible_answer`` (any-of values per
  parameter; ``""`` marks an optional one); the irrelevance categories have no answer: no call is right.

Splits: 80 / 10 / 10 train / val / test by a hash of the task id (``envs.splits.split_of``), and
``all``; consecutive seeds enumerate a split (``task_for_seed``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

from envs.splits import check_split, split_of

BFCL_EVAL_VERSION = "2026.3.23"
SPLITS = ("train", "val", "test", "all")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CALL_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
)
IRRELEVANCE = ("irrelevance", "live_irrelevance")  # no call is the right answer

# the module of each multi-turn API class, and the file of its function docs
API_MODULES = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS = ("MathAPI",)  # takes no scenario
_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
    "number": "number",
}


def check_installed() -> None:
    """``RuntimeError`` naming the version expected when ``bfcl-eval`` is missing or another version."""
    try:
        found = importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found != BFCL_EVAL_VERSION:
        raise RuntimeError(
            f"the BFCL environments need bfcl-eval=={BFCL_EVAL_VERSION} ({'not installed' if found is None else 'found ' + found}); "
            f"run `make setup` or `pip install --no-deps bfcl-eval=={BFCL_EVAL_VERSION}`"
        )


def _data_dir():
    check_installed()

    return importlib.resources.files("bfcl_eval") / "data"


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def category_of(task_id: str) -> str:
    """BFCL's category of a task id (``multi_turn_base_12`` -> ``multi_turn_base``,
    ``live_simple_3-2-1`` -> ``live_simple``)."""
    return task_id.rsplit("_", 1)[0]


def session_of(task_id: str) -> str:
    """An opaque tag of the task in its system prompt: scripted policies (the ground-truth replay)
    find their task by it, since the same first question opens tasks of several categories."""
    return hashlib.sha256(("bfcl:" + task_id).encode()).hexdigest()[:10]


def json_schema(params: dict) -> dict:
    """BFCL's parameter doc (``dict`` / ``float`` / ``tuple`` / ``any`` types) as JSON schema."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key == "type":
            if value in _TYPES:
                out["type"] = _TYPES[value]  # "any": no type constraint
        elif key == "properties":
            out["properties"] = {name: json_schema(p) for name, p in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = json_schema(value)
        elif key in ("description", "enum", "default", "required", "format", "maximum", "minimum"):
            out[key] = value
    return out


def tool_schema(doc: dict) -> dict:
    """The OpenAI / Hugging Face ``tools=[...]`` entry of one BFCL function doc."""
    params = json_schema(doc.get("parameters", {"type": "dict", "properties": {}}))
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {
        "type": "function",
        "function": {"name": doc["name"], "description": doc.get("description", ""), "parameters": params},
    }


# -- multi-turn ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultiTurnTask:
    task_id: str
    category: str
    turns: tuple[tuple[dict, ...], ...]  # user messages per turn; () where a held-out function arrives
    initial_config: dict
    classes: tuple[str, ...]  # the involved API classes
    missed: dict[int, tuple[str, ...]]  # turn -> functions that appear at that turn (miss_func)
    ground_truth: tuple[tuple[str, ...], ...]  # the calls of each turn, as BFCL writes them

    @property
    def split(self) -> str:
        return split_of(self.task_id)

    @property
    def long_context(self) -> bool:
        return self.category == "multi_turn_long_context"

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "category": self.category}


@functools.cache
def function_docs(api_class: str) -> tuple[dict, ...]:
    """The function docs of one API class, in file order."""
    return tuple(_jsonl(_data_dir() / "multi_turn_func_doc" / API_MODULES[api_class][1]))


@functools.cache
def multi_turn_tasks() -> tuple[MultiTurnTask, ...]:
    data = _data_dir()
    out = []
    for category in MULTI_TURN_CATEGORIES:
        answers = {a["id"]: a["ground_truth"] for a in _jsonl(data / "possible_answer" / f"BFCL_v4_{category}.json")}
        for entry in _jsonl(data / f"BFCL_v4_{category}.json"):
            out.append(
                MultiTurnTask(
                    task_id=entry["id"],
                    category=category,
                    turns=tuple(tuple(turn) for turn in entry["question"]),
                    initial_config=entry["initial_config"],
                    classes=tuple(entry["involved_classes"]),
                    missed={int(k): tuple(v) for k, v in entry.get("missed_function", {}).items()},
                    ground_truth=tuple(tuple(calls) for calls in answers[entry["id"]]),
                )
            )
    return tuple(out)


# -- single-turn --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallTask:
    task_id: str
    category: str
    messages: tuple[dict, ...]  # the question (a system message may come first)
    functions: tuple[dict, ...]  # BFCL function docs
    answer: tuple[dict, ...]  # [{name: {param: [allowed values]}}]; () for irrelevance

    @property
    def split(self) -> str:
        return split_of(self.task_id)

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "category": self.category}


@functools.cache
def call_tasks() -> tuple[CallTask, ...]:
    data = _data_dir()
    out = []
    for category in CALL_CATEGORIES:
        answers = {}
        if category not in IRRELEVANCE:
            answers = {
                a["id"]: a["ground_truth"] for a in _jsonl(data / "possible_answer" / f"BFCL_v4_{category}.json")
            }
        for entry in _jsonl(data / f"BFCL_v4_{category}.json"):
            out.append(
                CallTask(
                    task_id=entry["id"],
                    category=category,
                    messages=tuple(entry["question"][0]),
                    functions=tuple(entry["function"]),
                    answer=tuple(answers.get(entry["id"], ())),
                )
            )
    return tuple(out)


# -- both ---------------------------------------------------------------------------------------
def select(tasks: tuple, split: str, categories: tuple[str, ...]) -> tuple:
    """The tasks of ``split`` (``all``: every one) in ``categories``, in dataset order."""
    check_split(split, SPLITS)
    return tuple(t for t in tasks if t.category in categories and (split == "all" or t.split == split))


def check_categories(categories: str | list[str] | tuple[str, ...] | None, known: tuple[str, ...]) -> tuple[str, ...]:
    """``categories`` as a tuple of known ones (None: all), or ``ValueError`` naming them."""
    if categories is None:
        return known
    chosen = (categories,) if isinstance(categories, str) else tuple(categories)
    for c in chosen:
        if c not in known:
            raise ValueError(f"unknown BFCL category {c!r}; known: {', '.join(known)}")
    return chosen


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """A ground-truth call string ``f(a, k=v)`` as (name, positional args, keyword args), read with
    ``ast.literal_eval`` (never evaluated). ``ValueError`` when it is not a call of literals."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call: {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    return node.func.id, args, kwargs

"""Agreement of the BFCL envs with ``bfcl_eval``'s own checkers, candidate by candidate.

For every task (or a sample), candidate answers are built: the ground truth and perturbations of
it (a wrong name, a missing or unexpected parameter, a changed value, ints for floats, a reply
without a call, a malformed call; multi-turn: a dropped or extra call, a changed argument, turns
ended by plain text, a held-out function called early). Each is scored twice: by the env (its
reward, ``scoring`` as given) and by BFCL's checker on the same calls:

* single-turn: ``ast_checker`` (``bfcl_eval.eval_checker.ast_eval``); irrelevance: BFCL's runner's
  rule, "no call decodes";
* multi-turn: ``multi_turn_checker`` (``bfcl_eval.eval_checker.multi_turn_eval``), fed the calls
  of each step as BFCL's runner decodes them (steps without a call are skipped).

``python -m envs.bfcl.agreement [--sample N] [--scoring official|project]`` prints the counts and
the disagreements. BFCL's checkers are imported with a stand-in for its model registry (which
imports every provider's SDK; the checkers read one flag of it). Measurement only: the envs never
import them.
"""

from __future__ import annotations

import argparse
import collections
import copy
import functools
import importlib
import itertools
import sys
import types
from typing import Any

from envs.bfcl.apis import _PACKAGE, keyword_args
from envs.bfcl.calls import BfclCallsEnv
from envs.bfcl.data import (
    IRRELEVANCE,
    call_tasks,
    multi_turn_tasks,
    parse_call,
)
from envs.bfcl.multi_turn import BfclMultiTurnEnv
from envs.bfcl.policies import _truth_calls
from tools.base import ToolCall
from tools.formats import get_format

_HERMES = get_format("hermes")
TEXT = "text"  # a step that is plain text (no call)
MALFORMED = "malformed"  # a step that holds a call no decoder reads


@functools.cache
def checkers() -> types.SimpleNamespace:
    """BFCL's checkers, importable without its provider SDKs."""
    if "bfcl_eval.constants.model_config" not in sys.modules:
        stub = types.ModuleType("bfcl_eval.constants.model_config")

        class _NoDots:
            underscore_to_dot = False

        stub.MODEL_CONFIG_MAPPING = collections.defaultdict(_NoDots)
        sys.modules["bfcl_eval.constants.model_config"] = stub
    ast = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    multi = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    enums = importlib.import_module("bfcl_eval.constants.enums")
    return types.SimpleNamespace(
        ast_checker=ast.ast_checker, multi_turn_checker=multi.multi_turn_checker, python=enums.Language.PYTHON
    )


# ---------------------------------------------------------------- single-turn


def _perturb_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value[:-1] if value else [1]
    if isinstance(value, dict):
        return {**value, "unexpected_key": 1}
    return value


def _ints_for_floats(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_ints_for_floats(v) for v in value]
    return value


def single_turn_candidates(task) -> list[tuple[str, Any]]:
    """(label, calls or TEXT / MALFORMED): calls are [(name, arguments)]."""
    truth = [(c.name, dict(c.arguments)) for c in _truth_calls(task)]
    out: list[tuple[str, Any]] = [("text", TEXT), ("malformed", MALFORMED)]
    if not truth:  # irrelevance: any offered function, called with nothing
        return out + [("a call", [(task.functions[0]["name"], {})])] if task.functions else out
    out.append(("truth", truth))
    name, args = truth[0]
    out.append(("wrong name", [(name + "_x", args), *truth[1:]]))
    out.append(("unexpected parameter", [(name, {**args, "zz_unexpected": 1}), *truth[1:]]))
    if args:
        first = next(iter(args))
        out.append(("missing parameter", [(name, {k: v for k, v in args.items() if k != first}), *truth[1:]]))
        for k, v in args.items():
            out.append((f"changed {k}", [(name, {**args, k: _perturb_value(v)}), *truth[1:]]))
    ints = [(n, {k: _ints_for_floats(v) for k, v in a.items()}) for n, a in truth]
    if ints != truth or any(
        type(x) is not type(y) for (_, a), (_, b) in zip(ints, truth) for x, y in zip(_leaves(a), _leaves(b))
    ):
        out.append(("ints for floats", ints))
    if len(truth) > 1:
        out.append(("reversed", truth[::-1]))
        out.append(("one call short", truth[:-1]))
    return out


def _leaves(value: Any) -> list:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _action(candidate: Any) -> str:
    if candidate == TEXT:
        return "I cannot help with that."
    if candidate == MALFORMED:
        return "<tool_call>{oops</tool_call>"
    return _HERMES.render_calls([ToolCall(n, a) for n, a in candidate])


def bfcl_single(task, candidate: Any) -> bool:
    decoded = candidate not in (TEXT, MALFORMED) and len(candidate) > 0
    if task.category in IRRELEVANCE:
        return not decoded
    if not decoded:
        return False
    output = [{name: args} for name, args in candidate]
    c = checkers()
    return bool(
        c.ast_checker(list(task.functions), output, list(task.answer), c.python, task.category, "agreement")["valid"]
    )


def env_single(env: BfclCallsEnv, task, candidate: Any) -> bool:
    env.reset(options={"task": task.task_id})
    _, reward, *_ = env.step(_action(candidate))
    return reward == 1.0


# ---------------------------------------------------------------- multi-turn


def _truth_steps(task) -> list[list[list[tuple[str, dict]]]]:
    """Per turn, one step with the turn's ground-truth calls (none for an empty turn)."""
    turns = []
    for truth in task.ground_truth:
        calls = []
        for text in truth:
            name, args, kwargs = parse_call(text)
            calls.append((name, keyword_args(task, name, args, kwargs)))
        turns.append([calls] if calls else [])
    return turns


def multi_turn_candidates(task) -> list[tuple[str, list, str]]:
    """(label, per turn a list of steps (each a list of (name, kwargs), or TEXT / MALFORMED), how
    each turn ends: an ``<answer>`` or plain text)."""
    truth = _truth_steps(task)
    out = [("truth", truth, "answer"), ("truth, turns ended by plain text", truth, "text")]
    first = next((i for i, steps in enumerate(truth) if steps), None)
    if first is None:
        return out
    calls = truth[first][0]
    turns = copy.deepcopy(truth)
    turns[first] = [calls[:-1]] if len(calls) > 1 else []
    out.append(("one call dropped", turns, "answer"))
    turns = copy.deepcopy(truth)
    turns[first] = [calls, [calls[0]]]
    out.append(("first call repeated", turns, "answer"))
    turns = copy.deepcopy(truth)
    turns[first] = [MALFORMED, calls]
    out.append(("malformed step first", turns, "answer"))
    for i, (name, kwargs) in enumerate(calls):
        key = next((k for k, v in kwargs.items() if isinstance(v, str)), None)
        if key is not None:
            turns = copy.deepcopy(truth)
            turns[first][0][i] = (name, {**kwargs, key: kwargs[key] + "x"})
            out.append((f"changed {name}.{key}", turns, "answer"))
            break
    missed = [(turn, name) for turn, names in task.missed.items() for name in names]
    for turn, name in missed[:1]:  # a held-out function called before its turn
        early = next(((n, a) for step in truth[turn] for n, a in step if n == name), None)
        if early is not None and turn > 0:
            turns = copy.deepcopy(truth)
            turns[0] = [[early], *turns[0]]
            out.append((f"{name} called before its turn", turns, "answer"))
    return out


def _call_text(name: str, kwargs: dict) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


_fresh_modules: dict[str, dict] = {}
_ids = itertools.count()


def _restore_bfcl_modules() -> None:
    """BFCL's harness keeps API instances in module globals and its long-context scenarios share
    module-level dicts that calls change in place: restore them so candidates do not see each other."""

    for name in ("long_context",):
        module = importlib.import_module(f"{_PACKAGE}.{name}")
        if name not in _fresh_modules:
            _fresh_modules[name] = copy.deepcopy(
                {k: v for k, v in vars(module).items() if not k.startswith("__") and isinstance(v, (dict, list))}
            )
        for k, v in _fresh_modules[name].items():
            setattr(module, k, copy.deepcopy(v))


def _until_reply(steps: list) -> list:
    """The steps BFCL's harness runs: a message from which no call decodes ends the turn."""
    out = []
    for step in steps:
        if step in (TEXT, MALFORMED) or not step:
            break
        out.append(step)
    return out


def bfcl_multi(task, turns: list) -> bool:
    _restore_bfcl_modules()
    decoded = [[[_call_text(n, a) for n, a in step] for step in _until_reply(steps)] for steps in turns]
    entry = {
        "id": task.task_id,
        "initial_config": copy.deepcopy(task.initial_config),
        "involved_classes": list(task.classes),
    }
    result = checkers().multi_turn_checker(
        decoded, [list(t) for t in task.ground_truth], entry, task.category, f"agreement{next(_ids)}"
    )  # a fresh name: fresh instances
    _forget_instances()
    return bool(result["valid"])


def _forget_instances() -> None:
    module = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    for key in [k for k in vars(module) if k.startswith("agreement")]:
        delattr(module, key)


def env_multi(env: BfclMultiTurnEnv, task, turns: list, end: str) -> bool:
    env.reset(options={"task": task.task_id})
    reward = 0.0
    for steps in turns:
        for step in [*steps, "END"]:
            if step == "END":
                action = "<answer>Done.</answer>" if end == "answer" else "Done."
            else:
                action = _action(step)
            _, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                return reward == 1.0
            if info.get("answered"):  # the turn ended here; its remaining steps never happen
                break
    return reward == 1.0


# ---------------------------------------------------------------- the measurement


def sample(tasks, per_category: int | None) -> list:
    if per_category is None:
        return list(tasks)
    by = collections.defaultdict(list)
    for t in tasks:
        by[t.category].append(t)
    return [t for ts in by.values() for t in ts[:: max(1, len(ts) // per_category)][:per_category]]


def measure(per_category: int | None = None, scoring: str = "official", extra_single=(), extra_multi=()) -> dict:
    """Counts and disagreements over the (sampled) tasks of both envs, plus the tasks named in
    ``extra_single`` / ``extra_multi``."""
    calls_env = BfclCallsEnv(split="all", scoring=scoring)
    multi_env = BfclMultiTurnEnv(split="all", scoring=scoring)
    out = {"single": [0, 0], "multi": [0, 0], "disagreements": []}
    single = sample(call_tasks(), per_category)
    single += [t for t in call_tasks() if t.task_id in extra_single and t not in single]
    for task in single:
        for label, cand in single_turn_candidates(task):
            ours, theirs = env_single(calls_env, task, cand), bfcl_single(task, cand)
            out["single"][0] += ours == theirs
            out["single"][1] += 1
            if ours != theirs:
                out["disagreements"].append((task.task_id, label, ours, theirs))
    tasks = sample(multi_turn_tasks(), per_category)
    tasks += [t for t in multi_turn_tasks() if t.task_id in extra_multi and t not in tasks]
    for task in tasks:
        for label, turns, end in multi_turn_candidates(task):
            ours, theirs = env_multi(multi_env, task, turns, end), bfcl_multi(task, turns)
            out["multi"][0] += ours == theirs
            out["multi"][1] += 1
            if ours != theirs:
                out["disagreements"].append((task.task_id, label, ours, theirs))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=None, help="tasks per category (default: every task)")
    parser.add_argument("--scoring", default="official", choices=("official", "project"))
    args = parser.parse_args(argv)
    out = measure(args.sample, args.scoring)
    for kind in ("single", "multi"):
        agree, total = out[kind]
        print(f"{kind}-turn: {agree} of {total} candidates agree")
    groups = collections.defaultdict(list)  # (category, label, env's verdict, BFCL's) -> task ids
    for tid, label, ours, theirs in out["disagreements"]:
        groups[
            (
                tid.rsplit("_", 1)[0] if tid.startswith("multi") else tid.rsplit("_", 1)[0].split("_")[0],
                label,
                ours,
                theirs,
            )
        ].append(tid)
    for key, ids in sorted(groups.items()):
        print(f"  {len(ids):5d}  {key}  e.g. {', '.join(ids[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

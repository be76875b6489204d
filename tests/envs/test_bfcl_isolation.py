"""BFCL multi-turn APIs: an episode owns all of its state, and no argument makes a call run long."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

from envs.bfcl.data import check_installed

try:
    check_installed()
except RuntimeError as exc:  # pragma: no cover - make setup installs it
    pytest.skip(str(exc), allow_module_level=True)

from envs.bfcl.apis import BOUNDS, POWER_BITS, ApiSession, CallError, check_bounds
from envs.bfcl.data import API_MODULES, multi_turn_tasks


def _long_context_travel_task():
    return next(t for t in multi_turn_tasks() if t.long_context and "TravelAPI" in t.classes)


def _book(session: ApiSession, task) -> dict:
    """Log in, book a flight on a card of the long-context extension (bfcl_eval's module-level
    cards, not the task's own), return every card's balance."""
    travel = session.instances["TravelAPI"]
    own = task.initial_config["TravelAPI"]["credit_card_list"]
    card = max(
        (c for c in travel.credit_card_list if c not in own), key=lambda c: travel.credit_card_list[c]["balance"]
    )
    token = json.loads(
        session.call(
            "authenticate_travel",
            {
                "client_id": "c",
                "client_secret": "s",
                "refresh_token": "r",
                "grant_type": "read_write",
                "user_first_name": "A",
                "user_last_name": "B",
            },
        )
    )["access_token"]
    session.call("set_budget_limit", {"access_token": token, "budget_limit": 1.0})
    booked = json.loads(
        session.call(
            "book_flight",
            {
                "access_token": token,
                "card_id": card,
                "travel_date": "2024-12-15",
                "travel_from": "SFO",
                "travel_to": "LAX",
                "travel_class": "economy",
            },
        )
    )
    assert booked["booking_status"], booked
    return {c: v["balance"] for c, v in travel.credit_card_list.items()}


def test_three_episodes_in_one_process_each_own_their_balances():
    """Long-context TravelAPI scenarios used to share bfcl_eval's module-level credit cards: each
    booking lowered the next episode's starting balance (8200 -> 8000 -> 7800)."""
    task = _long_context_travel_task()
    before = {c: v["balance"] for c, v in ApiSession(task).instances["TravelAPI"].credit_card_list.items()}
    after = [_book(ApiSession(task), task) for _ in range(3)]
    assert after[0] == after[1] == after[2] != before
    truth, model = ApiSession(task), ApiSession(task)
    _book(model, task)  # the model's instance and the ground truth's share nothing either
    assert {c: v["balance"] for c, v in truth.instances["TravelAPI"].credit_card_list.items()} == before
    fresh = ApiSession(task)
    assert {c: v["balance"] for c, v in fresh.instances["TravelAPI"].credit_card_list.items()} == before


def _mutables(value, found: dict[int, str], path: str) -> dict[int, str]:
    """id -> path of every mutable container or object reachable from ``value``."""
    if isinstance(value, (str, bytes, int, float, bool, type(None))) or id(value) in found:
        return found
    found[id(value)] = path
    if isinstance(value, dict):
        for k, v in value.items():
            _mutables(v, found, f"{path}[{k!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, v in enumerate(value):
            _mutables(v, found, f"{path}[{i}]")
    elif hasattr(value, "__dict__"):
        _mutables(vars(value), found, path)
    return found


def test_every_instance_owns_its_mutable_state():
    """No mutable value reachable from one episode's instances is reachable from another's
    (long-context scenarios shared bfcl_eval's module-level card and booking dicts)."""
    for task in [
        _long_context_travel_task(),
        *[t for t in multi_turn_tasks() if t.long_context][::20],
        *multi_turn_tasks()[::50],
    ]:
        a, b = ApiSession(task), ApiSession(task)
        for name in task.classes:
            mine = _mutables(a.instances[name], {}, name)
            theirs = _mutables(b.instances[name], {}, name)
            shared = sorted(mine[i] for i in set(mine) & set(theirs))
            assert shared == [], f"{task.task_id}: {shared[:5]}"


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("logarithm", {"value": 980.0, "base": 20, "precision": 1001}),
        ("square_root", {"number": 2, "precision": 10_001}),
        ("power", {"base": 2, "exponent": 10_001}),
        ("power", {"base": 10**300, "exponent": 10_000}),  # 3.8 s unbounded
        ("round_number", {"number": 5, "decimal_places": -10_001}),  # 10**(10**6): 0.8 s
    ],
)
def test_arguments_that_control_work_are_bounded(name, kwargs):
    with pytest.raises(CallError, match="at most"):
        check_bounds(name, kwargs)


def test_bounds_admit_the_ground_truths_values():
    check_bounds("logarithm", {"value": 980.0, "base": 20, "precision": BOUNDS[("logarithm", "precision")]})
    check_bounds("power", {"base": 3, "exponent": 10_000})
    check_bounds("power", {"base": 2.5, "exponent": 10_000})
    assert POWER_BITS >= 10_000 * 2


def test_logarithm_leaves_no_precision_behind():
    import mpmath

    task = next(t for t in multi_turn_tasks() if "MathAPI" in t.classes)
    session = ApiSession(task)
    dps = mpmath.mp.dps
    text = session.call("logarithm", {"value": 980.0, "base": 20, "precision": 50})
    assert mpmath.mp.dps == dps and len(text) > 50


FUZZ = r"""
import importlib, inspect, json, sys, time, typing
from envs.bfcl.apis import ApiSession, CallError
from envs.bfcl.data import API_MODULES, multi_turn_tasks
HUGE = {int: [10 ** 9, -10 ** 9, 10 ** 4000], float: [1e308, -1e308, 10 ** 4000], str: ["x" * 100_000],
        list: [[10 ** 9] * 10_000, ["x" * 1000] * 1000], dict: [{"k" * 1000: "v" * 100_000}], bool: [True]}
def kinds(annotation):
    if annotation in HUGE:
        return [annotation]
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (list, dict):
        return [origin]
    return [k for a in args for k in kinds(a)] or [str]
task_of = {}
for t in multi_turn_tasks():
    for c in t.classes:
        task_of.setdefault(c, t)
worst = (0.0, "")
for cls in API_MODULES:
    session = ApiSession(task_of[cls])
    for name, method in inspect.getmembers(session.instances[cls], inspect.ismethod):
        if name.startswith("_"):
            continue
        params = [p for p in inspect.signature(method).parameters.values()]
        hints = typing.get_type_hints(method)
        plain = {p.name: {int: 3, float: 3.0, str: "a", list: [3], dict: {}, bool: True}[kinds(hints.get(p.name, str))[0]]
                 for p in params}
        for p in params:
            for kind in kinds(hints.get(p.name, str)):
                for value in HUGE[kind]:
                    print(f"start {cls}.{name} {p.name}={str(value)[:20]}", flush=True)
                    t0 = time.perf_counter()
                    try:
                        session.call(name, dict(plain, **{p.name: value}))
                    except CallError:
                        pass
                    took = time.perf_counter() - t0
                    worst = max(worst, (took, f"{cls}.{name}({p.name}={str(value)[:20]}...)"))
                    print(f"{took:.3f} {cls}.{name} {p.name}", flush=True)
print("WORST", json.dumps(worst))
"""


def test_fuzz_every_api_argument_finds_no_unbounded_work():
    """Every argument of every multi-turn API function, at huge values of its type (ints of 10**9
    and 4000 digits, floats of 1e308, strings of 100k characters, lists of 10k items), one call at
    a time in a subprocess: each returns or is refused (CallError) quickly. An unbounded argument
    runs for many seconds to forever (``logarithm(precision=10**9)``): the budget per call is 2 s,
    ~100x what a bounded call takes here."""
    try:
        proc = subprocess.run([sys.executable, "-c", FUZZ], capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as exc:  # a call that never ends: name it
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        starts = [line for line in out.splitlines() if line.startswith("start ")]
        pytest.fail(f"an API call did not end: {starts[-1:] or 'before the first call'}", pytrace=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    took, call = json.loads(proc.stdout.splitlines()[-1][len("WORST ") :])
    calls = sum(1 for line in proc.stdout.splitlines() if line.startswith("start "))
    assert calls > 300, calls
    assert took < 2.0, f"{call} took {took:.2f} s"


def test_every_api_class_is_covered():
    for cls, (module, _) in API_MODULES.items():
        api = getattr(importlib.import_module(f"bfcl_eval.eval_checker.multi_turn_eval.func_source_code.{module}"), cls)
        assert [n for n, _ in inspect.getmembers(api, inspect.isfunction) if not n.startswith("_")]

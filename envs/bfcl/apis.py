"""BFCL's stateful multi-turn APIs, one fresh set per episode, called by method name.

``ApiSession(task)`` makes new instances of the task's API classes (``bfcl_eval``'s file system,
trading bot, travel booking, ...) and loads the task's initial state into each; nothing is shared
between sessions (BFCL's own harness caches instances in module globals per model and test). A call
is ``session.call(name, kwargs)``: the public method of that name on the instance that has it, with
keyword arguments; no text is ever evaluated. The result is the string BFCL's checker compares (a
str as is, a dict as JSON, anything else ``str()``), and an exception in the API is the string
``Error during execution: ...``, as BFCL records it.
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import importlib
import inspect
import json
import numbers
import threading
from typing import Any

from envs.bfcl.data import API_MODULES, STATELESS, MultiTurnTask

_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
#: Arguments that control how much an API computes, and their largest absolute value. Without them a
#: call computes for minutes while holding the GIL: ``10 ** 10**9``, a square root or a logarithm to
#: 10**9 digits (``logarithm``: 0.2 s at 10**4 digits, 21 s at 10**5), ``round(5, -10**9)`` (builds
#: 10**(10**9)). The ground truth uses at most precision 10 and no rounding beyond a few places.
#: Every other argument of the multi-turn APIs only selects, stores or does arithmetic on values
#: whose size the action's length bounds (``tests/envs/test_bfcl_isolation.py`` fuzzes them all).
BOUNDS = {
    ("power", "exponent"): 10_000,
    ("square_root", "precision"): 10_000,
    ("logarithm", "precision"): 1_000,
    ("round_number", "decimal_places"): 10_000,
}
#: ``power``: the result's size in bits (|exponent| x the bits of an integer base), at most this.
POWER_BITS = 1_000_000


class CallError(Exception):
    """A call that cannot be made: no such function in this session, or arguments that are refused."""


_MATH_LOCK = threading.Lock()  # MathAPI.logarithm sets mpmath's precision for the whole process


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def check_bounds(name: str, kwargs: dict[str, Any]) -> None:
    """``CallError`` when an argument of ``name`` would make it compute too long (:data:`BOUNDS`)."""
    for (fn, param), bound in BOUNDS.items():
        value = kwargs.get(param)
        if fn == name and _number(value) and abs(value) > bound:
            raise CallError(f"'{param}' of '{name}' must be at most {bound} in absolute value")
    if name == "power":
        base, exponent = kwargs.get("base"), kwargs.get("exponent")
        if isinstance(base, int) and _number(exponent) and abs(exponent) * max(1, abs(base).bit_length()) > POWER_BITS:
            raise CallError(f"'power' result too large: |exponent| x bits of 'base' must be at most {POWER_BITS}")


def _global_state(instance: Any):
    """MathAPI's methods change process-wide state (mpmath's precision): one call at a time, and
    the precision restored after it (the result's text is made inside, at the call's precision)."""
    if type(instance).__name__ != "MathAPI":
        return contextlib.nullcontext()
    import mpmath

    stack = contextlib.ExitStack()
    stack.enter_context(_MATH_LOCK)
    stack.enter_context(mpmath.workdps(mpmath.mp.dps))
    return stack


def _api_class(name: str) -> type:
    return getattr(importlib.import_module(f"{_PACKAGE}.{API_MODULES[name][0]}"), name)


def keyword_args(task: MultiTurnTask, name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A ground-truth call's positional ``args`` named after the parameters of the method ``name``
    (of whichever of the task's classes has it), merged with ``kwargs``."""
    for class_name in task.classes:
        method = getattr(_api_class(class_name), name, None)
        if method is not None and not name.startswith("_"):
            params = [p for p in inspect.signature(method).parameters if p != "self"]
            return {**dict(zip(params, args)), **kwargs}
    raise CallError(f"no function '{name}'")


def result_text(value: Any) -> str:
    """A call's return value as BFCL's checker compares it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class ApiSession:
    """The API instances of one episode (or of its ground truth), in the task's initial state."""

    def __init__(self, task: MultiTurnTask):
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}  # public method name -> bound method
        for name in task.classes:
            instance = _api_class(name)()
            if name not in STATELESS:
                instance._load_scenario(
                    copy.deepcopy(task.initial_config.get(name, {})), long_context=task.long_context
                )
            # own every value: long-context scenarios put bfcl_eval's module-level dicts (credit
            # cards, booking records) into the instance by reference, and calls change them in place
            instance.__dict__ = copy.deepcopy(instance.__dict__)
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self._methods[method_name] = method

    def call(self, name: str, kwargs: dict[str, Any], args: list[Any] | None = None) -> str:
        """The result text of ``name(*args, **kwargs)``; ``CallError`` when there is no such method
        or an argument is refused. ``args`` (positional) only for ground-truth calls."""
        method = self._methods.get(name)
        if method is None:
            raise CallError(f"no function '{name}'")
        check_bounds(name, kwargs)
        try:
            # square_root sets the precision of the thread's decimal context, logarithm mpmath's
            with decimal.localcontext(), _global_state(method.__self__):
                return result_text(method(*(args or []), **kwargs))
        except Exception as e:  # noqa: BLE001 - the API's own error is the call's result, as in BFCL
            return f"Error during execution: {e}"

    def state(self) -> dict[str, dict[str, Any]]:
        """Each instance's public attributes (BFCL compares these after every user turn)."""
        return {
            name: {k: v for k, v in vars(obj).items() if not k.startswith("_")} for name, obj in self.instances.items()
        }


def state_differences(model: ApiSession, truth: ApiSession) -> list[str]:
    """The ``Class.attribute`` names whose values differ between the two sessions."""
    out = []
    for name, truth_attrs in truth.state().items():
        model_attrs = model.state()[name]
        out += [f"{name}.{k}" for k, v in truth_attrs.items() if model_attrs.get(k) != v]
    return out

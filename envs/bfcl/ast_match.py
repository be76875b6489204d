"""BFCL's AST match of single-turn calls against ``possible_answer``, written here from its rules.

An answer is a list of ``{function: {parameter: [allowed values]}}``; ``""`` among the allowed
values marks an optional parameter. The calls match when:

* count: as many calls as answer entries (``simple`` / ``multiple``: exactly one);
* order: ``parallel*`` categories match each answer entry to a distinct call in any order (the
  first unmatched call that fits, entries taken in order, as BFCL does); the others in order;
* name: the call names the entry's function;
* parameters: every required parameter of the function doc is given; every given parameter is in
  the doc and in the answer; every answer parameter without ``""`` is given;
* types: the doc's type (``integer``, ``float``, ``string``, ``boolean``, ``array`` / ``tuple``
  with the type of their items, ``dict``, ``any``); an int passes for a float (and is compared as
  one); a value whose type is that of the allowed values passes too (BFCL's "variable" case, e.g. a
  string where the doc says float): it is then compared exactly;
* values: one of the allowed values; strings (also inside lists and dicts) compared after BFCL's
  normalisation (lower case, no spaces and none of ``,./-_*^``, single quotes as double); a dict
  has only allowed keys, each with an allowed value, and every key whose allowed values lack
  ``""``; a list of dicts matches an allowed list dict by dict.

Items of a list (``rules``): ``"official"`` (the default) checks them as BFCL does: the list passes
when some allowed value is not a list (e.g. ``""``), or is a list whose first item's type, or the
doc's item type, is the type of every item given (so ``[1, 2]`` fails where the doc says floats and
the answer lists floats). ``"project"``, the rule before, accepts an item whose type is the items'
doc type, an int for a float, or the type of any allowed list's items.
"""

from __future__ import annotations

import re
from typing import Any

RULES = ("official", "project")
_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_STRIP = re.compile(r"[ ,./\-_*^]")


def normalize(text: str) -> str:
    return _STRIP.sub("", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    return normalize(value) if isinstance(value, str) else value


def _answer_type(allowed: list) -> type | None:
    return next((type(v) for v in allowed if v != ""), None)


def _type_ok(value: Any, doc: dict, allowed: list, rules: str = "official") -> tuple[bool, bool]:
    """(whether ``value`` passes the type check, whether it is BFCL's 'variable' case)."""
    expected = _TYPES.get(doc.get("type", "any"), str)
    answer_type = _answer_type(allowed)
    variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if expected is list and "items" in doc:
            item_type = _TYPES.get(doc["items"].get("type", "any"), str)
            if rules == "official":  # one allowed value must admit every item (no int for a float)
                ok = any(
                    not isinstance(option, list)
                    or all(type(v) is item_type or type(v) is _answer_type(option) for v in value)
                    for option in allowed
                )
                return ok, variable
            inner = [type(v) for a in allowed if isinstance(a, list) for v in a]
            ok = all(type(v) is item_type or (item_type is float and type(v) is int) or type(v) in inner for v in value)
            return ok, False
        return True, variable
    return (answer_type is not None and type(value) is answer_type), True


def _dict_ok(value: dict, allowed: list) -> bool:
    for option in allowed:
        if option == "" or not isinstance(option, dict):
            continue
        if all(k in option and _norm(v) in [_norm(a) for a in option[k]] for k, v in value.items()) and all(
            k in value or "" in vals for k, vals in option.items()
        ):
            return True
    return False


def _value_ok(value: Any, doc: dict, allowed: list) -> bool:
    expected = _TYPES.get(doc.get("type", "any"), str)
    items = doc.get("items", {}).get("type") if expected is list else None
    if expected is dict:
        return _dict_ok(value, allowed)
    if expected is list and items == "dict":
        return any(
            isinstance(opt, list) and len(opt) == len(value) and all(_dict_ok(v, [o]) for v, o in zip(value, opt))
            for opt in allowed
        )
    if expected is str:
        return normalize(value) in [normalize(a) for a in allowed if isinstance(a, str)]
    if expected is list:
        return [_norm(v) for v in value] in [[_norm(v) for v in opt] for opt in allowed if isinstance(opt, list)]
    return value in allowed


def match_call(doc: dict, name: str, arguments: dict[str, Any], entry: dict, rules: str = "official") -> str | None:
    """None when the call ``name(**arguments)`` matches the answer ``entry`` (``{function: params}``)
    of the function ``doc`` under ``rules`` (:data:`RULES`), else why not."""
    ((expected_name, params),) = entry.items()
    if name != expected_name:
        return f"function {name!r}, expected {expected_name!r}"
    props = doc.get("parameters", {}).get("properties", {})
    for p in doc.get("parameters", {}).get("required", []):
        if p not in arguments:
            return f"missing required parameter {p!r}"
    for p, value in arguments.items():
        if p not in props or p not in params:
            return f"unexpected parameter {p!r}"
        allowed, pdoc = params[p], props[p]
        if pdoc.get("type") == "float" and type(value) is int:
            value = float(value)
        ok, variable = _type_ok(value, pdoc, allowed, rules)
        if not ok:
            return f"parameter {p!r}: wrong type {type(value).__name__}"
        if (variable and value not in allowed) or (not variable and not _value_ok(value, pdoc, allowed)):
            return f"parameter {p!r}: {value!r} is not one of {allowed!r}"
    for p, allowed in params.items():
        if p not in arguments and "" not in allowed:
            return f"missing parameter {p!r}"
    return None


def match(
    category: str, functions: list[dict], calls: list[tuple[str, dict]], answer: list[dict], rules: str = "official"
) -> str | None:
    """None when ``calls`` (name, arguments) match ``answer`` under ``category``'s rules, else why not."""
    if len(calls) != len(answer):
        return f"{len(calls)} call(s), expected {len(answer)}"
    docs = {f["name"]: f for f in functions}
    if "parallel" not in category:
        for (name, args), entry in zip(calls, answer):
            why = match_call(docs.get(next(iter(entry))) or {}, name, args, entry, rules)
            if why is not None:
                return why
        return None
    used: set[int] = set()
    for entry in answer:
        doc = docs.get(next(iter(entry))) or {}
        found = next(
            (
                i
                for i, (name, args) in enumerate(calls)
                if i not in used and match_call(doc, name, args, entry, rules) is None
            ),
            None,
        )
        if found is None:
            return f"no call matches the expected {next(iter(entry))!r}"
        used.add(found)
    return None

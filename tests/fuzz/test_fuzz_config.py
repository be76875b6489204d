"""Fuzzed config loading: random dotted overrides (keys from the real config tree, random YAML
values) and random YAML files either give a ``Config`` or raise ``ConfigError`` / ``ValueError``
with a message, never another exception."""

from __future__ import annotations

import math

import pytest
import yaml
from fuzz_helpers import fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st

from agent_rl.algorithms import (
    ADVANTAGES,
    AGGREGATIONS,
    CREDITS,
    FILTERS,
    KLS,
    POLICY_LOSSES,
)
from agent_rl.config import Config, ConfigError, load_config


def _paths(node, prefix=()) -> list[str]:
    """Every dotted key of the default config tree, sections and leaves (list items by index)."""
    out = [".".join(prefix)] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, str(i)))
    return out


KEYS = sorted(set(_paths(Config().model_dump(mode="json"))))
NAMES = sorted(
    {n for r in (ADVANTAGES, AGGREGATIONS, CREDITS, FILTERS, KLS, POLICY_LOSSES) for n in r.names()}
    | {"hf", "openai", "vllm", "agent_rl/Maze-v0"}
)

# YAML that parses to odd values, or does not parse: tags, anchors, cycles, NaN, huge numbers
ODD_YAML = [
    "",
    "~",
    "null",
    "[]",
    "{}",
    ".nan",
    ".inf",
    "-.inf",
    "1e400",
    "-1",
    "0",
    "2",
    "0.5",
    "true",
    "'1'",
    "9" * 5000,
    "[",
    "{a: ",
    "]",
    "'",
    '"\\x',
    "a: b: c",
    "- a\n- b",
    "&a [*a]",
    "&a {x: *a}",
    "*nope",
    "!!python/object:os.system x",
    "!!binary AAAA",
    "!!float x",
    "!!int x",
    "!!timestamp x",
    "!!set {a}",
    "2001-12-14",
    "{1: 2}",
    "[{name: dynamic_sampling}]",
    "{name: nope}",
    "\x00",
    "\t",
    "%YAML 1.1",
    "---\n---",
    "? a",
    "@x",
    "`x",
    "[" * 3000 + "]" * 3000,
    "{a: " * 2000,
]

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | st.sampled_from(NAMES),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["name", "coef", "x"]) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
yaml_values = (
    st.sampled_from(ODD_YAML)
    | json_like.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip())
    | st.text(max_size=20)
)
keys = (
    st.sampled_from(KEYS)
    | st.sampled_from(KEYS).map(lambda k: k + ".name")
    | st.lists(st.sampled_from([*{p for k in KEYS for p in k.split(".")}, "", "0", "x"]), min_size=1, max_size=4).map(
        ".".join
    )
    | st.text(max_size=12)
)
overrides = st.tuples(keys, yaml_values).map(lambda kv: f"{kv[0]}={kv[1]}") | st.text(max_size=20)


def loads_or_explains(path, overs) -> None:
    try:
        cfg = load_config(path, overs)
    except ValueError as e:  # ConfigError is one
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return
    assert isinstance(cfg, Config)
    assert not math.isnan(cfg.rollout.temperature)


@fuzz_settings(250)
@given(overs=st.lists(overrides, max_size=4))
@example(overs=["a=["])  # a yaml.ParserError
@example(overs=["model.path=!!python/object:os.system x"])  # a yaml.ConstructorError
@example(overs=["env.id=" + "[" * 3000])  # a RecursionError
@example(overs=["rollout.temperature=.nan"])  # accepted: NaN passed the "> 0" check
@example(overs=["rollout=&a {x: *a}"])
@example(overs=["algorithm=!!timestamp x"])  # an AttributeError inside PyYAML
@example(overs=["trainer.steps=!!bool x"])  # a KeyError inside PyYAML
def test_overrides_load_or_explain(overs):
    loads_or_explains(None, overs)


@fuzz_settings(60)
@given(
    text=st.sampled_from(ODD_YAML)
    | json_like.map(lambda v: yaml.safe_dump({"rollout": v}))
    | st.dictionaries(st.sampled_from(KEYS), json_like, max_size=3).map(yaml.safe_dump)
    | st.text(max_size=40),
    overs=st.lists(overrides, max_size=2),
)
@example(text="model: {path: [", overs=[])
@example(text="rollout:\n  temperature: .nan\n", overs=[])
def test_files_load_or_explain(tmp_path_factory, text, overs):
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    loads_or_explains(path, overs)


@pytest.mark.parametrize(
    "override",
    [
        "a=[",
        "model.path=!!python/object:os.system x",
        "env.id=" + "[" * 3000,
        "algorithm=!!timestamp x",
        "trainer.steps=!!bool x",
        "trainer.steps=!!int x",
        "rollout.temperature=.nan",
        "algorithm.loss.eps_high=.nan",
    ],
)
def test_found_overrides_are_config_errors(override):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert override.split("=")[0] in str(e.value)

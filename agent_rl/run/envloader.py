"""Make environments from the config: import ``envs``, the user's plugins and the installed
packages' env entry points, then gymnasium.make.

The rest of the core never imports ``envs``: what it needs to know about an environment (its
class's declarations, the sandbox it takes, its card for ``agent-rl envs list``) comes from here.
An env class may declare, as ``module:function`` strings:

- ``sft_teacher``: the scripted policy ``agent-rl sft`` imitates when ``sft.teacher`` is null;
- ``tokenizer_corpus``: ``f(n, rng)`` yielding ``(messages, tools)``, text the tiny tokenizer also
  learns (``agent-rl init-model tiny --env ID``).
- ``task_category``: ``f(task_id) -> str``; ``agent-rl eval`` then also scores each category.

and, as a number, ``episode_memory_mb``: what one episode in flight holds (``agent_rl/run/capacity.py``).

The run's tool-call format (``tool_format``) reaches envs that take it, and scripted policies that
take a ``tool_format`` keyword (``bind_tool_format``), so demonstrations are in the env's format.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agent_rl.core.plugins import env_ids as entry_point_env_ids
from agent_rl.core.plugins import load_entry_points
from agent_rl.core.rawconfig import did_you_mean
from tools.formats import resolve_format

if TYPE_CHECKING:
    from agent_rl.config import Config  # only a type: a config check answers before torch loads (precheck.py)

# the tiny tokenizer's own text: the quickstart environment's conversations (agent_rl/models/tiny.py)
BASE_TOKENIZER_CORPUS = "envs.arithmetic.policies:corpus_conversations"


def load_plugins(plugins: list[str]) -> None:
    """Register the built-in envs, the installed packages' entry points and ``env.plugins``."""
    import envs  # noqa: F401 - registers the built-in ids

    load_entry_points()
    for name in plugins:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"env.plugins: cannot import '{name}': {e}") from None


def load_function(path: str) -> Callable:
    """``module:function`` -> the function."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def base_tokenizer_corpus() -> Callable:
    """The conversations every tiny tokenizer learns from (see ``BASE_TOKENIZER_CORPUS``)."""
    return load_function(BASE_TOKENIZER_CORPUS)


def env_class(env_id: str) -> Any:
    """The class (or creator function) registered as ``env_id``."""
    entry = gym.spec(env_id).entry_point
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        return getattr(importlib.import_module(module), name)
    return entry


def declared(env_id: str, attribute: str) -> str | None:
    """The ``module:function`` path the env class of ``env_id`` declares as ``attribute``, or None."""
    return getattr(env_class(env_id), attribute, None) or None


def sft_teacher(cfg: Config) -> str:
    """``sft.teacher``, or else the scripted teacher the env declares (``sft_teacher``)."""
    if cfg.sft.teacher is not None:
        return cfg.sft.teacher
    load_plugins(cfg.env.plugins)
    path = declared(cfg.env.id, "sft_teacher") if cfg.env.id in gym.registry else None
    if path is None:
        raise ValueError(
            f"config key 'sft.teacher': environment '{cfg.env.id}' declares no scripted SFT teacher; "
            "set sft.teacher to a module:function policy"
        )
    return path


def sandbox_kwargs(cfg: Config) -> dict[str, Any]:
    """``sandbox.backend`` reaches envs whose constructor takes ``sandbox_backend``."""
    load_plugins(cfg.env.plugins)
    if cfg.env.id not in gym.registry or "sandbox_backend" in cfg.env.options:
        return {}
    accepts = "sandbox_backend" in inspect.signature(env_class(cfg.env.id)).parameters
    return {"sandbox_backend": cfg.sandbox.backend} if accepts else {}


def tool_format(cfg: Config, tokenizer: Any) -> str | None:
    """The run's tool-call format: ``env.options.tool_format``, else ``rollout.tool_format``, where
    ``auto`` is detected from the tokenizer (``ValueError`` naming the values when it cannot be).
    None for an env whose constructor takes no ``tool_format``."""
    if "tool_format" in cfg.env.options:
        return cfg.env.options["tool_format"]
    load_plugins(cfg.env.plugins)
    if cfg.env.id not in gym.registry or "tool_format" not in inspect.signature(env_class(cfg.env.id)).parameters:
        return None
    return resolve_format(cfg.rollout.tool_format, tokenizer)


def bind_tool_format(policy: Callable, fmt: str | None) -> Callable:
    """A scripted policy that writes its calls in ``fmt``: ``policy`` with ``tool_format=fmt`` bound
    when it takes that keyword (the built-in envs' teachers do), else ``policy`` itself."""
    if fmt is None:
        return policy
    try:
        accepts = "tool_format" in inspect.signature(policy).parameters
    except (TypeError, ValueError):  # a callable without a signature
        accepts = False
    return functools.partial(policy, tool_format=fmt) if accepts else policy


def check_env_id(env_id: str, plugins: list[str]) -> None:
    """``env_id`` is registered (by ``envs``, the entry points or ``plugins``); else a ``ValueError``
    naming the nearest ids and every registered one. Imports no model code: ``agent_rl/run/precheck.py``
    calls it before torch is imported."""
    load_plugins(plugins)
    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("agent_rl/") or "/" in k and not k.startswith("ALE/"))
        near = did_you_mean(env_id, known)
        raise ValueError(f"config key 'env.id': unknown environment '{env_id}'{near}; registered: {', '.join(known)}")


def env_factory(env_cfg: Any, **overrides: Any) -> Callable[[], gym.Env]:
    """A function that makes one env; checks the id first so a typo fails before any model loads."""
    check_env_id(env_cfg.id, env_cfg.plugins)
    kwargs = {**env_cfg.options, **overrides}

    def make() -> gym.Env:
        return gym.make(env_cfg.id, **kwargs)

    env = make()  # fail now, on bad options, not in the middle of a rollout
    env.close()
    return make


def listed_env_ids(plugins: list[str]) -> list[str]:
    """What ``agent-rl envs list`` shows: the built-in ids, then those of the ``--plugins`` modules
    and of the installed packages' entry points."""
    import envs

    def module_of(spec: gym.envs.registration.EnvSpec) -> str:
        entry = spec.entry_point
        return entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")

    load_plugins(plugins)
    from_plugins = {  # ids whose environments come from the --plugins modules
        env_id
        for env_id, spec in gym.registry.items()
        if any(module_of(spec) == p or module_of(spec).startswith(p + ".") for p in plugins)
    }
    extra = (from_plugins | set(entry_point_env_ids)) - set(envs.REGISTERED)
    return sorted(envs.REGISTERED) + sorted(extra)


def env_card(env_id: str) -> dict:
    """One row of ``agent-rl envs list``: id, description, tools, max turns, reward."""
    import envs

    return envs.card(env_id)


def load_policy(path: str) -> Any:
    """A scripted policy by import path ``module:function``."""
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"config key 'sft.teacher': cannot load '{path}' ({e}); expected module:function") from None


# -- the tiny tokenizer's corpus: the built-in tasks' conversations, prose, and what envs offer --------
def env_corpus(env_id: str) -> Callable | None:
    """The conversations ``env_id`` offers the tokenizer: its env class's ``tokenizer_corpus``
    (``module:function``, called as ``f(n, rng)`` and yielding ``(messages, tools)``), or None."""
    load_plugins([])  # registers the built-in ids
    if env_id not in gym.registry:
        raise ValueError(f"unknown environment '{env_id}' for the tokenizer corpus")
    path = declared(env_id, "tokenizer_corpus")
    return load_function(path) if path else None


def tokenizer_corpus(num_texts: int, seed: int, env_ids: Sequence[str] = ()) -> Iterator[Any]:
    """Text the tokenizer learns its merges from: chat renders of the built-in tasks plus prose,
    then the conversations of ``env_ids`` that offer some (none: the Arithmetic-only corpus)."""
    rng = random.Random(seed)
    yield from base_tokenizer_corpus()(num_texts, rng)
    words = "the a of to and in is it you that was for on are with as be at one have this from".split()
    for _ in range(num_texts // 50):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + "."
    for env_id in env_ids:
        conversations = env_corpus(env_id)
        if conversations is not None:
            yield from conversations(num_texts, rng)


def init_tiny(
    out: str | Path,
    seed: int = 0,
    vocab_size: int = 1024,
    env_ids: Sequence[str] = (),
    family: str = "qwen2.5",
    max_position_embeddings: int = 2048,
) -> Path:
    """Build and save the tiny model and tokenizer to ``out`` (``agent_rl/models/tiny.py``); its
    tokenizer learns from ``tokenizer_corpus`` (``env_ids``: envs whose conversations join the
    default, Arithmetic's, e.g. ``agent_rl/MathTool-v0``)."""
    from agent_rl.models.tiny import save_tiny  # torch and transformers: only when a model is built

    corpus = tokenizer_corpus(6000, seed, env_ids)
    return save_tiny(out, corpus, seed, vocab_size, family, max_position_embeddings)

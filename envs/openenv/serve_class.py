"""Serve one OpenEnv ``Environment`` class with openenv's own server: ``create_app`` under uvicorn.

Run by ``envs/openenv/server.py`` with the OpenEnv venv's python, as a script (it imports nothing of
this project), on a socket the parent has already bound to 127.0.0.1 (``--fd``: no port race). The
action and observation classes are the ``--action-class`` / ``--observation-class`` given, else
``CallToolAction`` / ``CallToolObservation`` for an ``MCPEnvironment``, else the annotations of the
class's ``step``. Sessions: ``--max-sessions`` when the class sets ``SUPPORTS_CONCURRENT_SESSIONS``,
else 1 (openenv refuses more). A mistake is one line on stderr and exit code 2. The server exits when
its parent does.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import socket
import sys
import threading
import time
import typing

SUPPORTED = ("0.10.0",)  # the openenv versions whose wire protocol envs/openenv/session.py speaks


def check_version(version: str | None) -> None:
    """Exit in one line unless ``version`` (openenv's, installed beside this interpreter) is supported."""
    if version not in SUPPORTED:
        found = f"openenv {version}" if version else "no openenv"
        fail(
            f"python: {found} is installed for {sys.executable}; agent_rl/OpenEnv-v0 speaks openenv "
            f"{', '.join(SUPPORTED)} (`make openenv-venv` builds that venv; leave env.options.python unset to use it)"
        )


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("openenv")
    except importlib.metadata.PackageNotFoundError:
        return None


def fail(message: str) -> typing.NoReturn:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


def load(path: str, what: str) -> typing.Any:
    module, _, name = path.partition(":")
    if not module or not name:
        fail(f"{what}: '{path}' is not module:Name")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - the user's module may raise anything on import
        fail(f"{what}: cannot import '{path}': {type(e).__name__}: {e}")
    return obj


def model_classes(env_cls: type, action: str | None, observation: str | None) -> tuple[type, type]:
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import Action, Observation

    if issubclass(env_cls, MCPEnvironment) and action is None and observation is None:
        return CallToolAction, CallToolObservation
    try:
        hints = typing.get_type_hints(env_cls.step)
    except Exception:  # noqa: BLE001 - unresolvable annotations: ask for the classes below
        hints = {}
    action_cls = load(action, "action_class") if action else hints.get("action")
    observation_cls = load(observation, "observation_class") if observation else hints.get("return")
    if not (isinstance(action_cls, type) and issubclass(action_cls, Action) and action_cls is not Action):
        fail(f"action_class: {env_cls.__name__}.step names no Action subclass; set env.options.action_class")
    if not (isinstance(observation_cls, type) and issubclass(observation_cls, Observation)):
        fail(f"observation_class: {env_cls.__name__}.step returns no Observation subclass; set it")
    return action_cls, observation_cls


def exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env-class", required=True)
    parser.add_argument("--action-class")
    parser.add_argument("--observation-class")
    parser.add_argument("--max-sessions", type=int, default=1)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args()
    threading.Thread(target=exit_with_parent, args=(os.getppid(),), daemon=True).start()
    check_version(installed_version())
    env_cls = load(args.env_class, "env_class")  # first: a class that is not there fails before openenv's 3 s import
    try:
        import uvicorn
        from openenv.core.env_server.http_server import create_app
        from openenv.core.env_server.interfaces import Environment
    except ImportError as e:
        fail(f"python: openenv is not importable with {sys.executable}: {e}")
    if not (isinstance(env_cls, type) and issubclass(env_cls, Environment)):
        fail(f"env_class: '{args.env_class}' is not an openenv Environment subclass")
    action_cls, observation_cls = model_classes(env_cls, args.action_class, args.observation_class)
    sessions = args.max_sessions if getattr(env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False) else 1
    app = create_app(env_cls, action_cls, observation_cls, env_name=env_cls.__name__, max_concurrent_envs=sessions)
    sock = socket.socket(fileno=args.fd)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=1 << 24)).run(sockets=[sock])


if __name__ == "__main__":
    main()

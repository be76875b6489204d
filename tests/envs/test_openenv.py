"""agent_rl/OpenEnv-v0: the codec, the wire protocol's failures (against a fake server written here with
FastAPI), and real openenv 0.10.0 servers in the OpenEnv venv (the vault example; a class without
concurrent sessions). Bad input ends in one line and leaves nothing running."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time

import gymnasium as gym
import pytest
import uvicorn
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

import envs  # noqa: F401 - registers agent_rl/OpenEnv-v0
from agent_rl.core.errors import InfraError
from envs.openenv import serve_class, server, venv
from envs.openenv.codecs import ActionError, JsonCodec, observation_text, visible_schema
from envs.openenv.env import OpenEnvEnv
from envs.openenv.session import OpenEnvError
from examples.openenv_vault.policies import oracle as vault_oracle

SCHEMA = {
    "additionalProperties": False,
    "properties": {
        "metadata": {"type": "object", "title": "Metadata"},
        "digit": {"type": "integer", "minimum": 0, "maximum": 9, "title": "Digit"},
    },
    "required": ["digit"],
    "title": "DialAction",
    "type": "object",
}


def test_openenv_json_codec_reads_one_object_and_checks_the_schema():
    codec = JsonCodec(SCHEMA)
    assert codec.parse('{"digit": 7}') == {"digit": 7}
    assert codec.parse('I turn it.\n```json\n{"digit": 3}\n```') == {"digit": 3}
    for text, problem in [
        ("seven", "no JSON object in the reply"),
        ('{"digit": 7', "no JSON object in the reply"),
        ('{"digit": }', "the reply's JSON does not parse: Expecting value at character 10"),
        ('{"digit": 12}', "digit: 12 is greater than the maximum of 9"),
        ('{"dial": 1}', "action: 'digit' is a required property"),
    ]:
        with pytest.raises(ActionError) as e:
            codec.parse(text)
        assert str(e.value) == problem
    shown = visible_schema(SCHEMA)
    assert shown["properties"] == {"digit": {"type": "integer", "minimum": 0, "maximum": 9}} and "title" not in shown
    assert codec.instructions().endswith('"required":["digit"],"type":"object"}')


def test_openenv_observation_text_shows_the_fields_the_policy_needs():
    assert observation_text({"message": "Click.", "metadata": {"x": 1}}) == "Click."
    assert observation_text({"message": "Click.", "dials_open": 1, "hint": None}) == "message: Click.\ndials_open: 1"
    assert observation_text({"metadata": {"task": "Open the vault."}}) == "Open the vault."
    assert observation_text({"board": [[1, 0]], "metadata": {}}) == "board: [[1, 0]]"


class FakeServer:
    """An OpenEnv-shaped server whose ``/ws`` answers with ``answers[kind]`` (None: never answers)."""

    def __init__(self, answers: dict[str, dict | None]):
        app = FastAPI()
        app.get("/schema")(lambda: {"action": SCHEMA, "observation": {}, "state": {}})
        app.get("/metadata")(lambda: {"name": "fake", "description": ""})
        app.get("/health")(lambda: {"status": "healthy"})

        @app.websocket("/ws")
        async def ws(websocket: WebSocket):
            await websocket.accept()
            try:
                while True:
                    kind = json.loads(await websocket.receive_text())["type"]
                    if answers.get(kind) is not None:
                        await websocket.send_text(json.dumps(answers[kind]))
            except WebSocketDisconnect:
                pass

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


GOOD = {"type": "observation", "data": {"observation": {"message": "Dial 1: 3 + 4."}, "reward": None, "done": False}}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"type": "observation", "data": {"reward": 0}}, "no 'observation' object"),
        ({"type": "observation", "data": {"observation": {}, "reward": "high"}}, "reward 'high' is not a number"),
        ({"type": "observation", "data": {"observation": {}, "done": "yes"}}, "done 'yes' is not a bool"),
    ],
)
def test_openenv_malformed_observation_is_the_envs_error_in_one_line(answer, problem):
    fake = FakeServer({"reset": GOOD, "step": answer})
    env = OpenEnvEnv(base_url=fake.url, step_timeout_s=5)
    try:
        messages, _ = env.reset(seed=0)
        assert messages[-1] == {"role": "user", "content": "Dial 1: 3 + 4."}
        with pytest.raises(OpenEnvError) as e:
            env.step('{"digit": 7}')
        assert str(e.value) == (
            f"malformed observation from {fake.url}: {problem}; an OpenEnv server answers "
            '{"observation": {...}, "reward": number or null, "done": bool}'
        )
        # a reply that is no action never reaches the server: an error observation, not an error
        obs, reward, done, truncated, info = env.step("seven")
        assert (reward, done, truncated, info["action_valid"]) == (0.0, False, False, False)
        assert obs == [{"role": "user", "content": "error: no JSON object in the reply. "
                        "Reply with one JSON object that matches the action schema."}]  # fmt: skip
    finally:
        env.close()
        fake.stop()


def test_openenv_silent_or_vanished_server_is_an_infrastructure_error():
    fake = FakeServer({"reset": GOOD, "step": None})
    env = OpenEnvEnv(base_url=fake.url, step_timeout_s=0.5)
    try:
        env.reset(seed=0)
        with pytest.raises(InfraError, match=r"no answer to 'step' within 0.5 s"):
            env.step('{"digit": 7}')
        env.reset(seed=0)
        fake.stop()
        with pytest.raises(InfraError, match=r"OpenEnv server http://127\.0\.0\.1:\d+: "):
            env.step('{"digit": 7}')
    finally:
        env.close()


def test_openenv_bad_options_and_unknown_url_are_one_line():
    with pytest.raises(
        ValueError, match=r"^env.options: set one of env_class \(module:Class, served here\) and base_url, not"
    ):
        OpenEnvEnv(env_class="a:B", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError) as e:
        gym.make("agent_rl/OpenEnv-v0", base_url="http://127.0.0.1:9")
    assert (
        str(e.value)
        == "env.options.base_url: no OpenEnv server answers at http://127.0.0.1:9 (ConnectError); start it first"
    )
    other = FakeServer({})  # an HTTP server, but no OpenEnv one: its /schema is not found
    try:
        with pytest.raises(ValueError) as e:
            OpenEnvEnv(base_url=other.url + "/v1")
        assert str(e.value) == f"env.options.base_url: {other.url}/v1/schema answered 404, not an OpenEnv schema"
    finally:
        other.stop()


def _children() -> list[str]:
    """The command lines of this process's live child processes (to show nothing was left running)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if stat.rsplit(")", 1)[1].split()[1] == str(os.getpid()) and stat.rsplit(")", 1)[1].split()[0] != "Z":
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode())
        except (OSError, IndexError):
            continue
    # the server script, or the stand-in python that hangs (``exec sleep 60``); not other tests' children of this
    # worker (a sandbox worker's command line carries the executor's source, where "sleep" appears too)
    return [c for c in out if "serve_class" in c or c.startswith("sleep ")]


def test_openenv_unknown_class_and_a_server_that_never_comes_up_leave_nothing_running(tmp_path):
    # a server an earlier test of this process shares may still linger (it stops 30 s after its last user):
    # what this test starts is what must be gone
    children_before, servers_before = set(_children()), set(server._servers)
    with pytest.raises(ValueError) as e:
        OpenEnvEnv(env_class="examples.no_such_env:Missing")
    assert str(e.value).startswith(
        "env.options.env_class: the OpenEnv server did not start: exit code 2: env_class: cannot import "
        "'examples.no_such_env:Missing': ModuleNotFoundError: No module named 'examples.no_such_env'"
    )
    hangs = tmp_path / "python"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    with pytest.raises(ValueError) as e:
        OpenEnvEnv(env_class="examples.openenv_vault.vault_environment:VaultEnvironment", python=str(hangs),
                   start_timeout_s=1.5)  # fmt: skip
    assert str(e.value).startswith(
        "env.options.start_timeout_s: the OpenEnv server of 'examples.openenv_vault.vault_environment:Vault"
        "Environment' did not answer http://127.0.0.1:"
    ) and str(e.value).endswith("/health within 1.5 s; raise it or check that the class starts")
    assert set(_children()) - children_before == set() and set(server._servers) - servers_before == set()


def test_openenv_venv_a_build_that_fails_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RL_VENVS", str(tmp_path))
    bad = tmp_path / "requirements.txt"
    bad.write_text("not a requirement!!\n")
    with pytest.raises(ValueError) as e:
        venv.ensure_venv("openenv", bad)  # uv makes the venv, then cannot read the file
    assert str(e.value) == (
        f"cannot build the openenv environment in {tmp_path}/openenv: `uv pip install ...` failed: Couldn't parse "
        f"requirement in `{bad}` at position 0: Expected one of `@`, `(`, `<`, `=`, `>`, `~`, `!`, `;`, found `a`; "
        "run `make openenv-venv` to see the whole output"
    )
    assert (tmp_path / "openenv" / "bin" / "python").exists() and not (tmp_path / "openenv" / ".installed").exists()
    # the line of a Python step that raised, and of a uv resolution that found nothing
    assert venv.failure_line("Traceback (most recent call last):\n  File 'x'\nRuntimeError: no network\n", 1) == (
        "RuntimeError: no network"
    )
    resolution = "error: No solution found when resolving dependencies\n  cause: Because there is no version of x==9\n"
    assert (
        venv.failure_line(resolution, 1)
        == "No solution found when resolving dependencies: Because there is no version of x==9"
    )
    assert venv.failure_line("", 3) == "exit code 3"
    # uv wraps at a narrow terminal's width (xdist's workers set COLUMNS=80): the wrapped lines are joined
    wrapped = (
        "error: Couldn't parse requirement in\n       `/tmp/r.txt`\n       at position 0\n  cause: bad\n  x\n  ^\n"
    )
    assert venv.failure_line(wrapped, 2) == "Couldn't parse requirement in `/tmp/r.txt` at position 0: bad"
    monkeypatch.setattr(venv, "uv_binary", lambda: None)
    with pytest.raises(ValueError) as e:
        venv.ensure_venv("openenv", bad)
    assert str(e.value) == (
        f"cannot build the openenv environment: no uv beside {sys.executable} or on PATH; pip install "
        "'uv>=0.13.9,<0.14' (a dependency of agent-rl)"
    )


def test_openenv_unsupported_version_is_one_line(capsys):
    serve_class.check_version("0.10.0")
    for version, found in [("0.9.2", "openenv 0.9.2"), (None, "no openenv")]:
        with pytest.raises(SystemExit) as e:
            serve_class.check_version(version)
        assert e.value.code == 2
        assert capsys.readouterr().err == (
            f"python: {found} is installed for {sys.executable}; agent_rl/OpenEnv-v0 speaks openenv 0.10.0 "
            "(`make openenv-venv` builds that venv; leave env.options.python unset to use it)\n"
        )


@pytest.fixture(scope="module")
def vault():
    env = OpenEnvEnv(env_class="examples.openenv_vault.vault_environment:VaultEnvironment", max_turns=4)
    yield env
    env.close()
    server.stop_all()


def test_openenv_mcp_tools_go_out_and_each_call_is_one_tool_message(vault):
    messages, info = vault.reset(seed=3)
    assert [t["function"]["name"] for t in info["tools"]] == ["read_clue", "open_vault"]
    assert info["tools"][1]["function"]["parameters"]["properties"] == {"code": {"type": "integer"}}
    assert info["task"] == {"seed": 3, "split": "train"} and messages[0]["role"] == "user"
    rewards, contents = [], []
    for _ in range(3):
        action = vault_oracle(messages)
        obs, reward, done, truncated, step_info = vault.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        rewards.append(reward)
        contents += [m["content"] for m in obs]
    # seed 3 hides 40 and 85: two reads, then the sum
    assert contents == ["the left clue reads 40", "the right clue reads 85", "the vault opens"]
    assert rewards == [0.0, 0.0, 1.0] and (done, truncated, step_info["tool_calls"]) == (True, False, 1)
    vault.reset(seed=3)  # a new session: the same task again
    two = '<tool_call>{"name": "read_clue", "arguments": {"name": "left"}}</tool_call>\n' * 2
    obs, reward, done, _, step_info = vault.step(
        two + '<tool_call>{"name": "read_clue", "arguments": {"name": "up"}}</tool_call>'
    )
    assert [m["content"] for m in obs] == ["the left clue reads 40"] * 2 + [
        "error: Error calling tool 'read_clue': no clue named 'up'; the clues are 'left' and 'right'"
    ]
    assert (reward, done, step_info["action_valid"], step_info["tool_calls"]) == (0.0, False, False, 3)


def test_openenv_a_server_that_dies_ends_the_episode_as_infra_error(vault):
    vault.reset(seed=1)
    os.killpg(vault._server.proc.pid, signal.SIGKILL)
    vault._server.proc.wait(timeout=10)
    with pytest.raises(InfraError, match=r"the server exited \(exit code -9"):
        vault.step(vault_oracle([{"role": "user", "content": "start"}]))


def test_openenv_one_session_at_a_time_without_concurrent_sessions(tmp_path, monkeypatch):
    (tmp_path / "single_lock.py").write_text(
        "from examples.openenv_lock.server.lock_environment import LockEnvironment\n\n\n"
        "class SingleLock(LockEnvironment):\n    SUPPORTS_CONCURRENT_SESSIONS = False\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    first = OpenEnvEnv(env_class="single_lock:SingleLock", max_sessions=8)
    second = OpenEnvEnv(env_class="single_lock:SingleLock", max_sessions=8)
    try:
        assert first._server is second._server  # one server for the same settings
        first.reset(seed=0)
        waited = {}
        thread = threading.Thread(target=lambda: waited.update(obs=second.reset(seed=0)[0]))
        thread.start()
        thread.join(timeout=1.5)
        assert thread.is_alive()  # the server allows one session: the second waits for the first
        first.close()
        thread.join(timeout=30)
        assert waited["obs"][-1]["content"].startswith("message: A lock with three dials. Dial 1 of 3: its digit is ")
    finally:
        second.close()
        server.stop_all()

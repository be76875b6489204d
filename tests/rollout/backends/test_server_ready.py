"""At start the ``openai`` backend waits for its server (``rollout.backend.ready_timeout_s``), against
real loopback HTTP servers: one that comes up late (first refusing connections, then answering 503
while it loads, as `vllm serve` does), and one that never does."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from agent_rl.rollout.backends import BACKENDS
from agent_rl.rollout.backends.openai_http import ServerNotReadyError
from agent_rl.rollout.backends.server import bind
from tests import cli_runner
from tests.conftest import ROOT
from tests.learner.helpers import env, train_cmd


def free_port() -> int:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


class LoadingServer:
    """Binds ``port`` only after ``closed_s``, then answers 503 until ``loading_s`` more have passed, then 200."""

    def __init__(self, port: int, closed_s: float, loading_s: float):
        self.port, self.loading_s, self.paths, self.server = port, loading_s, [], None
        self.timer = threading.Timer(closed_s, self.start)
        self.timer.start()

    def start(self) -> None:
        up = time.monotonic()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                loaded = time.monotonic() - up >= outer.loading_s
                body = b'{"object": "list", "data": []}' if loaded else b"loading"
                self.send_response(200 if loaded else 503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.timer.cancel()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def build(url: str, ready_timeout_s: float):
    spec = BACKENDS.parse_config(
        {"name": "openai", "base_url": url, "ready_timeout_s": ready_timeout_s, "api_key_env": None, "model": "m"}
    )
    return BACKENDS(spec)(spec, None)


def test_a_server_that_comes_up_late_is_waited_for(caplog):
    port = free_port()
    server = LoadingServer(port, closed_s=1.0, loading_s=1.0)
    try:
        start = time.monotonic()
        backend = build(f"http://127.0.0.1:{port}/v1", ready_timeout_s=30)
        waited = time.monotonic() - start
    finally:
        server.close()
    assert 2.0 <= waited < 15, waited  # closed for 1 s, then 503 for 1 s; polled every 0.25-5 s
    assert backend.base_url == f"http://127.0.0.1:{port}/v1"
    assert server.paths[-1] == "/v1/models" and len(server.paths) >= 2  # answered 503 at least once
    [waiting, answered] = [r.getMessage() for r in caplog.records if "inference server" in r.getMessage()]
    assert waiting.startswith(f"waiting for the inference server at http://127.0.0.1:{port}/v1 (ConnectError")
    assert waiting.endswith("up to rollout.backend.ready_timeout_s=30 s")
    assert answered.startswith(f"the inference server at http://127.0.0.1:{port}/v1 answered after ")


def test_a_server_that_never_comes_up_stops_at_its_deadline_in_one_line():
    url = f"http://127.0.0.1:{free_port()}/v1"
    start = time.monotonic()
    with pytest.raises(ServerNotReadyError) as info:
        build(url, ready_timeout_s=1.5)
    assert 1.5 <= time.monotonic() - start < 5
    line = str(info.value)
    assert line.startswith(
        f"the inference server at {url} did not answer within rollout.backend.ready_timeout_s=1.5 s (last: ConnectError"
    )
    assert line.endswith(
        "start it (`agent-rl serve --model MODEL`, or `vllm serve` as in docs/vllm.md), check "
        "rollout.backend.base_url, or raise rollout.backend.ready_timeout_s"
    )
    assert "\n" not in line
    # a server that answers, but only 503 (still loading), is not ready either
    port = free_port()
    loading = LoadingServer(port, closed_s=0.0, loading_s=3600)
    try:
        with pytest.raises(ServerNotReadyError, match=r"within rollout.backend.ready_timeout_s=1 s \(last: HTTP 503\)"):
            build(f"http://127.0.0.1:{port}/v1", ready_timeout_s=1)
    finally:
        loading.close()
    assert build(url, ready_timeout_s=0).base_url == url  # 0: no wait


def test_agent_rl_train_against_a_server_that_is_down_stops_before_its_first_step(tmp_path, tiny_model_dir):
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = [
        str(ROOT / "configs" / "quickstart.yaml"), f"model.path={tiny_model_dir}", f"run.dir={tmp_path / 'run'}",
        "sandbox.backend=process", "trainer.steps=1", "tracking.loggers=[]", "tracking.progress=false",
        "rollout.backend.name=openai", f"rollout.backend.base_url={url}", "rollout.backend.ready_timeout_s=1",
    ]  # fmt: skip
    r = cli_runner.run(train_cmd(*args), ROOT, env(), timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"error: the inference server at {url} did not answer within rollout.backend.ready_timeout_s=1 s"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()

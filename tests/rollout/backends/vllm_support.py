"""What the vLLM tests share: seeded requests and the learner's logprobs of what was sampled (the in-process
engine's tests, ``test_vllm_backend.py``, and the served one's, ``test_vllm_serve.py``), and `vllm serve` of the
tiny model started as docs/vllm.md writes it (``TinyServer``: the session's ``vllm_server``, tests/conftest.py)."""

from __future__ import annotations

import time

import pytest
import torch

from agent_rl.config import load_config
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends import BACKENDS, GenerationRequest

TEMPERATURE = 0.7


def requests(tok, n: int = 6, **kw) -> list[GenerationRequest]:
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out = []
    for i in range(n):
        text = tok.apply_chat_template(
            [{"role": "user", "content": f"What is {i}+{7 * i}?"}], add_generation_prompt=True, tokenize=False
        )
        args = {"max_new_tokens": 16, "temperature": TEMPERATURE, "stop_token_ids": [eos], "seed": 100 + i, **kw}
        out.append(GenerationRequest(prompt_ids=tok.encode(text, add_special_tokens=False), **args))
    return out


def learner_logprobs(model, req: GenerationRequest, token_ids: list[int]) -> torch.Tensor:
    """log p(token | prefix) under ``model`` at the request's temperature, for each sampled token."""
    ids = torch.tensor([req.prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(req.prompt_ids) - 1 : -1].float() / req.temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(token_ids)[:, None]).squeeze(-1)


def max_logprob_gap(model, reqs, results) -> float:
    return max(
        float((learner_logprobs(model, q, r.token_ids) - torch.tensor(r.logprobs)).abs().max())
        for q, r in zip(reqs, results, strict=True)
    )


def documented_server_command() -> tuple[dict[str, str], list[str]]:
    """The environment and argv of the ``vllm serve`` command in docs/vllm.md, as written there."""
    import re
    import shlex
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "vllm.md").read_text()
    (block,) = [b for b in re.findall(r"```\n(.*?)```", doc, re.S) if "vllm.entrypoints.openai.api_server" in b]
    words = shlex.split(block.replace("\\\n", " "))
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S*", w))
    return env, [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]


def start_vllm_server(model_dir):
    """The `vllm serve` command of docs/vllm.md as written, from the repository root in a clean
    environment (its own variables, PATH and HOME), with this test's port and sizes appended, and its
    threads bound to the cores this process may use less one for vLLM's scheduler. ``.venv/bin/python`` is this interpreter where
    the checkout has no .venv of its own (a worktree). Returns the process and its base URL once
    /health answers."""
    import os
    import socket
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import httpx

    root = Path(__file__).parents[3]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc_env, argv = documented_server_command()
    assert argv[:3] == [".venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], argv
    python = argv[0] if (root / argv[0]).exists() else sys.executable
    cmd = [python, *argv[1:], "--port", str(port), "--enforce-eager", "--max-model-len", "512"]
    cmd[cmd.index("MODEL_DIR")] = str(model_dir)
    from agent_rl.rollout.backends.engine_resources import default_cores

    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), **doc_env}
    env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in default_cores())
    log = tempfile.TemporaryFile("w+")  # a pipe nobody reads would fill up and stall the server
    # its own session: killing it kills its engine-core process too
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"vllm serve exited with {proc.returncode}: {log.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.TransportError:
            pass
        time.sleep(1)
    stop_vllm_server(proc)
    pytest.fail("vllm serve did not come up within 300 s")


def stop_vllm_server(proc, sig: int | None = None) -> None:
    """Signal the server's whole process group (``SIGKILL``: a crash; default ``SIGTERM``) and reap it."""
    import os
    import signal
    import subprocess

    try:
        os.killpg(proc.pid, signal.SIGTERM if sig is None else sig)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class TinyServer:
    """`vllm serve` of the tiny model (start_vllm_server), the vLLM group's one server (the session's
    ``vllm_server``, tests/conftest.py: ~50 s to start on 2 cores): started at the first ``url()``, and
    again at the next one after a test killed it (test_a_killed_vllm_serve_ends_its_episodes_as_infra_error,
    the last test to use it in the group's order). A test that needs other weights pushes them."""

    def __init__(self, model_dir):
        self.model_dir, self.proc, self._url = model_dir, None, None
        self.pushed = False  # a test pushed weights since the server started

    def url(self, own_weights: bool = False) -> str:
        """Its base URL; ``own_weights``: it serves the checkpoint's weights (pushed back if a test
        pushed others)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc, self._url = start_vllm_server(self.model_dir)
            self.pushed = False
        if own_weights and self.pushed:
            self.push_weights(load_model(str(self.model_dir), "float32", "cpu"), 0)
            self.pushed = False
        return self._url

    def push_weights(self, model, version: int, fingerprint: str | None = None) -> None:
        """``model``'s weights into the server (weight_sync=vllm, the dev-mode routes)."""
        cfg = load_config(None, [
            "rollout.backend.name=openai", f"rollout.backend.base_url={self.url()}", "rollout.backend.weight_sync=vllm",
            f"model.path={self.model_dir}", f"rollout.backend.model={self.model_dir}",
        ])  # fmt: skip
        backend = BACKENDS(cfg.rollout.backend)(cfg.rollout.backend, cfg.model, model=model)
        backend.update_weights(None, version, fingerprint)
        self.pushed = True

    def stop(self) -> None:
        if self.proc is not None:
            stop_vllm_server(self.proc)

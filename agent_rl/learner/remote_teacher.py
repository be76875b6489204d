"""A teacher behind an OpenAI-compatible server: the logprobs of given token ids, scored remotely.

``teacher_path: "openai:http://host:port/v1"`` (or ``...#<model>`` when the server serves several)
makes the server that ``vllm serve`` or ``agent-rl serve`` runs score the batch's rows. One
``POST /v1/completions`` per chunk of rows, with the rows as token-id prompts and vLLM's
``prompt_logprobs: k``; the answer's ``choices[i].prompt_logprobs[j]`` maps token ids (as strings)
to ``{"logprob", "rank"}`` for the prompt token at j and the k most likely ones (None at j = 0).
The token generated after the prompt (``max_tokens: 1``, vLLM needs one) is ignored.

Refused at start, with one line each: a server without ``/v1/completions`` or that gives no prompt
logprobs for token ids (a chat-only API), a server whose tokenizer is not the student's (the
student's encoding of a probe text that covers its vocabulary must equal the server's
``POST /tokenize``), and a rollout temperature other than 1 (vLLM computes prompt logprobs from the
raw logits). ``OPENAI_API_KEY``, when set, is sent as the bearer token.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import torch

SCHEME = "openai:"
PROBE_TOKENS = 2048  # vocabulary ids the tokenizer probe covers (all of a smaller vocabulary)


def parse_remote(path: str) -> tuple[str, str | None]:
    """``openai:URL[#MODEL]`` -> (base URL ending in /v1, model or None)."""
    url, _, model = path[len(SCHEME) :].partition("#")
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"teacher {path}: expected openai:http://host:port/v1[#model]")
    return url, model or None


class RemoteTeacher:
    """A frozen teacher served over HTTP; ``score`` has the signature of ``compute_teacher_logprobs``
    minus the model."""

    def __init__(self, path: str, student_tokenizer: Any, rows_per_request: int = 32, timeout_s: float = 300.0):

        self.path = path
        self.url, model = parse_remote(path)
        self.root = self.url.removesuffix("/v1")
        self.rows_per_request = rows_per_request
        key = os.environ.get("OPENAI_API_KEY")
        self.client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"} if key else {})
        self.model = model or self._only_model()
        self.check(student_tokenizer)

    # -- start-up checks -------------------------------------------------------------------------
    def _post(self, url: str, body: dict) -> Any:

        try:
            return self.client.post(url, json=body)
        except httpx.HTTPError as e:
            raise ValueError(f"teacher {self.path}: cannot reach {url}: {e}") from None

    def _only_model(self) -> str:

        try:
            r = self.client.get(f"{self.url}/models")
            names = [m["id"] for m in r.json()["data"]] if r.status_code == 200 else []
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"teacher {self.path}: cannot list the served models at {self.url}/models: {e}") from None
        if len(names) != 1:
            raise ValueError(f"teacher {self.path}: the server serves {names}; name one as {SCHEME}{self.url}#<model>")
        return names[0]

    def check(self, student: Any) -> None:
        """Refuse a server that cannot score token ids (a chat-only API), or whose tokenizer is not the student's."""
        vocab = student.get_vocab()
        ids = sorted(vocab.values())
        if len(ids) > PROBE_TOKENS:  # a spread of the vocabulary, plus every special token
            step = len(ids) / PROBE_TOKENS
            ids = sorted({ids[int(i * step)] for i in range(PROBE_TOKENS)} | set(student.all_special_ids))
        text = student.decode(ids)
        expected = student.encode(text, add_special_tokens=False)
        refused = self._probe(expected[:8])
        r = self._post(f"{self.root}/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        if r.status_code in (404, 405):
            raise ValueError(
                f"teacher {self.path}: the server has no {self.root}/tokenize, so its tokenizer cannot be checked "
                f"against the student's (vllm serve and agent-rl serve have one)"
            )
        got = r.json().get("tokens") if r.status_code == 200 else None
        if got != expected:
            got = got or []
            at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            raise ValueError(
                f"teacher {self.path}: its tokenizer differs from the student's (a probe text of {len(expected)} student "
                f"tokens: the server's ids differ from token {at} on); a teacher must share the student's tokenizer"
            )
        if refused:
            raise ValueError(refused)

    def _probe(self, prompt: list[int]) -> str | None:
        """One scoring request. A chat-only API (no /v1/completions, or no prompt logprobs of token ids)
        is refused here; another refusal is returned, to name after the tokenizer check."""
        r = self._post(f"{self.url}/completions", self._request([prompt], 1))
        need = f"teacher {self.path}: a teacher must return the logprobs of given token ids (prompt_logprobs on /v1/completions)"
        if r.status_code in (404, 405):
            raise ValueError(f"{need}; the server has no /v1/completions (a chat-only API)")
        if r.status_code != 200:
            return f"{need}; the server refused it: HTTP {r.status_code} {r.text[:200]}"
        logprobs = (r.json().get("choices") or [{}])[0].get("prompt_logprobs")
        if not isinstance(logprobs, list) or len(logprobs) != len(prompt):
            raise ValueError(f"{need}; its answer holds no prompt_logprobs per prompt token (a chat-only API)")
        return None

    def _request(self, prompts: list[list[int]], k: int) -> dict:
        return {"model": self.model, "prompt": prompts, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": k}

    # -- scoring ---------------------------------------------------------------------------------
    def prompt_logprobs(self, rows: list[list[int]], k: int) -> list[list[dict | None]]:
        """The server's ``prompt_logprobs`` of each row (chunks of ``rows_per_request`` rows)."""
        out: list[list[dict | None]] = []
        for i in range(0, len(rows), self.rows_per_request):
            chunk = rows[i : i + self.rows_per_request]
            r = self._post(f"{self.url}/completions", self._request(chunk, k))
            if r.status_code != 200:
                raise RuntimeError(f"teacher {self.path}: scoring failed: HTTP {r.status_code} {r.text[:300]}")
            choices = sorted(r.json()["choices"], key=lambda c: c["index"])
            out.extend(c["prompt_logprobs"] for c in choices)
        return out

    @torch.no_grad()
    def score(
        self,
        input_ids_BS: torch.Tensor,
        attention_mask_BS: torch.Tensor,
        positions_BT: torch.Tensor,
        temperature: float = 1.0,
        topk: int = 0,
    ) -> Any:
        """As ``compute_teacher_logprobs``: out[b, t] = log q(token at positions_BT[b, t]) (0 where < 1);
        with ``topk`` also the ids and logprobs of the teacher's top-k at each position."""
        if temperature != 1.0:
            raise ValueError(
                f"teacher {self.path}: a server's prompt logprobs are at temperature 1; got rollout.temperature={temperature}"
            )
        B, T = positions_BT.shape
        lengths = attention_mask_BS.sum(-1).tolist()
        rows = [input_ids_BS[b, : int(n)].tolist() for b, n in enumerate(lengths)]
        served = self.prompt_logprobs(rows, topk)
        logp_BT = torch.zeros(B, T, dtype=torch.float32)
        ids_BTK = torch.zeros(B, T, max(topk, 1), dtype=torch.long)
        top_BTK = torch.zeros(B, T, max(topk, 1), dtype=torch.float32)
        for b, t in (positions_BT >= 1).nonzero().tolist():
            j = int(positions_BT[b, t])
            entry = served[b][j]
            logp_BT[b, t] = entry[str(rows[b][j])]["logprob"]
            if topk:
                best = sorted(entry.items(), key=lambda kv: (kv[1]["rank"], -kv[1]["logprob"]))[:topk]
                if len(best) < topk:
                    raise RuntimeError(
                        f"teacher {self.path}: asked for the top-{topk} of each position, got {len(best)}"
                    )
                ids_BTK[b, t, : len(best)] = torch.tensor([int(i) for i, _ in best])
                top_BTK[b, t, : len(best)] = torch.tensor([v["logprob"] for _, v in best])
        device = positions_BT.device
        if not topk:
            return logp_BT.to(device)
        return logp_BT.to(device), ids_BTK.to(device), top_BTK.to(device)

    # -- the teacher protocol --------------------------------------------------------------------
    def update(self, model: torch.nn.Module) -> None:
        """A served teacher does not follow the student."""

    def state_dict(self) -> dict[str, Any]:
        return {"path": self.path}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("path") != self.path:
            raise ValueError(f"the checkpoint's teacher is {state.get('path')}, this run's is {self.path}")

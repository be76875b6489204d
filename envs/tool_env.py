"""The base of tool environments: a task, tools in a sandbox, a final answer.

A subclass declares its ``tools`` (``tools.base.Tool`` classes) and ``splits`` and writes two hooks:

* ``new_task(seed, split, options)`` (the task hook): this episode's task, as the first messages
  and what ``info`` says about it (``TaskStart``);
* ``answer(text, parsed)`` (the answer hook): the final answer's ``TurnResult``, or None when the
  action gives none. The default reads ``<answer>...</answer>`` (with no tool call in the same
  action) and scores it with ``score(answer, text)``, so an ``<answer>`` env writes only ``score``.

The base does the rest, the same way for every env:

* parsing: one ``tool_format`` (``tools.formats``, default ``hermes``) reads tool calls and answers,
  and writes tool results the way that family's template expects them (``tool_result``);
* tools: their JSON schemas (and those of the ``mcp_servers``' tools) go out in ``info["tools"]``;
  a call runs the tool of its name on this episode's sandbox, started on first use with
  ``sandbox_backend`` / ``tool_timeout_s`` / ``sandbox_options`` and closed at the next reset
  (each episode starts with an empty work directory) and at ``close()``;
* errors: an unknown tool, bad arguments, input the sandbox refuses, a malformed call or an action
  with neither a call nor an answer give an error observation and ``action_valid=False``, never an
  exception; an ``InfraError`` (the sandbox, not the agent, failed) propagates, so the engine ends
  the episode as INFRA_ERROR, unscored;
* turns: ``take_turn`` runs the answer hook, else every tool call of the turn in order (at most
  ``max_calls_per_turn``; one result message each, in the same order), else the error; the episode
  is truncated after ``max_turns`` turns without a final answer;
* ``state_key``: a hash of everything the agent has observed (same observations, same key);
* splits: ``split`` (constructor) and ``options["split"]`` (reset) are checked against ``splits``.

Optional hooks, for envs that differ: ``take_turn`` (several calls per turn, a check after each
turn), ``step_info`` (the info keys of every step), ``make_tool`` (how a tool is built).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent_rl.core.errors import InfraError
from envs.async_env import AsyncTextEnv
from envs.spaces import AnyText, Messages
from envs.splits import SPLITS, check_split
from sandbox import ExecStatus, make_sandbox
from tools.base import Tool, ToolCall, ToolError, tool_schema
from tools.formats import ToolFormat, get_format
from tools.parsers import ParsedAction


@dataclass
class TaskStart:
    """What the task hook returns: the episode's first observation and its task."""

    messages: list[dict]  # the first observation: system prompt and the task
    task_id: str
    task: Any  # info["task"]; reset(options={"task": it}) replays the task
    teacher_context: str | None = None  # a privileged view for self-distillation teachers, never shown


@dataclass
class TurnResult:
    """What a turn gives: the observation, its reward, whether it ended the episode."""

    messages: list[dict] = field(default_factory=list)  # tool outputs, an error or a verdict
    reward: float = 0.0
    done: bool = False  # terminated: the final answer ended the episode
    valid: bool = True  # info["action_valid"]
    info: dict[str, Any] = field(default_factory=dict)  # the turn's own info keys (correct, passed, ...)


class ToolEnv(AsyncTextEnv):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    # its coroutines only await the sandbox (whose I/O runs on the sandbox pool's own loop) and do
    # short work between: the rollout engine runs them on its loop, so batching stays deterministic.
    # A subclass whose hooks block (slow synchronous grading, network calls) sets it to False and
    # gets an event loop of its own per env
    loop_safe: ClassVar[bool] = True
    tools: tuple[type[Tool], ...] = ()  # an instance may narrow them (e.g. no tools at all)
    splits: ClassVar[tuple[str, ...]] = SPLITS
    fenced_code: ClassVar[bool] = True  # a ```python block with no tool call calls the python tool
    max_calls_per_turn: ClassVar[int] = 8  # parallel calls run in one turn; the rest are refused
    no_action: ClassVar[str] = "no tool call and no <answer>...</answer>"  # the error without either
    action_hint: ClassVar[str] = "Call a tool or reply <answer>...</answer>."  # ends every error

    def __init__(
        self,
        *,
        split: str = "train",
        max_turns: int = 4,
        sandbox_backend: str = "auto",
        tool_timeout_s: float = 5.0,
        max_action_chars: int = 4096,
        sandbox_options: dict[str, Any] | None = None,
        mcp_servers: list[dict] | None = None,
        tool_format: str = "hermes",
    ):
        self.split = check_split(split, self.splits)
        self.max_turns = max_turns
        self.sandbox_backend = sandbox_backend
        self.tool_timeout_s = tool_timeout_s
        self.sandbox_options = dict(sandbox_options or {})  # backend options (memory_mb; docker: image, ...)
        self.mcp_servers = list(mcp_servers or [])  # extra tools from MCP servers (tools.mcp)
        self.format: ToolFormat = get_format(tool_format)  # how calls are read and results written
        self.action_space = AnyText(max_length=max_action_chars)
        self.observation_space = Messages()
        self._sandbox = None
        self._tools: dict[str, Tool] = {}  # name -> the tool on this episode's sandbox
        self._mcp = None
        self._turn: int | None = None  # turns taken this episode; None before the first reset
        self._seen: list[str] = []

    # -- the hooks ------------------------------------------------------------------------------
    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        """The task hook: the task of ``seed`` in ``split``; ``seed`` is None when
        ``options["task"]`` (an earlier ``info["task"]``) is to be replayed."""
        raise NotImplementedError

    async def answer(self, text: str, parsed: ParsedAction) -> TurnResult | None:
        """The answer hook: the turn of a final answer (``done=True``), or None when ``text`` has
        none. Default: ``<answer>X</answer>`` without a tool call, scored by ``score``."""
        if parsed.answer is None or parsed.tool_calls:
            return None
        reward, info = await self.score(parsed.answer, text)
        return TurnResult(reward=reward, done=True, info={"answered": True, **info})

    async def score(self, answer: str, text: str) -> tuple[float, dict[str, Any]]:
        """The reward of the final ``answer`` (``text``: the whole action) and extra info keys."""
        raise NotImplementedError

    def step_info(self, parsed: ParsedAction) -> dict[str, Any]:
        """The info keys of every step, before the turn's own: the calls run, answered."""
        calls = min(len(parsed.tool_calls), self.max_calls_per_turn) if self.tool_names else 0
        return {"tool_calls": calls, "answered": False}

    async def take_turn(self, text: str, parsed: ParsedAction) -> TurnResult:
        """A final answer, else every tool call in order (their results in the same order; the
        malformed ones reported after them), else an error observation."""
        turn = await self.answer(text, parsed)
        if turn is not None:
            return turn
        if not parsed.tool_calls or not self.tool_names:
            return self.invalid_action(parsed)
        turn = TurnResult()
        for call in parsed.tool_calls[: self.max_calls_per_turn]:
            content, ok = await self.call_tool(call)
            turn.messages.append(self.tool_result(call, content))
            turn.valid = turn.valid and ok
        problems = list(parsed.errors)
        if len(parsed.tool_calls) > self.max_calls_per_turn:
            problems.append(
                f"{len(parsed.tool_calls)} tool calls in one turn; only the first {self.max_calls_per_turn} ran"
            )
        if problems:
            turn.messages.append(self.error_message("; ".join(problems)))
            turn.valid = False
        return turn

    def make_tool(self, cls: type[Tool], sandbox: Any) -> Tool:
        """The tool ``cls`` on ``sandbox``, with ``tool_timeout_s`` when it takes a timeout."""
        if "timeout_s" in inspect.signature(cls).parameters:
            return cls(sandbox, timeout_s=self.tool_timeout_s)
        return cls(sandbox)

    # -- the episode ----------------------------------------------------------------------------
    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        await self._close_sandbox()  # a new episode starts with an empty work directory
        if "task" in options:
            task_seed, split = None, self.split
        else:
            task_seed = int(self.np_random.integers(2**31)) if seed is None else seed
            split = check_split(options.get("split", self.split), self.splits)
        start = await self.new_task(task_seed, split, options)
        self._turn = 0
        self._seen = [m["content"] for m in start.messages if m["role"] != "system"]
        info = {
            "tools": self.tool_schemas(),
            "task_id": start.task_id,
            "task": start.task,
            "state_key": self.state_key(),
        }
        if start.teacher_context is not None:
            info["teacher_context"] = start.teacher_context
        return start.messages, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.run_sync(self.areset(seed=seed, options=options))

    async def astep(self, action: str):
        if self._turn is None:
            raise RuntimeError("call reset() before step()")
        self._turn += 1
        text = action if isinstance(action, str) else str(action)
        parsed = self.format.parse(text, fenced_code=self.fenced_code)
        info = self.step_info(parsed)
        turn = await self.take_turn(text, parsed)
        self._seen += [m["content"] for m in turn.messages]
        truncated = not turn.done and self.final_turn
        info.update(turn.info)
        info.update(action_valid=turn.valid, state_key=self.state_key())
        return turn.messages, turn.reward, turn.done, truncated, info

    @property
    def final_turn(self) -> bool:
        """Whether this turn is the last of the budget (the episode ends after it)."""
        return self._turn is not None and self._turn >= self.max_turns

    def state_key(self) -> str:
        """A stable hash of everything the agent has observed this episode."""
        return hashlib.sha256("\x00".join(self._seen).encode()).hexdigest()[:16]

    def invalid_action(self, parsed: ParsedAction) -> TurnResult:
        """The error observation of an action without a usable call or answer."""
        return TurnResult([self.error_message("; ".join(parsed.errors) or self.no_action)], valid=False)

    def error_message(self, problem: str) -> dict[str, str]:
        """The observation message of an error in the agent's action."""
        return {"role": "user", "content": f"error: {problem}. {self.action_hint}"}

    def tool_result(self, call: ToolCall, content: str) -> dict[str, Any]:
        """The observation message of ``call``'s result, as the env's tool format writes it."""
        return self.format.render_result(call, content)

    # -- tools and the sandbox ------------------------------------------------------------------
    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools] + (self._mcp.names if self._mcp is not None else [])

    def tool_schemas(self) -> list[dict]:
        """``info["tools"]``: the declared tools', then the MCP servers' (started on first use)."""
        if self.mcp_servers and self._mcp is None:
            from tools.mcp import McpToolbox

            self._mcp = McpToolbox.from_config(self.mcp_servers)
        return [tool_schema(t) for t in self.tools] + (self._mcp.schemas() if self._mcp is not None else [])

    async def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        """The output of ``call`` and True, or ``error: ...`` and False. ``InfraError`` propagates."""
        run = self._runner(call.name)  # starts the sandbox outside the try: a bad backend is no observation
        try:
            if run is None:
                raise ToolError(f"unknown tool '{call.name}'; available: {', '.join(self.tool_names)}")
            return await run(call.arguments), True
        except (ToolError, ValueError) as e:  # ValueError: input the sandbox refuses (NUL bytes, > 120 kB)
            return f"error: {e}", False

    def _runner(self, name: str) -> Callable[[dict], Awaitable[str]] | None:
        if self._mcp is not None and name in self._mcp.names:
            return functools.partial(self._mcp.call, name)
        if any(t.name == name and not t.final for t in self.tools):
            self.sandbox()
            return self._tools[name]
        return None

    def sandbox(self) -> Any:
        """This episode's sandbox (and its tools), started on first use."""
        if self._sandbox is None:
            try:
                sandbox = make_sandbox(
                    backend=self.sandbox_backend, timeout_s=self.tool_timeout_s, **self.sandbox_options
                )
            except (OSError, RuntimeError) as e:  # no usable backend here: infrastructure, not the agent
                raise InfraError(f"cannot start a '{self.sandbox_backend}' sandbox: {e}") from e
            self._sandbox = sandbox
            self._tools = {t.name: self.make_tool(t, sandbox) for t in self.tools if not t.final}
        return self._sandbox

    async def sandbox_exec(self, **kwargs: Any) -> Any:
        """``exec`` in this episode's sandbox (an ``ExecResult``); a failure of the sandbox itself
        raises ``InfraError``."""

        res = await self.sandbox().exec(**kwargs)
        if res.status == ExecStatus.INFRA_ERROR:
            raise InfraError(res.error or res.stderr or "sandbox infrastructure failure")
        return res

    async def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox, self._tools = self._sandbox, None, {}
            await sandbox.close()

    async def aclose_resources(self) -> None:
        if self._mcp is not None:
            mcp, self._mcp = self._mcp, None
            mcp.close()
        await self._close_sandbox()

"""``agent_rl/BFCL-MultiTurn-v0``: BFCL v4's multi-turn categories against its stateful APIs.

An episode is one BFCL task: a conversation of user turns over a fresh set of the task's API
instances (file system, trading bot, travel booking, vehicle control, messaging, posting, tickets,
math; ``envs.bfcl.apis``). The task's functions are the agent's tools (``info["tools"]``), written in
the env's ``tool_format``. The instances live in the env's worker process (``envs.bfcl.worker``): a
call past ``call_timeout_s`` ends the episode unsolved and the worker is killed (the next reset
starts another); a worker that dies on its own raises ``InfraError`` (unscored, never 0).

Turn protocol (also in the system prompt):

* an action with tool calls runs them, in order, on this episode's instances and answers with their
  results; the user turn goes on (at most ``max_steps_per_turn`` actions, BFCL's 20: past it the
  episode is truncated, unsolved, as BFCL force-quits);
* an action with no call and an ``<answer>...</answer>`` (the reply to the user: a summary, or a
  question when a parameter is missing, or a refusal when no function fits) ends the user turn;
  the next user turn is the observation, in the dataset's order;
* ``multi_turn_miss_func``: some functions are held out; at the turn BFCL names they arrive as a
  user message that lists their schemas ("New functions are available ..."). A call to a function
  not offered yet, or to no function at all, is an error observation;
* ``multi_turn_miss_param``: a turn lacks a parameter; the ground truth has no call there, so the
  agent should ask (the next user turn gives the value);
* calls to unknown functions are error observations (``action_valid=False``) and count towards
  the turn's steps; so are malformed calls and actions with neither a call nor an answer under
  ``scoring="project"`` (under ``"official"``, the default, such an action ends the user turn).

``scoring="official"`` (the default) plays by BFCL's harness where the project's rules were
stricter: an action from which no call decodes (plain text without ``<answer>``, or a message
holding a malformed call, which BFCL drops whole) ends the user turn, as any ``<answer>`` does; and a
held-out function of ``multi_turn_miss_func`` runs when called before its turn (BFCL hides its doc
but executes it). ``scoring="project"`` keeps the rules before: a turn ends only at ``<answer>``,
other actions without a call are error observations, the well-formed calls of a message that also
holds a malformed one run, and a function not offered yet is refused.

Reward (BFCL's multi-turn check, written here from its definition): after every user turn whose
ground truth has calls, the ground truth's calls run on a second fresh set of instances, and

1. the agent must have made at least one call in that turn;
2. every API instance must have the same public state (``vars`` without ``_`` names) as the
   ground truth's;
3. the results of the turn's ground-truth calls must all appear (as a multiset, any order) among
   the results of the agent's calls so far, in any turn.

The first failing turn ends the episode with reward 0 (``partial_credit=True``: the fraction of
user turns passed before it); passing every turn gives 1. Turns whose ground truth is empty (a
missing function or parameter) are not checked themselves, as in BFCL 2026.3.23, whose evaluation
does not apply its irrelevance checker; calls made there still change the state checked later.
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import Any, ClassVar

from agent_rl.core.errors import InfraError
from envs.bfcl.apis import CallError
from envs.bfcl.data import (
    MULTI_TURN_CATEGORIES,
    MultiTurnTask,
    check_categories,
    function_docs,
    multi_turn_tasks,
    parse_call,
    select,
    session_of,
    tool_schema,
)
from envs.bfcl.env_base import BfclEnv
from envs.bfcl.worker import SERVICE_TIMEOUT_S, ApiWorker, WorkerTimeout
from envs.tool_env import TaskStart, TurnResult
from tools.base import ToolCall
from tools.parsers import ParsedAction

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests by calling the functions you are given. "
    "Call functions (several in one message if you like) and read their results; when the current "
    "request is done, or cannot be done with the functions you have, or needs information the user "
    "has not given, reply to the user with <answer>...</answer> and no function call. The user may "
    "then ask for more. Session {session}."
)
NEW_FUNCTIONS = "New functions are available: {schemas}\nPlease carry on with my earlier request."


def task_by_id() -> dict[str, MultiTurnTask]:
    return {t.task_id: t for t in multi_turn_tasks()}


class BfclMultiTurnEnv(BfclEnv):
    metadata: ClassVar[dict[str, Any]] = {
        **BfclEnv.metadata,
        "reward": "1 if the API states and call results match BFCL's ground truth after every user turn",
    }
    action_hint = "Call a function, or reply to the user with <answer>...</answer>."
    tokenizer_corpus = "envs.bfcl.policies:corpus_conversations"

    def __init__(
        self,
        split: str = "train",
        categories: str | list[str] | None = None,
        max_turns: int = 200,
        max_steps_per_turn: int = 20,
        partial_credit: bool = False,
        max_action_chars: int = 16384,
        tool_format: str = "hermes",
        call_timeout_s: float = 5.0,
        scoring: str = "official",
    ):
        super().__init__(split, max_turns, max_action_chars, tool_format, scoring)
        if not call_timeout_s > 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s!r}")
        self.call_timeout_s = call_timeout_s
        self.categories = check_categories(categories, MULTI_TURN_CATEGORIES)
        self.max_steps_per_turn = max_steps_per_turn
        self.partial_credit = partial_credit
        self._task: MultiTurnTask | None = None
        self._forced_quit = False
        self._timeout_failure = ""
        self._apis = ApiWorker()  # this env's API instances live in a worker process (envs.bfcl.worker)

    # -- the task -------------------------------------------------------------------------------
    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        if seed is None:
            task = options["task"]
            task_id = task["task_id"] if isinstance(task, dict) else task
            if task_id not in task_by_id():
                raise ValueError(f"options.task: unknown BFCL multi-turn task {task_id!r}")
            self._task = task_by_id()[task_id]
        else:
            pool = select(multi_turn_tasks(), split, self.categories)
            if not pool:
                raise ValueError(
                    f"no BFCL multi-turn task in split {split!r} for categories {', '.join(self.categories)}"
                )
            self._task = pool[seed % len(pool)]
        task = self._task
        await asyncio.to_thread(self._apis.open, task)  # fresh instances, never shared
        held_out = {name for names in task.missed.values() for name in names}
        self._docs = {d["name"]: d for c in task.classes for d in function_docs(c)}
        self._offered = [name for name in self._docs if name not in held_out]
        self._user_turn = 0
        self._steps = 0  # actions in this user turn
        self._called = False  # a call was made in this user turn
        self._results: list[str] = []  # every call result of the episode (BFCL's response check)
        self._forced_quit = False
        self._timeout_failure = ""
        messages = [{"role": "system", "content": SYSTEM_PROMPT.format(session=session_of(task.task_id))}]
        messages += self._turn_messages(0)
        return TaskStart(
            messages,
            task.task_id,
            task.to_dict(),
            teacher_context="Ground-truth calls per turn:\n" + json.dumps(task.ground_truth),
        )

    def _turn_messages(self, index: int) -> list[dict]:
        """The user messages of turn ``index``; a held-out function's turn lists the new schemas."""
        names = self._task.missed.get(index)
        if names:
            self._offered += [n for n in names if n not in self._offered]
            schemas = json.dumps([tool_schema(self._docs[n]) for n in names])
            return [{"role": "user", "content": NEW_FUNCTIONS.format(schemas=schemas)}]
        return [dict(m) for m in self._task.turns[index]]

    # -- tools ----------------------------------------------------------------------------------
    @property
    def tool_names(self) -> list[str]:
        return list(self._offered) if self._task is not None else []

    def tool_schemas(self) -> list[dict]:
        return [tool_schema(self._docs[n]) for n in self._offered] if self._task is not None else []

    async def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        callable_now = self._docs if self.scoring == "official" else self._offered  # official: held-out ones too
        if call.name not in callable_now:
            offered = ", ".join(self._offered)
            return f"error: unknown function '{call.name}'; available: {offered}", False
        # in the worker process (and in a thread here, so no other episode waits); every argument that
        # controls work is bounded (apis.BOUNDS), and a call that still runs past call_timeout_s is
        # stopped: the worker is killed, the episode ends unsolved, the next reset starts a new one
        try:
            result = await asyncio.to_thread(
                self._apis.call, "model", call.name, call.arguments, timeout_s=self.call_timeout_s
            )
            return result, True
        except CallError as e:
            return f"error: {e}", False
        except WorkerTimeout:
            self._forced_quit = True
            self._timeout_failure = f"turn {self._user_turn}: '{call.name}' ran longer than {self.call_timeout_s} s"
            return f"error: '{call.name}' ran longer than {self.call_timeout_s} s; stopped", False

    # -- a turn ---------------------------------------------------------------------------------
    @property
    def final_turn(self) -> bool:
        return self._forced_quit or super().final_turn

    def step_info(self, parsed: ParsedAction) -> dict[str, Any]:
        return {
            "tool_calls": min(len(parsed.tool_calls), self.max_calls_per_turn),
            "answered": False,
            "user_turn": self._user_turn,
        }

    async def take_turn(self, text: str, parsed: ParsedAction) -> TurnResult:
        self._steps += 1
        if self.scoring == "official" and (not parsed.tool_calls or parsed.errors):
            turn = await self._end_user_turn()  # BFCL: a message that decodes to no call is the reply
            turn.valid = parsed.answer is not None and not parsed.errors  # not the env's own protocol
            return turn
        if parsed.tool_calls:
            self._called = True
            turn = TurnResult()
            for call in parsed.tool_calls[: self.max_calls_per_turn]:
                content, ok = await self.call_tool(call)
                self._results.append(content)
                turn.messages.append(self.tool_result(call, content))
                turn.valid = turn.valid and ok
                if self._forced_quit:  # stopped past its limit: the calls after it never run
                    break
            problems = list(parsed.errors)
            if len(parsed.tool_calls) > self.max_calls_per_turn:
                problems.append(
                    f"{len(parsed.tool_calls)} calls in one message; only the first {self.max_calls_per_turn} ran"
                )
            if problems:
                turn.messages.append(self.error_message("; ".join(problems)))
                turn.valid = False
        elif parsed.answer is not None:
            return await self._end_user_turn()
        else:
            turn = self.invalid_action(parsed)
        if self._timeout_failure:
            turn.info["failure"] = self._timeout_failure
        elif self._steps >= self.max_steps_per_turn:  # BFCL force-quits: the task counts as failed
            self._forced_quit = True
            turn.info["failure"] = f"turn {self._user_turn}: {self.max_steps_per_turn} actions without a reply"
        return turn

    async def _end_user_turn(self) -> TurnResult:
        task, index = self._task, self._user_turn
        failure = await self._check_turn(index)
        n_turns = len(task.turns)
        if failure is not None:
            reward = index / n_turns if self.partial_credit else 0.0
            return TurnResult(
                reward=reward,
                done=True,
                info={"answered": True, "passed": False, "failure": failure, "turns_passed": index},
            )
        self._user_turn, self._steps, self._called = index + 1, 0, False
        if self._user_turn == n_turns:
            return TurnResult(reward=1.0, done=True, info={"answered": True, "passed": True, "turns_passed": n_turns})
        return TurnResult(self._turn_messages(self._user_turn), info={"answered": True})

    async def _check_turn(self, index: int) -> str | None:
        """Run the ground truth of turn ``index`` and compare; None when the turn passes, else why not."""
        truth_results = []
        for text in self._task.ground_truth[index]:
            name, args, kwargs = parse_call(text)
            try:
                truth_results.append(
                    await asyncio.to_thread(self._apis.call, "truth", name, kwargs, args, timeout_s=SERVICE_TIMEOUT_S)
                )
            except CallError as e:  # the data names a function its classes lack: the task is broken
                raise RuntimeError(f"{self._task.task_id}: ground truth {text!r}: {e}") from None
            except WorkerTimeout as e:  # the ground truth's calls take milliseconds: the machine failed
                raise InfraError(f"{self._task.task_id}: ground truth {text!r}: {e}") from None
        if not self._task.ground_truth[index]:
            return None
        if not self._called:
            return f"turn {index}: no function call, the ground truth has {len(truth_results)}"
        differences = await asyncio.to_thread(self._apis.differences)
        if differences:
            return f"turn {index}: state differs from the ground truth's in {', '.join(differences)}"
        missing = collections.Counter(truth_results) - collections.Counter(self._results)
        if missing:
            return f"turn {index}: {sum(missing.values())} ground-truth result(s) never returned to the agent"
        return None

    async def aclose_resources(self) -> None:
        await super().aclose_resources()
        self._apis.close()  # the worker process is killed and reaped

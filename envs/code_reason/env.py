"""``agent_rl/CodeReason-v0``: Absolute Zero's code-reasoning tasks, proposed and solved by one policy
(Zhao et al. 2025, "Absolute Zero: Reinforced Self-play Reasoning with Zero Data", arXiv 2505.03335).

Three task types over a triplet (program p, input i, output o = p(i)): deduction (p, i -> o),
abduction (p, o -> an i' with p(i') = o) and induction (a message and half of n pairs -> a program
reproducing the other half). Each has two modes (``tasks.py`` for the task dicts and prompts):

- **propose**: the policy writes a new task, conditioned on K reference triplets (the paper's
  K = 6); the proposal is validated in the sandbox (``execution.validate``: it parses, uses no
  forbidden module, runs, and two runs agree). A valid one ends the episode with
  ``info["proposed_task"]``, a solve task (the filter ``absolute_zero`` queues its solvers and
  replaces this row's reward by r_propose); its reward here is 0.
- **solve**: the answer is checked as the paper does: deduction by value equality with o,
  abduction by running p on the answered input (p(i') == o), induction by running the answered
  program on the held-out inputs (every output equal).

Rewards (the paper's eq. 6): 1 for a correct solution; -0.5 for a well-formed but wrong answer
or an invalid proposal; -1 for a format error (the answer's blocks are missing, or it is not a
Python literal where one is asked). An action without ``<answer>`` is an error observation (reward
0, ``action_valid=False``); on the last turn it ends the episode with the format penalty -1. A
sandbox infrastructure failure raises ``InfraError`` (INFRA_ERROR, never a reward).

Which mode a seeded reset plays comes from the seed (``propose_share``; solve resets draw seed
triplets, deduction or abduction). In training, the filter ``absolute_zero`` issues the episodes
instead, through the task sampler: propose tasks with references from its task buffer of
validated proposals, and solve tasks drawn from that buffer (``options["task"]``).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any, ClassVar

from envs.code_reason.execution import (
    arguments_ok,
    literal,
    run_program,
    safety_problem,
    same_value,
    validate,
)
from envs.code_reason.tasks import (
    ROLES,
    SEED_TRIPLETS,
    SYSTEM_PROMPT,
    TASK_TYPES,
    blocks,
    prompt,
    seed_references,
)
from envs.tool_env import TaskStart, ToolEnv, TurnResult
from tools.parsers import ParsedAction


class CodeReasonEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("answer",),  # a text action: <answer>...</answer>, no JSON tools
        "reward": "solve: 1 correct, -0.5 wrong, -1 format error; propose: 0 valid (r_propose in training), -0.5 invalid, -1 format error",
    }
    tools = ()
    self_play_tasks: ClassVar[bool] = True  # the filter absolute_zero issues its episodes (options["task"])
    fenced_code = False  # a ```python block is part of an answer, never a tool call
    no_action = "no <answer>...</answer>"
    action_hint = "Reply with your final answer inside <answer>...</answer>."

    def __init__(
        self,
        split: str = "train",
        max_turns: int = 2,
        propose_share: float = 0.5,
        references: int = 6,
        induction_inputs: int = 10,
        wrong_reward: float = -0.5,
        format_reward: float = -1.0,
        sandbox_backend: str = "auto",
        timeout_s: float = 5.0,
        memory_mb: int = 256,
        max_action_chars: int = 8192,
        tool_format: str = "hermes",
    ):
        """``max_turns``: 2 gives one retry after an action without ``<answer>`` (the paper's
        single response is ``max_turns=1``); ``propose_share``: the share of seeded resets that
        propose; ``references``: K triplets shown to a proposer (paper: 6); ``induction_inputs``:
        the inputs an induction proposer is asked for (paper: 10; at least 2 are needed)."""
        if not 0.0 <= propose_share <= 1.0:
            raise ValueError(f"propose_share={propose_share}: must be in [0, 1]")
        super().__init__(
            split=split,
            max_turns=max_turns,
            sandbox_backend=sandbox_backend,
            tool_timeout_s=timeout_s,
            max_action_chars=max_action_chars,
            sandbox_options={"memory_mb": memory_mb},
            tool_format=tool_format,
        )
        self.propose_share = propose_share
        self.references = references
        self.induction_inputs = induction_inputs
        self.wrong_reward = wrong_reward
        self.format_reward = format_reward
        self.timeout_s = timeout_s
        self._task: dict[str, Any] = {}

    # -- tasks ------------------------------------------------------------------------------------
    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        task = check_task(options["task"]) if seed is None else self.seeded_task(seed)
        if task["role"] == "propose" and not task.get("references"):  # an empty buffer: the seed set
            task["references"] = seed_references(task["type"], self.references, 0)
        if task["role"] == "propose" and task["type"] == "induction" and not task.get("program"):
            task["program"] = task["references"][0]["program"]
        self._task = task
        digest = hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:12]
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt(task, self.induction_inputs)},
        ]
        return TaskStart(messages, f"{task['role']}-{task['type']}-{digest}", task)

    def seeded_task(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        if rng.random() < self.propose_share:
            kind = TASK_TYPES[rng.randrange(3)]
            return {"role": "propose", "type": kind, "references": seed_references(kind, self.references, seed)}
        return {"role": "solve", "type": ("deduction", "abduction")[rng.randrange(2)], **rng.choice(SEED_TRIPLETS)}

    # -- turns ------------------------------------------------------------------------------------
    async def take_turn(self, text: str, parsed: ParsedAction) -> TurnResult:
        turn = await super().take_turn(text, parsed)
        if not turn.done and self.final_turn:  # the budget ends without an answer: a format error
            turn.reward, turn.info = self.format_reward, {**turn.info, "format_error": True}
        return turn

    async def answer(self, text: str, parsed: ParsedAction) -> TurnResult | None:
        if parsed.answer is None or parsed.tool_calls:
            return None
        check = self.propose if self._task["role"] == "propose" else self.solve
        reward, info = await check(parsed.answer)
        return TurnResult(reward=reward, done=True, info={"answered": True, **info})

    def _format_error(self, why: str) -> tuple[float, dict[str, Any]]:
        return self.format_reward, {"format_error": True, "reason": why}

    async def solve(self, answer: str) -> tuple[float, dict[str, Any]]:
        """1 when the answer is right, ``wrong_reward`` when wrong, ``format_reward`` when malformed."""
        t, run = self._task, self.sandbox_exec
        if t["type"] == "deduction":
            if not literal(answer)[0]:
                return self._format_error("the answer is not a Python literal")
            correct = same_value(answer, t["output"])
        elif t["type"] == "abduction":
            if not arguments_ok(answer):
                return self._format_error("the answer is not a list of literal arguments")
            out = (await run_program(run, t["program"], [answer.strip()], self.timeout_s)).outputs[0]
            correct = out is not None and same_value(out, t["output"])
        else:
            code = (blocks(answer).get("python") or [answer])[-1]
            problem = safety_problem(code)
            if problem is not None and (problem.startswith("syntax error") or "defines no function" in problem):
                return self._format_error(problem)
            hidden = list(zip(t["inputs"][t["visible"] :], t["outputs"][t["visible"] :], strict=True))
            outs = [] if problem else (await run_program(run, code, [i for i, _ in hidden], self.timeout_s)).outputs
            correct = problem is None and all(
                o is not None and same_value(o, gold) for o, (_, gold) in zip(outs, hidden, strict=True)
            )
        return (1.0 if correct else self.wrong_reward), {"correct": correct, "format_error": False}

    async def propose(self, answer: str) -> tuple[float, dict[str, Any]]:
        """0 and ``proposed_task`` for a valid proposal, ``wrong_reward`` and the reason for an invalid
        one, ``format_reward`` when its blocks are missing or malformed."""
        t, b = self._task, blocks(answer)
        inputs = [i.strip() for i in b.get("input", [])]
        if t["type"] == "induction":
            program = t["program"]
            inputs = list(dict.fromkeys(inputs))[: self.induction_inputs]
            if not b.get("message") or len(inputs) < 2:
                return self._format_error(
                    "an induction proposal needs a ```message block and at least 2 different ```input blocks"
                )
        else:
            if not b.get("python") or len(inputs) != 1:
                return self._format_error("a proposal needs one ```python block and one ```input block")
            program = b["python"][-1]
        if not all(arguments_ok(i) for i in inputs):
            return self._format_error("an input is not a list of literal arguments")
        outputs, reason = await validate(self.sandbox_exec, program, inputs, self.timeout_s)
        if outputs is None:
            return self.wrong_reward, {"valid_proposal": False, "format_error": False, "reason": reason}
        if t["type"] == "induction":
            task = {
                "role": "solve",
                "type": "induction",
                "program": program,
                "message": b["message"][-1].strip(),
                "inputs": inputs,
                "outputs": outputs,
                "visible": math.ceil(len(inputs) / 2),
            }
        else:
            task = {"role": "solve", "type": t["type"], "program": program, "input": inputs[0], "output": outputs[0]}
        return 0.0, {"valid_proposal": True, "format_error": False, "proposed_task": task}


def check_task(task: Any) -> dict[str, Any]:
    """A copy of ``options["task"]`` when it is a task dict this env plays, else ValueError."""
    if not isinstance(task, dict) or task.get("role") not in ROLES or task.get("type") not in TASK_TYPES:
        raise ValueError(f"options.task: a dict with role in {ROLES} and type in {TASK_TYPES}, got {str(task)[:200]}")
    need = (
        {
            "deduction": ("program", "input", "output"),
            "abduction": ("program", "input", "output"),
            "induction": ("program", "message", "inputs", "outputs", "visible"),
        }[task["type"]]
        if task["role"] == "solve"
        else ()
    )
    missing = [k for k in need if k not in task]
    if missing:
        raise ValueError(f"options.task: a {task['type']} solve task needs {', '.join(missing)}")
    return json.loads(json.dumps(task))

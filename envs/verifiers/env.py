"""``agent_rl/Verifiers-v0``: the tasks of a verifiers taskset, for ``agent.program:
envs.verifiers.program:run`` to play.

A verifiers taskset brings its own loop (its harness), tools and rubric, so this env is only its task
list: ``reset(seed)`` picks task ``seed % num_tasks`` and says so in ``info["task"]`` (the taskset's
id, the directory its package is imported from, the task's index, the harness), which the program
hands to ``vf-eval``. The policy's turns happen inside the program, through the capture proxy; the
reward is the taskset's (``agent.reward: envs.verifiers.program:reward``). Stepping this env directly
is no way to play it: every action is refused and ends the episode with reward 0.

A taskset scored by an LLM judge needs the judge's own endpoint: ``judge_base_url`` and ``judge_model``
(``judge_api_key_var``: the variable holding its key). Making the env reads which judges the taskset
declares (``envs/verifiers/judges.py``) and refuses, in one line, a taskset that needs a judge and has
none named, or one that does not import.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, ClassVar

import gymnasium as gym

from envs.spaces import AnyText, Messages
from envs.verifiers.judges import judge_overrides


class VerifiersTasksEnv(gym.Env):
    """The tasks of a verifiers taskset, played by ``envs.verifiers.program:run``."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("the taskset's own (its vf.Toolset, inside the program)",),
        "reward": "the taskset's weighted reward (agent.reward: envs.verifiers.program:reward)",
    }

    def __init__(
        self,
        *,
        taskset: str = "verifiers-sum",
        path: str = "examples/verifiers_sum",
        num_tasks: int = 8,
        harness: str = "null",
        timeout_s: float = 600.0,
        max_turns: int = 1,
        tool_format: str = "hermes",
        split: str = "train",
        judge_base_url: str | None = None,
        judge_model: str | None = None,
        judge_api_key_var: str | None = None,
    ):
        if num_tasks < 1:
            raise ValueError(f"env.options.num_tasks: {num_tasks}; a taskset has at least 1 task")
        self.judge = judge_overrides(taskset, path, judge_base_url, judge_model, judge_api_key_var)
        self.taskset, self.path, self.num_tasks, self.harness = taskset, path, num_tasks, harness
        self.timeout_s = timeout_s  # one vf-eval run (the program kills it past this)
        self.max_turns = max_turns
        self.tool_format, self.split = tool_format, split  # accepted for the run; the taskset decides
        self.action_space = AnyText(max_length=4096)
        self.observation_space = Messages()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = dict(options["task"])
        else:
            index = (int(self.np_random.integers(2**31)) if seed is None else seed) % self.num_tasks
            task = {"taskset": self.taskset, "path": self.path, "idx": index, "harness": self.harness}
            task |= {"timeout_s": self.timeout_s, "judge": copy.deepcopy(self.judge)}
        text = f"Task {task['idx']} of the verifiers taskset {task['taskset']}."
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        info = {"tools": [], "task_id": f"{task['taskset']}/{task['idx']}", "task": task, "state_key": key}
        return [{"role": "user", "content": text}], info

    def step(self, action: str):
        message = {
            "role": "user",
            "content": "error: a verifiers taskset is played by its own harness: "
            "set agent.program: envs.verifiers.program:run and agent.reward: envs.verifiers.program:reward.",
        }
        return [message], 0.0, True, False, {"action_valid": False, "state_key": "refused"}

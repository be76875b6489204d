"""``agent_rl/ScienceWorld-v0``: the 30 ScienceWorld tasks (Wang et al. 2022) through the
``scienceworld`` package, one command per turn.

The game of a seed: ``task`` (a name such as ``boil``, the paper's name, an id such as ``1-1``, or
an index into ``TASKS``) and ``simplifications`` (the upstream ``simplificationStr``: ``easy`` or a
comma-separated subset of ``teleportAction, openDoors, openContainers, selfWateringFlowerPots,
noElectricalAction``; empty by default, as upstream) are fixed per env; the split picks the
upstream variation list (``train``, ``val`` -> ``dev``, ``test``) and ``seed`` one variation of it
(``variations[seed % len]``). Rewards are the upstream score changes divided by 100, counted from
0 (see below), so the episode's
reward is the final score / 100: 1 exactly when the task is completed, negative when failed. The
points the upstream gives at reset (its own ``look around``; e.g. 8 with ``easy``) are paid with
the first step whose command the game accepts, so an invalid first action earns 0.

One JVM per env instance (``envs.jvm``), reused across episodes; a dead JVM raises ``InfraError``
and the next reset starts a new one. ``jvm_max_heap_mb`` (256; None: the JVM's default, a quarter
of the machine's memory) is its ``-Xmx``: with the default heap one JVM grew to 3.4 GB resident
over two boil gold episodes; with 256 MB the gold paths of all 30 tasks ran (one test variation
each) at 361 MB resident at most, and 128 MB ran out in boil's gold-path search (an ``InfraError``).
``state_key`` hashes the task, the room (the ``look around`` text), the inventory and the score: the
same state has one key whatever the path to it (the anchor state of GiGPO and G2PO).
"""

from __future__ import annotations

from typing import Any

from envs.jvm import JvmSimulator, route_java_options
from envs.text_games import GameStart, GameStep, TextGameEnv, remember_gold, require

FOLDS = {"train": "train", "val": "dev", "test": "test"}
INVALID_REPLY = "No known action matches that input."


def task_names() -> list[str]:
    """The upstream's 30 task names, in its task-id order (``1-1`` boil first)."""
    return list(require("scienceworld.constants", "scienceworld>=1.2.3,<1.3").ID2TASK.values())


def task_name(task: str | int) -> str:
    """The upstream name of ``task`` (a name, the paper's name, an id or an index)."""
    names = task_names()
    if isinstance(task, int):
        if not 0 <= task < len(names):
            raise ValueError(f"task: index {task} out of range; there are {len(names)} tasks (0-{len(names) - 1})")
        return names[task]
    from scienceworld.utils import infer_task

    name = infer_task(task)
    if name not in names:
        raise ValueError(f"task: unknown ScienceWorld task {task!r}; known: {', '.join(names)}")
    return name


class ScienceWorldEnv(TextGameEnv):
    description = "ScienceWorld's 30 science tasks (variations by upstream split); one command per turn; score / 100"
    metadata = {
        "render_modes": [],
        "tools": ("act",),
        "reward": "the upstream score change / 100 each step (1 in all when the task is completed)",
    }
    sft_teacher = "envs.scienceworld.policies:noisy_gold"
    # MB one episode in flight holds (agent_rl/run/capacity.py): the most one JVM held at -Xmx256m over
    # the gold paths of all 30 tasks, 361 MB (docs/text-games.md, bench/text_games.py), plus the
    # process's share per episode that bench/load.py measured beside 32 TextWorld-Express JVMs
    # (600 MB / 32, bench/results/load/20261207/)
    episode_memory_mb = 380.0
    intro_prompt = "You are an agent in ScienceWorld, a text simulation of science experiments."
    text_hint = "Reply with exactly one command, e.g. 'look around' or 'open door to kitchen'."
    tool_hint = "Call the act tool with exactly one command, e.g. act(command='open door to kitchen')."

    def __init__(
        self,
        task: str | int = "find-living-thing",
        simplifications: str = "",
        split: str = "train",
        max_turns: int = 60,
        action_mode: str = "text",
        tool_format: str = "hermes",
        valid_actions: bool = False,
        max_valid_actions: int = 64,
        max_observation_tokens: int = 512,
        max_action_chars: int = 8192,
        jvm_max_heap_mb: int | None = 256,
    ):
        super().__init__(
            split=split,
            max_turns=max_turns,
            action_mode=action_mode,
            tool_format=tool_format,
            valid_actions=valid_actions,
            max_valid_actions=max_valid_actions,
            max_observation_tokens=max_observation_tokens,
            max_action_chars=max_action_chars,
        )
        self.task = task_name(task)
        self.simplifications = simplifications
        self._jvm = JvmSimulator(self._launch, "ScienceWorld", jvm_max_heap_mb)
        self._loaded: tuple[int, str, int, str] | None = (
            None  # (the JVM start it is in, task, variation, simplifications)
        )
        self._gold: list[str] = []
        self._variations: dict[str, list[int]] = {}
        self._score = self._unpaid = 0
        self._look = ("", "")

    @staticmethod
    def _launch() -> Any:
        upstream = require("scienceworld.scienceworld", "scienceworld>=1.2.3,<1.3")
        route_java_options(upstream)  # jvm_max_heap_mb reaches the JVM's command line
        return upstream.ScienceWorldEnv("", envStepLimit=10**9)  # the turn budget is ours (max_turns)

    def _start(self, seed: int | None, split: str, options: dict[str, Any]) -> GameStart:
        if seed is None:
            task = dict(options["task"])
        else:
            fold = FOLDS[split]
            variations = self._variations_of(fold)
            task = {
                "task": self.task,
                "variation": variations[seed % len(variations)],
                "simplifications": self.simplifications,
                "fold": fold,
            }
        obs, infos = self._jvm.call(lambda sim: self._reset_upstream(sim, task))
        task_id = f"sw/{task['task']}/{task['variation']}/{task['simplifications'] or 'none'}"
        remember_gold(task_id, self._gold)
        self._score, self._unpaid = (
            int(infos["score"]),
            int(infos["score"]),
        )  # reset points: paid with the first valid command
        self._look = (infos["look"], infos["inv"])
        intro = f"{infos['taskDesc'].strip()}\n\n{obs.strip()}"
        return GameStart(
            task_id, task, intro, list(infos["valid"]), teacher_context="Gold path: " + " | ".join(self._gold)
        )

    def _variations_of(self, fold: str) -> list[int]:
        if fold not in self._variations:

            def load(sim: Any) -> list[int]:
                sim.load(self.task, 0, self.simplifications)  # the variation lists belong to the loaded task
                self._loaded = None
                return {
                    "train": sim.get_variations_train,
                    "dev": sim.get_variations_dev,
                    "test": sim.get_variations_test,
                }[fold]()

            self._variations[fold] = [int(v) for v in self._jvm.call(load)]
        return self._variations[fold]

    def _reset_upstream(self, sim: Any, task: dict[str, Any]) -> tuple[str, dict]:
        key = (self._jvm.starts, task["task"], int(task["variation"]), task["simplifications"])
        if self._loaded != key:
            sim.load(task["task"], int(task["variation"]), task["simplifications"], generateGoldPath=True)
            self._gold = list(sim.get_gold_action_sequence())
            self._loaded = key
        else:  # a load builds the world afresh; the simulator's reset rebuilds it (0.7-2.9 s measured)
            sim.server.reset()
        # upstream reset(): the simulator's reset (above), then a "look around" step
        obs, _, infos = self._step_upstream(sim, "look around")
        infos["taskDesc"] = sim.taskdescription()
        return obs, infos

    def _step_upstream(self, sim: Any, command: str) -> tuple[str, bool, dict]:
        """The upstream ``step()``, asking for the valid actions only when they are shown: the list
        costs 150-240 ms a step (measured on find-living-thing), the step itself 35 ms."""
        obs = sim.server.step(command)
        score = int(round(100 * sim.server.getScore()))
        completed = bool(sim.server.getCompleted()) or score < 0
        infos = {
            "score": score,
            "look": sim.look(),
            "inv": sim.inventory(),
            "valid": sim.get_valid_action_object_combinations() if self.valid_actions else [],
        }
        return obs, completed, infos

    def _command(self, command: str) -> GameStep:
        from py4j.protocol import Py4JJavaError

        before = self._valid
        try:
            obs, completed, infos = self._jvm.call(lambda sim: self._step_upstream(sim, command), start=False)
        except Py4JJavaError as e:  # the simulator raised on this input; the JVM lives on
            return GameStep(
                reply=f"error: the simulator could not read this command ({e.java_exception})",
                valid_action=False,
                valid=before,
            )
        score, valid = int(infos["score"]), obs.strip() != INVALID_REPLY
        points, self._score = score - self._score, score
        if valid and self._unpaid:
            points, self._unpaid = points + self._unpaid, 0
        self._look = (infos["look"], infos["inv"])
        success = score >= 100
        return GameStep(
            reply=obs,
            reward=points / 100.0,
            done=completed,
            success=success,
            valid_action=valid,
            valid=list(infos["valid"]),
            info={"score": score, "task_failure": completed and not success},
        )

    def _state_text(self) -> str:
        return f"{self._look[0]}\x00{self._look[1]}\x00{self._score}"

    def close(self) -> None:
        self._jvm.discard()
        self._loaded = None
        super().close()

"""``agent_rl/TextWorldExpress-v0``: Microsoft's TextWorld-Express games (CoinCollector, Cooking
World, TextWorld Commonsense, ...) through the ``textworld-express`` package, one command per turn.

The game of a seed: ``game`` and ``game_params`` (the upstream ``gameParams``: locations,
distractors, doors, ingredients; they set horizon and difficulty) pick the family, the split picks
the upstream ``gameFold`` (``train``, ``val`` -> ``dev``, ``test``), and ``seed`` picks one of that
fold's 1,000 game seeds (``fold_seeds[seed % 1000]``, so no game is in two splits). Rewards are the
upstream score changes (the score goes from 0 to 1, so the episode's reward is the final score, 1
exactly when the task succeeds); the episode ends on ``tasksuccess`` / ``taskfailure``.

The simulator runs in one JVM per env instance (``envs.jvm``), started at the first reset and
reused; a dead JVM raises ``InfraError`` and the next reset starts a new one; ``jvm_max_heap_mb``
(256; None: the JVM's default) is its ``-Xmx``. The action interface
and the observation budget are ``envs.text_games``'. ``view="exits"`` (CoinCollector only) shows
each room in one line, its name, the coin when it is there and the exits (``You are in the
kitchen. Exits: north closed door, east pantry.``), and sorts the valid actions: the same facts as
the upstream's paragraph of furniture, in ~20 tokens instead of ~150 (``envs.textworld_express.rooms``).
``state_key`` hashes the task, the room (the ``look`` text), the inventory and the score: the same
state has one key whatever the path to it (the anchor state of GiGPO and G2PO).
"""

from __future__ import annotations

import hashlib
from typing import Any

from envs.jvm import JvmSimulator, route_java_options
from envs.text_games import GameStart, GameStep, TextGameEnv, remember_gold, require
from envs.textworld_express.rooms import exits_view

#: our game names (the upstream's, and "cooking" for "cookingworld") -> default upstream gameParams
DEFAULT_PARAMS: dict[str, str] = {
    "coin": "numLocations=5,numDistractorItems=0,includeDoors=0",
    "cookingworld": "numLocations=3,numIngredients=2,numDistractorItems=2,includeDoors=0,limitInventorySize=0",
    "twc": "numLocations=2,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
    "mapreader": "",
    "arithmetic": "",
    "sorting": "",
    "simonsays": "",
    "peckingorder": "",
}
ALIASES = {"cooking": "cookingworld", "coincollector": "coin"}
FOLDS = {"train": "train", "val": "dev", "test": "test"}
#: what an observation shows: ``full``, the upstream's text; ``exits`` (CoinCollector), each room in one
#: line, its furniture left out (``envs.textworld_express.rooms``), and the valid actions sorted
VIEWS = ("full", "exits")


def game_params_str(params: str | dict[str, Any] | None, game: str) -> str:
    """The upstream ``gameParams`` string: a dict is written ``k=v,...`` (booleans as 0 / 1)."""
    if params is None:
        return DEFAULT_PARAMS[game]
    if isinstance(params, dict):
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in params.items())
    return str(params)


_STEP = {"move north": (0, 1), "move south": (0, -1), "move east": (1, 0), "move west": (-1, 0)}


def loop_erased(gold: list[str]) -> list[str]:
    """The gold path without its detours, when it is compass moves and then other actions.

    CoinCollector's upstream gold path is a random walk that the JVM draws unseeded (measured on
    test game 0: 11, 5 and 3 steps on three resets); walking it with every return to an earlier
    room cut out gives the same end room in fewer moves (rooms lie on a grid, so a room is the sum
    of the moves). Paths with doors or other actions between moves are kept as they are.
    """
    moves = 0
    while moves < len(gold) and gold[moves] in _STEP:
        moves += 1
    if any(a in _STEP for a in gold[moves:]):
        return gold
    path, seen = [], {(0, 0): 0}
    x = y = 0
    for a in gold[:moves]:
        dx, dy = _STEP[a]
        x, y = x + dx, y + dy
        if (x, y) in seen:  # back in an earlier room: forget the loop
            path = path[: seen[(x, y)]]
            seen = {p: i for p, i in seen.items() if i <= len(path)}
        else:
            path.append(a)
            seen[(x, y)] = len(path)
    return path + gold[moves:]


class TextWorldExpressEnv(TextGameEnv):
    description = "TextWorld-Express (CoinCollector, Cooking, TWC, ...): one command per turn; the upstream score"
    metadata = {
        "render_modes": [],
        "tools": ("act",),
        "reward": "the upstream score change each step (0..1; 1 in all when the task succeeds)",
    }
    sft_teacher = "envs.textworld_express.policies:noisy_gold"
    # MB one episode in flight holds (its JVM, 76.5 MB at -Xmx256m, and a share of the process): the
    # peak of `python bench/load.py --jvm 32` over its 32 episodes (bench/results/load/20261207/);
    # agent_rl/run/capacity.py refuses a run whose episodes in flight need more than the machine has
    episode_memory_mb = 95.3
    tokenizer_corpus = "envs.textworld_express.policies:corpus_conversations"  # text for the tiny tokenizer
    intro_prompt = "You are playing a TextWorld-Express text game."
    text_hint = "Reply with exactly one command from the valid actions, e.g. 'move north'."
    tool_hint = "Call the act tool with exactly one command from the valid actions, e.g. act(command='move north')."

    def __init__(
        self,
        game: str = "coin",
        game_params: str | dict[str, Any] | None = None,
        split: str = "train",
        max_turns: int = 40,
        action_mode: str = "text",
        tool_format: str = "hermes",
        valid_actions: bool = True,
        max_valid_actions: int = 64,
        max_observation_tokens: int = 512,
        max_action_chars: int = 8192,
        jvm_max_heap_mb: int | None = 256,
        view: str = "full",
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
        game = ALIASES.get(game, game)
        if game not in DEFAULT_PARAMS:
            raise ValueError(
                f"game: unknown TextWorld-Express game {game!r}; known: {', '.join(sorted({*DEFAULT_PARAMS, *ALIASES}))}"
            )
        if view not in VIEWS:
            raise ValueError(f"view: unknown view {view!r}; allowed: {', '.join(VIEWS)}")
        if view == "exits" and game != "coin":
            raise ValueError(f"view: 'exits' is CoinCollector's (game: coin), not {game!r}'s; use view: full")
        self.game = game
        self.game_params = game_params_str(game_params, game)
        self.view = view
        self._jvm = JvmSimulator(self._launch, "TextWorld-Express", jvm_max_heap_mb)
        self._loaded: tuple[int, str, str] | None = None  # (the JVM start it is in, game, params) loaded
        self._fold_seeds: dict[str, list[int]] = {}
        self._score = 0.0
        self._look = ("", "")  # the room and the inventory, for state_key

    @staticmethod
    def _launch() -> Any:
        upstream = require("textworld_express.textworld_express", "textworld-express>=1.1,<1.2")
        route_java_options(upstream)  # jvm_max_heap_mb reaches the JVM's command line
        return upstream.TextWorldExpressEnv(envStepLimit=10**9)  # the turn budget is ours (max_turns)

    # -- hooks ----------------------------------------------------------------------------------
    def _start(self, seed: int | None, split: str, options: dict[str, Any]) -> GameStart:
        if seed is None:
            task = dict(options["task"])
        else:
            fold = FOLDS[split]
            task = {"game": self.game, "params": self.game_params, "fold": fold, "seed": self._seed_of(fold, seed)}
        infos, gold = self._jvm.call(lambda sim: self._reset_upstream(sim, task))
        task_id = f"twx/{task['game']}/{hashlib.sha256(task['params'].encode()).hexdigest()[:8]}/{task['fold']}/{task['seed']}"
        remember_gold(task_id, gold)
        self._score = float(infos["score"])
        self._look = (infos.get("look", ""), infos.get("inventory", ""))
        intro = f"{infos['taskDescription'].strip()}\n\n{self._shown(infos['observation'])}"
        return GameStart(
            task_id, task, intro, self._listed(infos["validActions"]), teacher_context="Gold path: " + " | ".join(gold)
        )

    def _reset_upstream(self, sim: Any, task: dict[str, Any]) -> tuple[dict, list[str]]:
        if self._loaded != (self._jvm.starts, task["game"], task["params"]):  # a new JVM has no game loaded
            sim.load(gameName=task["game"], gameParams=task["params"])  # ValueError on bad params
            self._loaded = (self._jvm.starts, task["game"], task["params"])
        _, infos = sim.reset(seed=task["seed"], gameFold=task["fold"], generateGoldPath=True)
        gold = list(sim.getGoldActionSequence())
        if gold and gold[0] == "look around":  # the reset's observation is that look already
            gold = gold[1:]
        return infos, loop_erased(gold)

    def _seed_of(self, fold: str, seed: int) -> int:
        if fold not in self._fold_seeds:
            getter = {"train": "getValidSeedsTrain", "dev": "getValidSeedsDev", "test": "getValidSeedsTest"}[fold]
            self._fold_seeds[fold] = [int(s) for s in self._jvm.call(lambda sim: getattr(sim, getter)())]
        seeds = self._fold_seeds[fold]
        return seeds[seed % len(seeds)]

    def _command(self, command: str) -> GameStep:
        from py4j.protocol import Py4JJavaError

        before = self._valid
        try:
            obs, _, _, infos = self._jvm.call(lambda sim: sim.step(command), start=False)
        except Py4JJavaError as e:  # the simulator raised on this input; the JVM lives on
            return GameStep(
                reply=f"error: the game could not read this command ({e.java_exception})",
                valid_action=False,
                valid=before,
            )
        score = float(infos["score"])
        reward, self._score = score - self._score, score
        self._look = (infos.get("look", ""), infos.get("inventory", ""))
        success, failure = bool(infos["tasksuccess"]), bool(infos["taskfailure"])
        return GameStep(
            reply=self._shown(obs),
            reward=reward,
            done=success or failure,
            success=success,
            valid_action=command in before,
            valid=self._listed(infos["validActions"]),
            info={"score": score, "task_failure": failure},
        )

    def _shown(self, text: str) -> str:
        """The upstream's observation as the view shows it (``exits``: a room in one line)."""
        return exits_view(text.strip()) if self.view == "exits" else text.strip()

    def _listed(self, valid: list[str]) -> list[str]:
        """The valid actions in the view's order: the upstream's (shuffled each step), or sorted (``exits``)."""
        return sorted(valid) if self.view == "exits" else list(valid)

    def _state_text(self) -> str:
        """The room, the inventory and the score: the same state has one key whatever the path."""
        return f"{self._look[0]}\x00{self._look[1]}\x00{self._score}"

    # -- resources ------------------------------------------------------------------------------
    def close(self) -> None:
        self._jvm.discard()
        self._loaded = None
        super().close()

"""One episode in flight: its spec, and the state the engine builds turn by turn.

``EpisodeSpec`` says what to run; ``Episode`` holds the token ids, loss mask, logprobs and top-k
recorded so far, the conversation, the env and the turn bookkeeping, and becomes a
``Trajectory`` at the end. A branch child (``RolloutEngine.fork``) starts from its parent's exact
prefix through ``start_from_prefix``; a child that restores a sibling's env snapshot takes the
sibling's conversation through ``conversation`` / ``set_conversation``.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import gymnasium as gym

from agent_rl.core.types import EpisodeSpec, StopReason, Trajectory, Turn

# Option keys the engine reads and never passes to ``env.reset`` (every env works without change):
# ``extra_messages``: messages appended after the env's first observation (a retry's failed attempt,
# a decomposition's sub-problems); ``origin``: where a generated task came from (JSON, for the filters).
# Both stay in ``info["options"]``, so a replay (fork, re-roll) rebuilds the same context.
ENGINE_OPTIONS = ("extra_messages", "origin")


def env_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the engine's own keys: what ``env.reset`` gets."""
    return {k: v for k, v in options.items() if k not in ENGINE_OPTIONS}


class Episode:
    def __init__(self, spec: EpisodeSpec, sample_seed: int):
        self.spec = spec
        self.sample_seed = sample_seed
        self.env: gym.Env | None = None
        self.episode_id = uuid.uuid4().hex[:12]
        self.messages: list[dict] = []
        self.tools: list[dict] | None = None
        self.task_id = ""
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.topk_ids: list[list[int]] = []  # filled only when the engine records top-k
        self.topk_logprobs: list[list[float]] = []
        self.turns: list[Turn] = []
        self.reward = 0.0
        self.stop: StopReason | None = None
        self.state_key: str | None = None
        self.info: dict[str, Any] = {}
        self.generated = 0  # policy tokens so far (for the forced-interruption budget)
        self.interrupted = False
        self.turn_start: int | None = None  # set while an assistant turn goes on over several requests
        self.context_ids: list[int] | None = None  # per_turn: the rendered context of the current turn
        self.requests_in_turn = 0
        self.parent_id: str | None = None
        self.branch_point: int | None = None

    def append(
        self,
        ids: list[int],
        mask: int,
        logprobs: list[float] | None = None,
        topk: tuple[list[list[int]], list[list[float]]] | None = None,
    ) -> None:
        self.token_ids += ids
        self.loss_mask += [mask] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        if topk is not None:
            self.topk_ids += topk[0]
            self.topk_logprobs += topk[1]
        else:
            self.topk_ids += [[] for _ in ids]
            self.topk_logprobs += [[] for _ in ids]

    def fail(self, stop: StopReason, error: str) -> None:
        self.stop, self.info["error"] = stop, error

    def trajectory(self) -> Trajectory:
        failed = self.stop in (StopReason.ENV_ERROR, StopReason.INFRA_ERROR)
        return Trajectory(
            task_id=self.task_id,
            group_id=self.spec.group_id,
            episode_id=self.episode_id,
            token_ids_T=self.token_ids,
            loss_mask_T=self.loss_mask,
            rollout_logprobs_T=self.logprobs,
            turns_N=self.turns,
            reward=None if failed else self.reward,
            stop_reason=self.stop or StopReason.DONE,
            topk_ids_TK=self.topk_ids if any(self.topk_ids) else None,
            topk_logprobs_TK=self.topk_logprobs if any(self.topk_ids) else None,
            parent_id=self.parent_id,
            branch_point=self.branch_point,
            info=self.info,
        )

    # -- branching ------------------------------------------------------------------------------
    def conversation(self) -> dict[str, Any]:
        """What a replay builds besides the env's state: messages, tools, state key, reward so far."""
        return copy.deepcopy(
            {"messages": self.messages, "tools": self.tools, "state_key": self.state_key, "reward": self.reward}
        )

    def set_conversation(self, conversation: dict[str, Any]) -> None:
        conversation = copy.deepcopy(conversation)
        self.messages, self.tools = conversation["messages"], conversation["tools"]
        self.state_key, self.reward = conversation["state_key"], conversation["reward"]

    def start_from_prefix(self, parent: Trajectory, at_token: int, k: int, context_ids: list[int] | None) -> None:
        """Take ``parent``'s exact prefix ``[:at_token]`` (inside its assistant turn ``k``): ids, mask,
        logprobs and top-k copied verbatim, its first ``k`` turns, and the open turn ``k`` to go on
        with (``context_ids``: the per_turn context of that turn)."""
        T = len(parent.token_ids_T)
        self.parent_id, self.branch_point = parent.episode_id, at_token
        self.task_id = parent.task_id
        self.token_ids = list(parent.token_ids_T[:at_token])
        self.loss_mask = list(parent.loss_mask_T[:at_token])
        self.logprobs = list(parent.rollout_logprobs_T[:at_token])
        self.topk_ids = [list(c) for c in (parent.topk_ids_TK or [[]] * T)[:at_token]]
        self.topk_logprobs = [list(c) for c in (parent.topk_logprobs_TK or [[]] * T)[:at_token]]
        self.turns = [copy.deepcopy(u) for u in parent.turns_N[:k]]
        self.turn_start, self.requests_in_turn = parent.turns_N[k].start, 0
        self.context_ids = context_ids
        self.generated = sum(self.loss_mask)
        # an interruption message (mask 0) inside a turn up to the branch point
        self.interrupted = any(0 in parent.loss_mask_T[u.start : min(u.end, at_token)] for u in parent.turns_N[: k + 1])

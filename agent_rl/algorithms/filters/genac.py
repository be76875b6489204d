"""GenAC's generative critic (arXiv 2604.10701), as a text pass after the rollout: ``genac``.

For each actor row and each boundary (``advantages/genac.py``: turn starts, optionally every
``segment_tokens`` inside a turn) the critic reads the task's prompt, In-Context Conditioning
examples and the actor's response up to the boundary, reasons, and answers ``<value>v</value>``.
The critic is the policy itself (one set of weights acts and judges), sampled through the run's
own backend (``RunServices.text_pass``) at the weights the step's episodes sampled with.

- In-Context Conditioning: the state keeps the actor's recent finished episodes and their returns
  (a FIFO of ``icc_buffer``); each critic prompt shows the ``icc_examples`` most recent ones, those
  of the same task first, so the critic's values follow the current actor's success rate. The
  step's own episodes join the buffer only after the step's critic prompts are written.
- The values go into each actor row's ``info["genac"]``; each answer becomes a critic row of the
  same group (its prompt + sampled tokens, the sampler's logprobs, loss mask on the answer) with
  reward r^c (``critic_reward``), trained by the run's loss with the advantage ``genac``.
- ``train_critic: false`` keeps the critic out of the batch (a frozen generative critic).

List ``genac`` last among the filters: the critic rows it appends are not episodes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_rl.algorithms.advantages.genac import (
    ACTOR_KEY,
    CRITIC_KEY,
    boundaries,
    critic_reward,
    parse_value,
)
from agent_rl.algorithms.filters.common import with_trajectories
from agent_rl.algorithms.filters.self_context import (
    TextPassState,
    _rows,
    bound_services,
)
from agent_rl.algorithms.registry import (
    ComponentConfig,
    FilterResult,
    record_choice,
    register_filter,
)
from agent_rl.algorithms.run_api import RunAPI
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup, Turn


class GenacState(TextPassState):
    """The run (``bind``), the pass counter and the In-Context Conditioning buffer: the actor's
    recent episodes as (task id, text, return), oldest first (checkpointed with the run)."""

    key = "genac"
    teacher_context = False

    def __init__(self) -> None:
        super().__init__()
        self.buffer: list[dict[str, Any]] = []

    def bind(self, run: RunAPI, cfg: Any = None) -> None:
        if run.facts.advantage != "genac":
            raise ValueError("algorithm.filters genac: its critic rows need the advantage genac (algorithm.advantage.name=genac)")
        super().bind(run, cfg)

    def state_dict(self) -> dict[str, Any]:
        return {"passes": self.passes, "buffer": self.buffer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.passes, self.buffer = int(state["passes"]), [dict(e) for e in state.get("buffer", [])]


class GenacConfig(ComponentConfig):
    prompt: str = Field(
        "You are the critic of the policy that wrote the attempt below.\n{examples}\n\nThe policy's attempt so far "
        "(it goes on from here):\n{partial}\n\nHow much reward will this attempt end with, between {v_min:g} and {v_max:g}? "
        "Reason step by step, then write your estimate as <value>number</value>.",
        description="the critic's request after the task's prompt; {examples}: the ICC examples, {partial}: the response up to the boundary",
    )
    example_template: str = Field("An earlier attempt of the policy (reward {ret:g}):\n{text}", description="one ICC example; {ret}: its return")
    no_examples: str = Field("No earlier attempt of the policy yet.", description="{examples} when the buffer is empty")
    value_min: float = Field(0.0, description="lowest value the critic may answer (answers are clipped); keep to the env's reward range")
    value_max: float = Field(1.0, description="highest value the critic may answer (answers are clipped)")
    critic_reward: Literal["squared", "absolute"] = Field("squared", description="r^c = -(V - R)^2 (ours) or -|V - R|")
    segment_tokens: int = Field(0, ge=0, description="0: boundaries at turn starts only; n > 0: also every n tokens inside a turn (ours)")
    max_boundaries: int = Field(4, ge=1, description="critic calls per actor row, the first boundaries (ours)")
    icc_examples: int = Field(2, ge=0, description="In-Context Conditioning examples per critic prompt (ours)")
    icc_buffer: int = Field(64, ge=1, description="the actor's recent episodes kept for In-Context Conditioning (ours)")
    icc_chars: int = Field(400, ge=1, description="an ICC example keeps the last this many characters of its episode (ours)")
    max_new_tokens: int = Field(128, ge=1, description="length cap of the critic's reasoning and value (ours)")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of the critic (ours: 1, so REINFORCE explores)")
    train_critic: bool = Field(True, description="append the critic's answers as trained rows (False: a frozen critic)")

    @model_validator(mode="after")
    def _range(self) -> GenacConfig:
        if self.value_max <= self.value_min:
            raise ValueError(f"genac: value_max ({self.value_max}) must be above value_min ({self.value_min})")
        return self


def icc_examples(buffer: list[dict[str, Any]], task_id: str, n: int) -> list[dict[str, Any]]:
    """The ``n`` most recent buffer entries, those of ``task_id`` first."""
    recent = buffer[::-1]
    return ([e for e in recent if e["task_id"] == task_id] + [e for e in recent if e["task_id"] != task_id])[:n]


def _prefix(t: Trajectory, end: int) -> Trajectory:
    return replace(t, token_ids_T=t.token_ids_T[:end], loss_mask_T=t.loss_mask_T[:end], rollout_logprobs_T=t.rollout_logprobs_T[:end], turns_N=[])


def critic_row(actor: Trajectory, k: int, res: Any, reward: float, meta: dict[str, Any]) -> Trajectory:
    """The critic's answer ``res`` (a ``PassResult``) as a row of the actor's group."""
    p, n = len(res.prompt_ids), len(res.token_ids)
    return Trajectory(
        task_id=actor.task_id, group_id=actor.group_id, episode_id=f"{actor.episode_id}/genac{k}",
        token_ids_T=list(res.prompt_ids) + list(res.token_ids), loss_mask_T=[0] * p + [1] * n,
        rollout_logprobs_T=[0.0] * p + list(res.logprobs), turns_N=[Turn(p, p + n, p + n, p + n, policy_version=res.policy_version)],
        reward=reward, stop_reason=StopReason.DONE, info={CRITIC_KEY: meta},
    )  # fmt: skip


@register_filter("genac", config=GenacConfig, state=GenacState,
                 status="interpretation",
                 evidence="arXiv 2604.10701 read through summaries, no code: the value format, ICC context and "
                          "critic reward are ours; 8 recorded choices; tests/algorithms/test_genac.py")
def genac(groups: list[TrajectoryGroup], state: GenacState, cfg: GenacConfig) -> FilterResult:
    """GenAC, Generative Actor-Critic (Shan et al. 2026, arXiv 2604.10701): the critic reasons, then values.

    V_k = clip(parse(<value>v</value> of critic(prompt, ICC examples, response[:b_k])), v_min, v_max)
    r^c = -(V_k - R)^2 on the critic's answer (unparseable: -max((v_min - R)^2, (v_max - R)^2)).
    The advantage ``genac`` then gives A_t = R - V_k(t) to the actor and r^c - mean(r^c) to the critic.
    """
    if not groups:
        return FilterResult(groups=[])
    services = bound_services(state, "genac")
    rows = [t for t in _rows(groups) if t.trainable and CRITIC_KEY not in t.info]
    asks: list[tuple[Trajectory, int]] = [(t, b) for t in rows for b in boundaries(t, cfg.segment_tokens, cfg.max_boundaries)]
    conversations = []
    for t, b in asks:
        shown = icc_examples(state.buffer, t.task_id, cfg.icc_examples)
        examples = "\n\n".join(cfg.example_template.format(ret=e["return"], text=e["text"]) for e in shown) or cfg.no_examples
        partial = services.transcript(_prefix(t, b), special_tokens=False) or "(nothing yet)"
        request = cfg.prompt.format(examples=examples, partial=partial, v_min=cfg.value_min, v_max=cfg.value_max)
        conversations.append(t.info["prompt_messages"] + [{"role": "user", "content": request}])
    results = services.text_pass(conversations, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=state.next_seed()) if asks else []
    extra: dict[str, list[Trajectory]] = {}
    for t in rows:
        t.info[ACTOR_KEY] = {"boundaries": [], "values": [], "texts": []}  # saved with the trajectories (agent-rl view)
    rewards = []
    for k, ((t, b), res) in enumerate(zip(asks, results, strict=True)):
        v = parse_value(res.text, cfg.value_min, cfg.value_max)
        t.info[ACTOR_KEY]["boundaries"].append(b)
        t.info[ACTOR_KEY]["values"].append(v)
        t.info[ACTOR_KEY]["texts"].append(res.text)
        if cfg.train_critic and res.text is not None and res.token_ids:
            r = critic_reward(v, float(t.reward), cfg.critic_reward, cfg.value_min, cfg.value_max)
            meta = {"actor": t.episode_id, "boundary": b, "value": v, "return": float(t.reward)}
            extra.setdefault(t.group_id, []).append(critic_row(t, k, res, r, meta))
            rewards.append(r)
    for t in rows:  # the step's episodes condition the next steps' critic
        state.buffer.append({"task_id": t.task_id, "text": services.transcript(t, special_tokens=False)[-cfg.icc_chars :], "return": float(t.reward)})
    del state.buffer[: max(0, len(state.buffer) - cfg.icc_buffer)]
    out = [with_trajectories(g, g.trajectories_G + extra.get(g.group_id, [])) for g in groups]
    values = [v for t in rows for v in t.info[ACTOR_KEY]["values"] if v is not None]
    metrics = {
        "genac/passes": float(len(results)), "genac/pass_failed": float(sum(r.text is None for r in results)),
        "genac/parsed": float(len(values)), "genac/critic_rows": float(len(rewards)),
        "genac/pass_tokens": float(sum(len(r.token_ids) for r in results)),
    }  # fmt: skip
    if values:
        metrics["genac/value_mean"] = sum(values) / len(values)
    return FilterResult(groups=out, metrics=metrics, means=frozenset({"genac/value_mean"}))


record_choice("genac", "what In-Context Conditioning puts in the critic's context", "the actor's most recent finished episodes of earlier steps with their returns (icc_examples = 2 of a FIFO of 64, same task first, last 400 characters each)")
record_choice("genac", "the critic model", "the policy itself, sampled through the run's backend (one set of weights; a separate critic model is not built)")
record_choice("genac", "the SFT and REINFORCE pretraining stages", "no synthetic-trace SFT here; REINFORCE pretraining is a genac run with advantage train_actor: false (the actor's advantages 0), then the joint run")

"""Model-backed needs as components: what the run builds, besides the policy, to provide the plan's needs.

A need that a model provides (``needs.py``: ``builds="critic"``) names a component registered here.
A component declares how it is built (its factory, from the ``ComponentContext``), which needs it
provides before the update (``provides``, ``provide``), how it is updated (``before_update``: after
the advantages, before the policy's step; ``after_update``: after it), and its state
(``sharded``: modules and optimizers in the DCP checkpoint; ``state_dict``: everything else). The
trainer loops over the plan's components and names none of them; save, load and sharded state
have no per-component case. A new one is a class and one ``register_component`` line::

    @register_component("my_scorer")
    class MyScorer(ModelComponent):
        provides = frozenset({"my_scores"})
        ...

Built-in, in registration order (the order their updates run): the policy's own scores (always
built), the reference, the critic, PRIME's implicit PRM, a privileged critic (redippo), the teacher,
greedy rollouts (ReMax).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from agent_rl.algorithms.needs import NEEDS, NeedContext
from agent_rl.config import Config, CriticConfig
from agent_rl.core.types import EpisodeSpec, TrainBatch, TrajectoryGroup
from agent_rl.learner import fsdp, hidden
from agent_rl.learner.checkpoint import ModelAndOptimizer
from agent_rl.learner.critic import Critic, load_value_model
from agent_rl.learner.privileged import PrivilegedCritic
from agent_rl.learner.prm import ImplicitPRM
from agent_rl.models import lora
from agent_rl.models.loading import load_model
from agent_rl.rollout.batching import make_batch
from agent_rl.run.runtime import Components
from agent_rl.train.teaching import Teaching


@dataclass
class ComponentContext:
    """What a component's factory may read: the config, the plan, the run's start-up components
    (policy, tokenizer, renderer, engines), the learner, and where this process sits."""

    cfg: Config
    plan: Any
    components: Components
    learner: Any
    rank: int
    world: int
    local_learner: bool  # the learner's modules live in this process (no Ray learner group)
    built: dict[str, ModelComponent] = field(default_factory=dict)  # components built before this one


@dataclass
class UpdateResult:
    metrics: dict[str, float] = field(default_factory=dict)
    hold_policy: bool = False  # skip the policy's step this time (VAPO's critic warm-up)


class ModelComponent:
    """Base of a component: provides nothing, updates nothing, holds no state."""

    provides: frozenset[str] = frozenset()

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        """The values of the needs in ``wanted`` (a subset of ``provides``) for the step's batch."""
        return {}

    def before_update(self, batch: TrainBatch, advantages: Any, step: int) -> UpdateResult:
        return UpdateResult()

    def after_update(self, policy: torch.nn.Module) -> None:
        """After the policy's step (an EMA teacher follows it)."""

    def sharded(self) -> dict[str, ModelAndOptimizer]:
        """Trained modules and their optimizers, written and read by the DCP checkpoint (every rank)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything else this component must restore on resume (schedulers, counters, frozen copies)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


COMPONENTS: dict[str, Callable[[ComponentContext], ModelComponent]] = {}


def register_component(
    name: str,
) -> Callable[[Callable[[ComponentContext], ModelComponent]], Callable[[ComponentContext], ModelComponent]]:
    """Register ``factory(ctx) -> ModelComponent`` under ``name`` (the ``builds`` of the needs it provides)."""

    def decorator(
        factory: Callable[[ComponentContext], ModelComponent],
    ) -> Callable[[ComponentContext], ModelComponent]:
        if name in COMPONENTS:
            raise ValueError(f"component '{name}' is registered twice")
        COMPONENTS[name] = factory
        return factory

    return decorator


def unregister_component(name: str) -> None:
    COMPONENTS.pop(name, None)


def build_components(ctx: ComponentContext, builds: frozenset[str]) -> dict[str, ModelComponent]:
    """The policy's scores and every component the plan builds, in registration order."""
    unknown = sorted(builds - set(COMPONENTS))
    if unknown:
        raise ValueError(f"the plan builds unknown components {unknown}; registered: {', '.join(COMPONENTS)}")
    for name, factory in COMPONENTS.items():
        if name == POLICY or name in builds:
            ctx.built[name] = factory(ctx)
    return ctx.built


def need_providers(built: dict[str, ModelComponent]) -> dict[str, ModelComponent]:
    """The component that provides each need."""
    return {need: c for c in built.values() for need in c.provides}


# -- the built-in components ---------------------------------------------------------------------

POLICY = "policy_scores"


@register_component(POLICY)
class PolicyScores(ModelComponent):
    """The learner's logprobs of the sampled tokens before the update (and their entropy): the
    policy itself, so nothing is built, trained or saved."""

    provides = frozenset({"old_logprobs", "entropy"})

    def __init__(self, ctx: ComponentContext):
        self.learner, self.policy = ctx.learner, ctx.components.model
        self.with_entropy = "entropy" in ctx.plan.precompute

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        old, entropy = self.learner.score(self.policy, ctx.batch, self.with_entropy)
        return {"old_logprobs": old, "entropy": entropy}


@register_component("reference")
class Reference(ModelComponent):
    """A frozen copy of the initial policy (sharded like it on several ranks; with LoRA: the base,
    the policy's adapters off, no copy): its logprobs and, for ride, its decoder-layer outputs."""

    provides = frozenset({"ref_logprobs", "ref_layers"})

    def __init__(self, ctx: ComponentContext):
        cfg, policy = ctx.cfg, ctx.components.model
        self.learner, self.layers = ctx.learner, ctx.plan.teacher.hidden_layers if ctx.plan.teacher is not None else ()
        if cfg.learner.lora is not None:
            self.model: Any = lora.ReferencePolicy(policy)
        elif ctx.world == 1:
            self.model = copy.deepcopy(policy).eval().requires_grad_(False)
        else:
            ref = load_model(cfg.model.path, cfg.model.dtype, cfg.model.device).eval().requires_grad_(False)
            self.model = fsdp.shard_model(ref, cfg.learner.mixed_precision, cfg.learner.cpu_offload)

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "ref_logprobs" in wanted:
            out["ref_logprobs"] = self.learner.score(self.model, ctx.batch)[0]
        if "ref_layers" in wanted:
            out["ref_layers"] = hidden.layer_states(self.model, ctx.batch, self.layers)
        return out


@register_component("critic")
class CriticComponent(ModelComponent):
    """A value model (``learner.critic``), trained towards each step's returns before the policy's
    step; VAPO's warm-up holds the policy for ``warmup_steps``."""

    provides = frozenset({"values"})

    def __init__(self, ctx: ComponentContext):
        cfg = ctx.cfg
        ccfg = cfg.learner.critic or CriticConfig()
        body = load_value_model(ccfg.path or cfg.model.path, cfg.model.dtype, cfg.model.device)
        if cfg.learner.lora is not None:
            body = lora.apply_lora(body, cfg.learner.lora, task_type="TOKEN_CLS")
        self.critic = Critic(body, ccfg, cfg.learner, total_steps=cfg.trainer.steps)

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        return {"values": self.critic.values(ctx.batch)}

    def before_update(self, batch: TrainBatch, advantages: Any, step: int) -> UpdateResult:
        if advantages.returns_BT is None:
            raise ValueError("the critic needs returns_BT from the advantage / credit entry")
        metrics = self.critic.update(batch, advantages.returns_BT, batch.values_BT)
        if step < self.critic.cfg.warmup_steps:  # VAPO: pre-train the critic on the frozen policy's rollouts
            return UpdateResult({**metrics, "train/critic_warmup": 1.0}, hold_policy=True)
        return UpdateResult(metrics)

    def sharded(self) -> dict[str, ModelAndOptimizer]:
        return {"critic": ModelAndOptimizer(self.critic.model, self.critic.optimizer)}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.critic.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.scheduler.load_state_dict(state["scheduler"])


@register_component("prm")
class PrmComponent(ModelComponent):
    """PRIME's implicit PRM: a trained copy of the initial policy, one cross-entropy step on the
    outcome labels after the advantage read its rewards."""

    provides = frozenset({"prm_logprobs"})

    def __init__(self, ctx: ComponentContext):
        cfg = ctx.cfg
        if not ctx.local_learner or ctx.world > 1 or cfg.learner.lora is not None:
            raise ValueError(
                "algorithm.advantage.name=prime: the implicit PRM needs one local learner without LoRA "
                "(learner.world_size=1, learner.lora: null)"
            )
        self.learner = ctx.learner
        model = copy.deepcopy(ctx.components.model)
        self.prm = ImplicitPRM(
            model, ctx.plan.advantage_cfg, cfg.learner, ctx.learner.logprobs, total_steps=cfg.trainer.steps
        )

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        return {"prm_logprobs": self.learner.score(self.prm.model, ctx.batch)[0]}

    def before_update(self, batch: TrainBatch, advantages: Any, step: int) -> UpdateResult:
        return UpdateResult(self.prm.update(batch, batch.ref_logprobs_BT, batch.rewards_B))

    def sharded(self) -> dict[str, ModelAndOptimizer]:
        return {"prm": ModelAndOptimizer(self.prm.model, self.prm.optimizer)}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.prm.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prm.scheduler.load_state_dict(state["scheduler"])


@register_component("privileged_critic")
class PrivilegedCriticComponent(ModelComponent):
    """A second critic (``learner.critic``'s settings, its own weights and optimizer) that reads each
    row with the env's ``teacher_context`` in its prompt (``learner/privileged.py``); trained towards
    the returns the advantage gives it (``AdvantageOutput.targets["privileged_critic"]``)."""

    provides = frozenset({"privileged_values"})

    def __init__(self, ctx: ComponentContext):
        cfg = ctx.cfg
        if not ctx.local_learner or ctx.world > 1:
            raise ValueError(
                "a privileged critic (need privileged_values, e.g. advantage redippo) runs in this process: "
                "learner.world_size=1, no Ray learner group"
            )
        ccfg = cfg.learner.critic or CriticConfig()
        body = load_value_model(ccfg.path or cfg.model.path, cfg.model.dtype, cfg.model.device)
        if cfg.learner.lora is not None:
            body = lora.apply_lora(body, cfg.learner.lora, task_type="TOKEN_CLS")
        pad_id = ctx.components.tokenizer.pad_token_id
        self.critic = PrivilegedCritic(
            Critic(body, ccfg, cfg.learner, total_steps=cfg.trainer.steps),
            ctx.components.renderer,
            pad_id,
            lambda groups: make_batch(groups, pad_id, cfg.model.device),
            env_id=cfg.env.id,
        )
        self._last: tuple[TrainBatch, torch.Tensor, torch.Tensor] | None = None

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        spliced, positions_BT = self.critic.batch(ctx.groups)
        mask_BT = ctx.batch.loss_mask_BT
        from_rows = torch.zeros_like(mask_BT)
        keep = positions_BT >= 0
        from_rows[keep] = spliced.loss_mask_BT.gather(1, positions_BT.clamp(min=0))[keep].to(mask_BT.dtype)
        if from_rows.shape != mask_BT.shape or not torch.equal(from_rows, mask_BT):
            raise ValueError("the privileged critic's rows do not match the step's batch")
        values_BT = self.critic.values(spliced, positions_BT) * mask_BT.to(torch.float32)
        self._last = (spliced, positions_BT, values_BT)
        return {"privileged_values": values_BT}

    def before_update(self, batch: TrainBatch, advantages: Any, step: int) -> UpdateResult:
        returns_BT = advantages.targets.get("privileged_critic")
        if returns_BT is None or self._last is None:
            raise ValueError(
                "the privileged critic needs its returns from the advantage (AdvantageOutput.targets['privileged_critic'])"
            )
        spliced, positions_BT, values_BT = self._last
        return UpdateResult(self.critic.update(spliced, positions_BT, returns_BT, values_BT.to(returns_BT.dtype)))

    def sharded(self) -> dict[str, ModelAndOptimizer]:
        return {"privileged_critic": ModelAndOptimizer(self.critic.critic.model, self.critic.critic.optimizer)}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.critic.critic.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.critic.scheduler.load_state_dict(state["scheduler"])


@register_component("teacher")
class TeacherComponent(ModelComponent):
    """The plan's teacher (``teaching.py``: an EMA of the policy, frozen checkpoints, a server, a
    mixture): its logprobs with the env's privileged context, its top-k, its decoder layers."""

    provides = frozenset({"teacher_logprobs", "teacher_topk", "teacher_layers"})

    def __init__(self, ctx: ComponentContext):
        if ctx.world > 1:
            raise ValueError("self-distillation's EMA teacher is not sharded yet: use learner.world_size=1")
        self.teaching = Teaching(ctx.cfg, ctx.components, ctx.plan.teacher)
        self.teacher = self.teaching.teacher

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if wanted & {"teacher_logprobs", "teacher_topk"}:
            out.update(self.teaching.scores(ctx.batch, ctx.groups))
        if "teacher_layers" in wanted:
            out["teacher_layers"] = self.teaching.layer_states(ctx.batch)
        return out

    def after_update(self, policy: torch.nn.Module) -> None:
        self.teacher.update(policy)

    def state_dict(self) -> dict[str, Any]:
        return self.teacher.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.teacher.load_state_dict(state)


@register_component("greedy_rollouts")
class GreedyRollouts(ModelComponent):
    """ReMax's baseline: the reward of one greedy (temperature 0) episode per group's task,
    sampled on rank 0 and broadcast."""

    provides = frozenset({"greedy_rewards"})

    def __init__(self, ctx: ComponentContext):
        self.components, self.rank = ctx.components, ctx.rank

    def provide(self, ctx: NeedContext, wanted: frozenset[str]) -> dict[str, Any]:
        return {"greedy_rewards": fsdp.broadcast_object(self._rewards(ctx.groups) if self.rank == 0 else None)}

    def _rewards(self, groups: list[TrajectoryGroup]) -> torch.Tensor:
        engine = self.components.engine(temperature=0.0)
        specs = [
            EpisodeSpec(
                seed=g.trajectories_G[0].info["seed"], group_id=g.group_id, options=g.trajectories_G[0].info["options"]
            )
            for g in groups
        ]
        greedy = {t.group_id: (t.reward or 0.0) for t in engine.run_sync(specs)}
        engine.close()
        return torch.tensor([greedy[g.group_id] for g in groups for _ in g.trajectories_G], dtype=torch.float32)


def check_provided(built: dict[str, ModelComponent], precompute: tuple[str, ...]) -> None:
    """Every need computed before the update has a ``compute`` or a component that provides it."""
    providers = need_providers(built)
    missing = [n for n in precompute if NEEDS[n].compute is None and n not in providers]
    if missing:
        raise ValueError(f"needs {missing} have no component that provides them (built: {', '.join(built)})")

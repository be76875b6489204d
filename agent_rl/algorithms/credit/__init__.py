"""Turn-level and branch-based credit assignment (registry ``credit``).

A credit method replaces the advantage estimator: ``fn(groups, x: AdvantageInputs, state, cfg)``
returns per-token ``advantages_BT`` (zero outside the loss mask) that feed any policy loss. One
module per method:

    spo.py         spo, spo_pp      per-prompt value tracker, prioritised prompt sampling, single stream
    gigpo.py       gigpo            anchor-state step groups + episode groups
    g2po.py        g2po             state-transition graph: node values, edge and TD advantages
    multiscale.py  multiscale       multiscale turn value changes (+ the ``turn_ppo`` policy loss)
    turn_gae.py    turn_gae         GAE over turns with the critic's values
    cbpo.py        cbpo             entropy-screened branches, contrastive branch values   (plan_cbpo)
    arpo.py        arpo             entropy-adaptive branching after tool calls            (plan_arpo)
    vineppo.py     vineppo          Monte Carlo values from branch continuations           (plan_vineppo)

The branch methods need trees of forked trajectories (``RolloutEngine.fork``); their planners,
collected in ``BRANCH_PLANNERS``, tell the trainer where to fork after the first rollouts.
"""

from agent_rl.algorithms.credit import (  # noqa: F401  (registration)
    arpo,
    cbpo,
    g2po,
    gigpo,
    multiscale,
    spo,
    turn_gae,
    vineppo,
)
from agent_rl.algorithms.credit.common import BranchPlan, BranchRequest

# credit name -> fn(groups, cfg, vocab_size, step) -> BranchPlan
BRANCH_PLANNERS = {
    "cbpo": lambda groups, cfg, vocab_size, step: cbpo.plan_cbpo(groups, cfg, vocab_size),
    "arpo": lambda groups, cfg, vocab_size, step: arpo.plan_arpo(groups, cfg, vocab_size, step),
    "vineppo": lambda groups, cfg, vocab_size, step: vineppo.plan_vineppo(groups, cfg),
}

__all__ = ["BRANCH_PLANNERS", "BranchPlan", "BranchRequest"]

"""Turn-level and branch-based credit assignment (registry ``credit``).

A credit method replaces the advantage estimator, with the same signature ``fn(x: AdvantageInputs, cfg)``
(the step's groups in ``x.groups``, its state in ``x.state``); it returns per-token ``advantages_BT`` (zero outside
the loss mask) that feed any policy loss. One
module per method:

    spo.py         spo, spo_pp      per-prompt value tracker, prioritised prompt sampling, single stream
    gigpo.py       gigpo            anchor-state step groups + episode groups
    g2po.py        g2po             state-transition graph: node values, edge and TD advantages
    multiscale.py  multiscale       multiscale turn value changes (+ the ``turn_ppo`` policy loss)
    turn_gae.py    turn_gae         GAE over turns with the critic's values
    cbpo.py        cbpo             entropy-screened branches, contrastive branch values   (plan_cbpo)
    arpo.py        arpo             entropy-adaptive branching after tool calls            (plan_arpo)
    vineppo.py     vineppo          Monte Carlo values from branch continuations           (plan_vineppo)
    diagnostics.py                  the ``credit/`` metrics of every advantage (zero-advantage groups, variance
                                    per turn position) and of branch and graph methods

The branch methods need trees of forked trajectories (``RolloutEngine.fork``); each declares its
planner (``branch_planner=``, ``fn(groups, cfg, vocab_size, step) -> BranchPlan``), which tells the
trainer where to fork after the first rollouts.
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

__all__ = ["BranchPlan", "BranchRequest"]

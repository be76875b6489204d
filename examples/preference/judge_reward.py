"""A plugin (``env.plugins=[judge_reward]``, with ``PYTHONPATH=examples/preference``): Arithmetic-v0
whose reward is a generative judge's p(good), the judge trained on ``agent_rl/PreferenceJudge-v0`` and
exported to ``runs/judge/export`` (docs/preference.md). ``verifier_weight=0``: the judge alone."""

from envs.reward_model import register_reward_model

register_reward_model(
    "examples/Arithmetic-Judge-v0",
    "agent_rl/Arithmetic-v0",
    "runs/judge/export",
    kind="generative",
    weight=1.0,
    verifier_weight=0.0,
)

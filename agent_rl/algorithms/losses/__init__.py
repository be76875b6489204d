"""Policy losses (registry ``policy_loss``): per-token losses; only ``aggregation`` reduces them.

Importing this package registers every built-in loss. Modules by family:

| module        | losses                                                           |
|---------------|------------------------------------------------------------------|
| ppo.py        | ppo_clip, reinforce, dcpo, bapo, wapo, kimi_k3                   |
| sequence.py   | gspo, gmpo, tic_grpo, ctpo, pnpo, dhpo, sspo, kimi               |
| soft.py       | cispo, sapo, gipo, opefo                                         |
| covariance.py | clip_cov, kl_cov                                                 |
| divergence.py | dppo, drpo, bandpo                                               |
| mismatch.py   | sis, score_centering, bpo                                        |
| group.py      | conspo, disco, vimpo, reco                                       |
| distill.py    | sdpo, opsd (sampled-token or top-K, ``distill_topk.py``)          |
| distill_family.py | i_sdpo, powered_opd, g_opd, anti_sd                          |
| ride.py       | ride (representation distillation, base -> teacher extrapolated) |
| subspace.py   | gcpo (ppo_clip + an optimizer hook projecting updates)           |
| query_kl.py   | qkl (ppo_clip + KL on the query likelihood)                      |
| preference.py | dpo, rpo, kto (pairs / labels from rollout groups or a JSONL)     |

``common.py`` holds the helpers and the cross-cutting options (``LossOptions``,
``apply_cross_cutting``, ``compute_policy_loss``).
"""

from agent_rl.algorithms.losses import distill_family, query_kl, ride, sarpo, subspace  # noqa: F401  (registration)
from agent_rl.algorithms.losses.common import (
    LOG_RATIO_CLAMP,
    LossOptions,
    RolloutIsOptions,
    apply_cross_cutting,
    compute_policy_loss,
    masked_mean,
    rollout_is_weights,
)
from agent_rl.algorithms.losses.covariance import (
    ClipCovConfig,
    KlCovConfig,
    clip_cov,
    kl_cov,
)
from agent_rl.algorithms.losses.distill import OpsdConfig, SdpoConfig, opsd, sdpo
from agent_rl.algorithms.losses.divergence import (
    BandpoConfig,
    DppoConfig,
    DrpoConfig,
    band_bounds,
    bandpo,
    dppo,
    drpo,
)
from agent_rl.algorithms.losses.group import (
    ConspoConfig,
    DiscoConfig,
    RecoConfig,
    VimpoConfig,
    conspo,
    disco,
    reco,
    vimpo,
)
from agent_rl.algorithms.losses.mismatch import (
    BpoConfig,
    ScoreCenteringConfig,
    SisConfig,
    bpo,
    score_centering,
    sis,
)
from agent_rl.algorithms.losses.ppo import (
    BapoConfig,
    BapoState,
    DcpoConfig,
    KimiK3Config,
    PpoClipConfig,
    WapoConfig,
    bapo,
    dcpo,
    kimi_k3,
    ppo_clip,
    reinforce,
    wapo,
)
from agent_rl.algorithms.losses.preference import (
    DpoConfig,
    KtoConfig,
    RpoConfig,
    dpo,
    kto,
    preference_pairs,
    rpo,
)
from agent_rl.algorithms.losses.sequence import (
    CtpoConfig,
    DhpoConfig,
    GmpoConfig,
    GspoConfig,
    KimiConfig,
    PnpoConfig,
    SspoConfig,
    TicGrpoConfig,
    ctpo,
    dhpo,
    gmpo,
    gspo,
    kimi,
    pnpo,
    sspo,
    tic_grpo,
)
from agent_rl.algorithms.losses.soft import (
    CispoConfig,
    GipoConfig,
    SapoConfig,
    cispo,
    gipo,
    opefo,
    sapo,
)

__all__ = [
    "LOG_RATIO_CLAMP",
    "BandpoConfig",
    "BapoConfig",
    "BapoState",
    "BpoConfig",
    "CispoConfig",
    "ClipCovConfig",
    "ConspoConfig",
    "CtpoConfig",
    "DcpoConfig",
    "DhpoConfig",
    "DiscoConfig",
    "DpoConfig",
    "DppoConfig",
    "DrpoConfig",
    "GipoConfig",
    "GmpoConfig",
    "GspoConfig",
    "KimiConfig",
    "KimiK3Config",
    "KlCovConfig",
    "KtoConfig",
    "LossOptions",
    "OpsdConfig",
    "PnpoConfig",
    "PpoClipConfig",
    "RecoConfig",
    "RolloutIsOptions",
    "RpoConfig",
    "SapoConfig",
    "ScoreCenteringConfig",
    "SdpoConfig",
    "SisConfig",
    "SspoConfig",
    "TicGrpoConfig",
    "VimpoConfig",
    "WapoConfig",
    "apply_cross_cutting",
    "band_bounds",
    "bandpo",
    "bapo",
    "bpo",
    "cispo",
    "clip_cov",
    "compute_policy_loss",
    "conspo",
    "ctpo",
    "dcpo",
    "dhpo",
    "disco",
    "dpo",
    "dppo",
    "drpo",
    "gipo",
    "gmpo",
    "gspo",
    "kimi",
    "kimi_k3",
    "kl_cov",
    "kto",
    "masked_mean",
    "opefo",
    "opsd",
    "pnpo",
    "ppo_clip",
    "preference_pairs",
    "reco",
    "reinforce",
    "rollout_is_weights",
    "rpo",
    "sapo",
    "score_centering",
    "sdpo",
    "sis",
    "sspo",
    "tic_grpo",
    "vimpo",
    "wapo",
]  # fmt: skip

"""Every registered policy loss: the catalog is complete, configs and docstrings are documented,
losses are finite at extreme ratios, padding changes nothing, missing inputs raise; and the
cross-cutting options (rollout_is, entropy bonus, VAPO NLL, KL) with hand-computed numbers."""

import math

import pytest
import torch
from losses_helpers import assert_close, inputs, logs, reduce

from agent_rl.algorithms import POLICY_LOSSES
from agent_rl.algorithms.losses import (
    LossOptions,
    PpoClipConfig,
    RolloutIsOptions,
    apply_cross_cutting,
    compute_policy_loss,
    ppo_clip,
)
from agent_rl.algorithms.registry import LossInputs, LossOutput

# every registered policy loss (the catalog in docs/objectives.md)
CATALOG = (
    "ppo_clip reinforce gspo gmpo cispo sapo gipo dcpo bapo tic_grpo ctpo pnpo dhpo sspo wapo opefo conspo disco "
    "kimi kimi_k3 clip_cov kl_cov dppo drpo bandpo sis score_centering bpo vimpo reco sdpo opsd"
).split()

# needs -> the LossInputs fields that carry them
NEED_FIELDS = {
    "entropy": ["entropy_BT"],
    "ref_logprobs": ["ref_logprobs_BT"],
    "teacher_logprobs": ["teacher_logprobs_BT"],
    "rewards": ["rewards_B"],
    "group_index": ["group_index_B"],
    "topk": ["topk_logprobs_BTK", "old_topk_logprobs_BTK", "rollout_topk_logprobs_BTK"],
    "rollout_logprobs": ["rollout_logprobs_BT"],
}
# inputs an entry reads only in some modes, or falls back from (so their absence does not raise)
OPTIONAL_IN_DEFAULT = {("dhpo", "entropy"), ("bpo", "rollout_logprobs"), ("sis", "rollout_logprobs")}


def full_inputs(
    logp_BT: torch.Tensor, old_BT: torch.Tensor, mask_BT: torch.Tensor, name: str, seed: int = 0
) -> LossInputs:
    """Every optional field filled (B = 4 rows in 2 groups, K = 3 candidates)."""
    gen = torch.Generator().manual_seed(seed)
    B, T = logp_BT.shape
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    topk_old = torch.log(rand(B, T, 3) * 0.3 + 0.01)
    return LossInputs(
        logprobs_BT=logp_BT,
        old_logprobs_BT=old_BT,
        advantages_BT=torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)[:, None].expand(B, T).clone(),
        loss_mask_BT=mask_BT,
        rollout_logprobs_BT=old_BT + 0.05 * (rand(B, T) - 0.5),
        entropy_BT=rand(B, T) * 2,
        ref_logprobs_BT=old_BT - 0.1,
        teacher_logprobs_BT=old_BT + 0.2,
        rewards_B=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        group_index_B=torch.tensor([0, 0, 1, 1]),
        rollout_topk_logprobs_BTK=topk_old + 0.01,
        topk_logprobs_BTK=topk_old + 0.1 * (rand(B, T, 3) - 0.5),
        old_topk_logprobs_BTK=topk_old,
        step=5,
        state=POLICY_LOSSES.get(name).make_state(),
        extras={"kto_z0": 0.05},  # KTO's reference point, computed by the trainer before the update
    )


def test_catalog_is_registered_and_documented():
    assert sorted(CATALOG) == sorted(set(CATALOG))
    missing = [k for k in CATALOG if k not in POLICY_LOSSES]
    assert not missing, missing
    for entry in POLICY_LOSSES.entries():
        doc = entry.doc
        assert entry.summary and "\n\n" in doc, f"{entry.name}: first line names the method, then the formula"
        for field_name, field in entry.config.model_fields.items():
            assert field_name == "name" or field.description, f"{entry.name}.{field_name} has no description"


@pytest.mark.parametrize("name", CATALOG)
@pytest.mark.parametrize("ratio", [1e-8, 1e8])
def test_finite_at_extreme_ratios(name, ratio):
    # valid probabilities: pi_old = 1e-9 -> pi = 0.1 for 1e8, pi_old = .5 -> pi = 5e-9 for 1e-8
    old_p = 1e-9 if ratio > 1 else 0.5
    old = torch.full((4, 3), math.log(old_p), dtype=torch.float64)
    logp = torch.full((4, 3), math.log(old_p * ratio), dtype=torch.float64, requires_grad=True)
    x = full_inputs(logp, old, torch.ones(4, 3, dtype=torch.float64), name)
    x.topk_logprobs_BTK.requires_grad_(True)
    cfg = POLICY_LOSSES.parse_config(name)
    out = POLICY_LOSSES(cfg)(x, cfg)
    loss = reduce(out, x)
    grads = torch.autograd.grad(loss, [logp, x.topk_logprobs_BTK], allow_unused=True)
    assert torch.isfinite(loss), name
    assert all(g is None or bool(torch.isfinite(g).all()) for g in grads), name
    assert all(math.isfinite(v) for v in out.metrics.values()), (name, out.metrics)


@pytest.mark.parametrize("name", CATALOG)
def test_padding_changes_nothing(name):
    # garbage at masked positions (rows padded differently) leaves the loss and the real tokens' gradient unchanged
    gen = torch.Generator().manual_seed(3)
    old = torch.log(torch.rand(4, 5, generator=gen, dtype=torch.float64) * 0.8 + 0.1)
    lp = old + 0.2 * torch.randn(4, 5, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
    pad = mask == 0
    cfg = POLICY_LOSSES.parse_config(name)

    def run(garbage: float):
        logp = torch.where(pad, torch.full_like(lp, -garbage), lp).requires_grad_(True)
        x = full_inputs(logp, torch.where(pad, torch.full_like(old, -2 * garbage), old), mask, name)
        x.advantages_BT = torch.where(pad, torch.full_like(old, 7.0 * garbage), x.advantages_BT)
        x.entropy_BT = torch.where(pad, torch.full_like(old, 3.0 * garbage), x.entropy_BT)
        loss = reduce(POLICY_LOSSES(cfg)(x, cfg), x)
        (grad,) = torch.autograd.grad(loss, [logp])
        return loss.detach(), grad

    loss_a, grad_a = run(0.5)
    loss_b, grad_b = run(9.0)
    assert_close(loss_a, loss_b, atol=1e-10)
    assert_close(grad_a, grad_b, atol=1e-10)
    assert bool((grad_a[pad] == 0).all())


@pytest.mark.parametrize("entry", POLICY_LOSSES.entries(), ids=lambda e: e.name)
def test_missing_optional_inputs_raise(entry):
    for need in entry.needs:
        if need not in NEED_FIELDS or (entry.name, need) in OPTIONAL_IN_DEFAULT:
            continue
        lp = torch.full((4, 2), -1.0, dtype=torch.float64, requires_grad=True)
        x = full_inputs(lp, lp.detach(), torch.ones(4, 2, dtype=torch.float64), entry.name)
        for field in NEED_FIELDS[need]:
            setattr(x, field, None)
        with pytest.raises(ValueError, match="|".join(NEED_FIELDS[need])):
            entry.fn(x, entry.config(name=entry.name))
    if entry.name == "dhpo":  # entropy is read only in its entropy mode
        x = full_inputs(
            torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.float64), torch.ones(4, 2), "dhpo"
        )
        x.entropy_BT = None
        with pytest.raises(ValueError, match="entropy_BT"):
            entry.fn(x, entry.config(name="dhpo", mix="entropy"))


def test_stateful_entries_have_state_classes():
    for entry in POLICY_LOSSES.entries():
        state = entry.make_state()
        if state is not None:
            state.load_state_dict(state.state_dict())
    assert POLICY_LOSSES.get("bapo").state is not None


# ----------------------------------------------------------------------------------------------
# Cross-cutting options.


def base_inputs(**extra) -> LossInputs:
    #  pi = pi_old everywhere (r = 1), A = [1, -1] per token of one row: ppo_clip L = [-1, 1]
    return inputs([logs([0.5, 0.25])], [logs([0.5, 0.25])], [[1.0, -1.0]], **extra)


def plain(x: LossInputs) -> LossOutput:
    return LossOutput(loss_BT=-x.advantages_BT * torch.exp(x.logprobs_BT - x.old_logprobs_BT))


def test_rollout_is_token_truncate():
    #  w = pi_old / pi_rollout: rollout ln[.25, .5] -> w = [2, .5]; threshold 1.5 -> [1.5, .5]
    #  L = [-1 * 1.5, 1 * .5] -> mean -.5; grad -A w / 2 = [-.75, .25]
    x = base_inputs(rollout_logprobs_BT=[logs([0.25, 0.5])])
    opts = LossOptions(rollout_is=RolloutIsOptions(level="token", mode="truncate", threshold=1.5))
    out = apply_cross_cutting(x, plain(x), opts)
    loss = reduce(out, x)
    (grad,) = torch.autograd.grad(loss, [x.logprobs_BT])
    assert loss.item() == pytest.approx(-0.5) and out.metrics["loss/rollout_is_max"] == pytest.approx(1.5)
    assert_close(grad, [[-0.75, 0.25]])


def test_rollout_is_sequence_and_mask_modes():
    #  sequence: w = exp(ln 2 + ln .5) = 1 on both tokens -> L unchanged [-1, 1]
    x = base_inputs(rollout_logprobs_BT=[logs([0.25, 0.5])])
    out = apply_cross_cutting(x, plain(x), LossOptions(rollout_is=RolloutIsOptions(level="sequence")))
    assert_close(out.loss_BT.detach(), [[-1.0, 1.0]])
    #  mask (IcePop): keep w in [.6, 1.5] -> w = [0 (2 > 1.5), 0 (.5 < .6)]
    out = apply_cross_cutting(
        x, plain(x), LossOptions(rollout_is=RolloutIsOptions(mode="mask", threshold=1.5, threshold_low=0.6))
    )
    assert_close(out.loss_BT.detach(), [[0.0, 0.0]])
    #  mask, upper only: w = [0, .5]
    out = apply_cross_cutting(x, plain(x), LossOptions(rollout_is=RolloutIsOptions(mode="mask", threshold=1.5)))
    assert_close(out.loss_BT.detach(), [[0.0, 0.5]])


def test_entropy_nll_and_kl_terms():
    #  entropy .4, .2 with coef .1:          L -= [.04, .02]
    #  NLL coef .5 on rows with reward > 0:  L += .5 * -logp = [.5 ln 2, .5 ln 4]
    #  KL k3 to ref ln[.25, .25], coef .2:   log r = ref - logp = [-ln 2, 0] -> k3 = [.5 + ln 2 - 1, 0]
    x = base_inputs(entropy_BT=[[0.4, 0.2]], rewards_B=torch.tensor([1.0]), ref_logprobs_BT=[logs([0.25, 0.25])])
    opts = LossOptions(entropy_coef=0.1, nll_coef=0.5, kl_coef=0.2)
    assert opts.needs() == {"entropy", "rewards", "ref_logprobs"}
    out = apply_cross_cutting(x, plain(x), opts)
    k3 = 0.5 + math.log(2) - 1
    expected = [[-1 - 0.04 + 0.5 * math.log(2) + 0.2 * k3, 1 - 0.02 + 0.5 * math.log(4)]]
    assert_close(out.loss_BT.detach(), expected)
    #  gradient of the extra terms: nll -.5 per token; k3' = 1 - ref/pi -> .2 * (1 - .5) = .1 on token 0
    (grad,) = torch.autograd.grad(out.loss_BT.sum(), [x.logprobs_BT])
    assert_close(grad, [[-1 - 0.5 + 0.1, 1 - 0.5]])
    for key in ("loss/entropy", "loss/nll_positive_frac", "loss/kl_ref"):
        assert key in out.metrics


def test_cross_cutting_missing_inputs_raise():
    x = base_inputs()
    for opts, field in [
        (LossOptions(rollout_is=RolloutIsOptions()), "rollout_logprobs_BT"),
        (LossOptions(entropy_coef=0.01), "entropy_BT"),
        (LossOptions(nll_coef=0.1), "rewards_B"),
        (LossOptions(kl_coef=0.1), "ref_logprobs_BT"),
    ]:
        with pytest.raises(ValueError, match=field):
            apply_cross_cutting(x, plain(x), opts)


def test_compute_policy_loss_runs_the_registered_loss_then_the_options():
    x = base_inputs(entropy_BT=[[0.4, 0.2]])
    cfg = POLICY_LOSSES.parse_config({"name": "ppo_clip", "eps_high": 0.3})
    out = compute_policy_loss(x, cfg, LossOptions(entropy_coef=1.0))
    assert_close(out.loss_BT.detach(), (ppo_clip(x, PpoClipConfig(eps_high=0.3)).loss_BT - x.entropy_BT).detach())
    assert LossOptions.model_validate({"kl": {"name": "k3"}, "kl_coef": 0.1}).kl.name == "k3"


def test_kl_term_passes_mask_rewards_and_groups_to_the_estimator():
    # cokl reads KlInputs (mask, rewards, groups): two correct rows of one group, log(ref/pi) sums s = [ln 2, 0]
    #  forward: w = softmax(s) = [2/3, 1/3], c_i = w_i ln w_i + ln 2 / 2 on each row's tokens
    x = inputs(
        [logs([0.25]), logs([0.5])], [logs([0.25]), logs([0.5])], [[0.0], [0.0]],
        ref_logprobs_BT=[logs([0.5]), logs([0.5])],
        rewards_B=torch.tensor([1.0, 1.0]), group_index_B=torch.tensor([0, 0]),
    )  # fmt: skip
    out = apply_cross_cutting(x, plain(x), LossOptions(kl_coef=1.0, kl={"name": "cokl"}))
    w = [2 / 3, 1 / 3]
    assert_close(out.loss_BT.detach(), [[wi * math.log(wi) + math.log(2) / 2] for wi in w])

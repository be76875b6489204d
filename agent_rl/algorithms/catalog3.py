"""Every Catalog III key (``specs/OBJECTIVES.md``, "Catalog III") and where it stands, so that
``agent-rl objectives list`` and ``docs/objectives.md`` leave none out silently.

A key registered in any registry is shown as registered (looked up, never written here); the
others carry their status: ``not yet implemented`` (with what it needs) or ``not implementable
from available sources`` (with the sources searched). ``PIECES`` are the parts of registered rows
the catalog asked for, and where they live.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_YET = "not yet implemented"
NOT_IMPLEMENTABLE = "not implementable from available sources"  # none so far: every paper searched was found


@dataclass(frozen=True)
class Catalog3Key:
    key: str
    section: str  # "later", "mechanism" (the seed gives it), "paper" (the paper is needed)
    status: str  # used when the key is in no registry
    note: str


KEYS: tuple[Catalog3Key, ...] = (
    # formerly "Later"
    Catalog3Key("prime", "later", NOT_YET, "implicit PRM trained online (issue 24)"),
    Catalog3Key("clipo", "later", NOT_YET, "needs an embedding model trained contrastively on the group's successes as a reward component"),
    Catalog3Key("cipo_retry", "later", NOT_YET, "needs the task sampler to queue retry tasks (problem + failed attempt in context) for the next rollout round"),
    Catalog3Key("scrl", "later", NOT_YET, "needs a task generator (policy or configured model) that decomposes all-fail prompts into verifiable sub-problems"),
    Catalog3Key("lspo", "later", NOT_YET, "LoRA-scaffolded re-rolls of all-fail groups; needs learner.lora"),
    Catalog3Key("i_sdpo", "later", NOT_YET, ""),
    Catalog3Key("ttpo", "later", NOT_YET, ""),
    Catalog3Key("serpo", "later", NOT_YET, "needs self-generated rubrics and verdict-token scoring by the policy (a judge pass in the rollout engine)"),
    Catalog3Key("beta_opsd", "later", NOT_YET, ""),
    Catalog3Key("powered_opd", "later", NOT_YET, ""),
    # missed by the first catalog; the seed gives the mechanism
    Catalog3Key("dpo", "mechanism", NOT_YET, "issue 24"),
    Catalog3Key("rpo", "mechanism", NOT_YET, "issue 24"),
    Catalog3Key("kto", "mechanism", NOT_YET, "issue 24"),
    Catalog3Key("anti_sd", "mechanism", NOT_YET, ""),
    Catalog3Key("rlsd", "mechanism", NOT_YET, ""),
    Catalog3Key("g_opd", "mechanism", NOT_YET, ""),
    Catalog3Key("ride", "mechanism", NOT_YET, "needs hidden states of student, base and teacher in the learner's forward pass, and an external teacher model"),
    Catalog3Key("posterior_temperature", "mechanism", NOT_YET, ""),
    Catalog3Key("srpo_reflect", "mechanism", NOT_YET, "needs a reflection-generation pass after the rollout whose text becomes the teacher context"),
    Catalog3Key("qkl", "mechanism", NOT_YET, ""),
    Catalog3Key("sarpo", "mechanism", NOT_YET, "needs a value head on the policy's backbone (a shared-backbone critic) and its SARSA loss in the learner"),
    Catalog3Key("sa_mrpo", "mechanism", NOT_YET, ""),
    Catalog3Key("gcpo", "mechanism", NOT_YET, ""),
    Catalog3Key("redippo", "mechanism", NOT_YET, "needs a second, reference-answer-aware critic beside the standard one"),
    # missed by the first catalog; the paper is needed. Notes: what the seed's abstract says the method
    # needs; "searched" names the queries run (docs corpus) that found no paper text with its formula.
    *(
        Catalog3Key(k, "paper", NOT_YET, note)
        for k, note in (
            ("cipo_constraint", "constraint-infused PO: the seed (002) gives no mechanism; paper not searched yet"),
            ("gupo", "per-group gradients as random variables, Dirichlet uncertainty weights in their aggregation: needs per-group gradients in the learner; searched 'GUPO Dirichlet gradient uncertainty policy optimization aggregation': no paper text"),
            ("cvpo", "token value-variance advantage adjustment + difficulty curriculum: needs a critic's value variance; searched 'CVPO value variance advantage curriculum ...': no paper text"),
            ("mupo", "multiple-solution divergent thinking against diversity collapse (VLMs): searched 'MUPO policy optimization ...': no paper text"),
            ("mgpo", "multi-granularity PO of an agent composing reasoning skills to synthesize trajectories: searched 'MGPO policy optimization LLM ...': no paper text"),
            ("opid", "skills mined from finished trajectories turned into token-level self-distillation advantages: needs a skill miner; paper not searched yet"),
            ("dart_sd", "interaction-state transition graph, critical breakpoint of failed rollouts, supervision on recovery steps: paper not searched yet"),
            ("agent_reflex", "mined reflection skills, reflective SFT data, reflection-guided on-policy distillation: paper not searched yet"),
            ("genac", "a generative critic that reasons before its value: needs a text-generating critic; paper not searched yet"),
            ("absolute_zero", "self-play task proposal and solving: needs a task generator in the task sampler; paper not searched yet"),
            ("skill_self_play", "paper not searched yet"),
            ("omni_opd", "logit-free OPD: Monte Carlo chunk rollouts scored by semantic similarity, black-box teachers: needs external teachers; paper not searched yet"),
            ("e_grm", "generative reward model with convergence-triggered reasoning and a discriminative scorer: paper not searched yet"),
            ("x_tree", "experience tree of action spans mined from trajectories (skill bonuses, teacher context): paper not searched yet"),
            ("context_pilot", "context-offloading tools, context-aware partial rollout, action-level credit: paper not searched yet"),
            ("actor_refiner", "the seed (002) gives the name only; paper not searched yet"),
            ("memreward", "graph-based experience memory predicting rewards from few labels: paper not searched yet"),
        )
    ),
)

# pieces missing inside registered rows, and where they are now
PIECES: tuple[tuple[str, str], ...] = (
    ("sdpo / opsd top-K distribution matching", "`estimator: topk` (forward or reverse KL over the teacher's top-K + tail), losses/distill_topk.py"),
    ("GRPO with process rewards", "advantage `grpo_process` (step rewards -> normalized reward-to-go)"),
    ("external teacher models", "hf checkpoints with the student's tokenizer: `teacher_path` (one, or several mixed by `teacher_weights`) of g_opd, "
     f"powered_opd, beta_opsd, ttpo, anti_sd, i_sdpo; {NOT_YET}: a teacher behind the openai backend, teachers routed per task"),
    ("DeepSeek-R1 format and language-consistency rewards", "envs/rewards.py: R1Format, LanguageConsistency (any env, through ShapedEnv)"),
    ("tool-error shaping (Laguna)", "envs/rewards.py: ToolErrorShaping"),
    ("reward models as trainable components", "issue 24"),
)


def status_rows(registered: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(key, section, status, note) of every key; ``registered`` maps a registered key to its kind."""
    rows = []
    for k in KEYS:
        if k.key in registered:
            rows.append((k.key, k.section, f"registered ({registered[k.key]})", ""))
        else:
            rows.append((k.key, k.section, k.status, k.note))
    return rows

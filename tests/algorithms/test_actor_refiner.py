"""actor_refiner (Search-R2): the Meta-Refiner's cut point by hand with a scripted refiner, the
refined row = the parent's exact prefix + a newly sampled suffix (rollout engine fork), one step."""

from __future__ import annotations

from agent_rl.core.types import Trajectory, Turn
from agent_rl.methods.actor_refiner import ActorRefinerConfig, Refiner, cut_token, parse_step, refine, run_refiner
from tests.builders import trajectory

R2 = [
    "env.id=agent_rl/SearchQA-R2-v0",
    "env.options={max_turns: 2}",
    "trainer.prompts_per_step=1",
    "rollout.max_total_tokens=1024",
]


def traj(name: str, reward: float | None, n_turns: int) -> Trajectory:
    #  P  P  a a o  a a o ...: a prompt of 2 tokens, then turns of 2 sampled tokens and 1 observation token
    ids, mask, turns = [1, 2], [0, 0], []
    for k in range(n_turns):
        start = len(ids)
        ids += [10 + k, 20 + k, 30 + k]
        mask += [1, 1, 0]
        turns.append(Turn(start, start + 2, start + 2, start + 3))
    return trajectory(name, reward, ids=ids, mask=mask, turns=turns)  # no reward: an env error


def scripted(
    scores: dict[str, float], steps: dict[str, int | None], calls: list, fail: set[str] = frozenset()
) -> Refiner:
    def regenerate(cuts):
        calls.extend((t.episode_id, at) for t, at in cuts)
        return [traj(t.episode_id + "'", None if t.episode_id in fail else 1.0, len(t.turns_N)) for t, _ in cuts]

    return Refiner(
        lambda rows: [scores[t.episode_id] for t in rows], lambda rows: [steps[t.episode_id] for t in rows], regenerate
    )


def test_parse_step_by_hand():
    assert parse_step("Step 2 went wrong", 3) == 2 and parse_step(" 3", 3) == 3
    assert (
        parse_step("4", 3) is None
        and parse_step("0", 3) is None
        and parse_step("none", 3) is None
        and parse_step(None, 3) is None
    )


def test_the_cut_falls_on_the_first_token_of_the_trimmers_step():
    t = traj("a", 0.0, 3)
    #  P  P  a0 a0 o0 a1 a1 o1 a2 a2 o2
    #  0  1  2  3  4  5  6  7  8  9  10
    assert [cut_token(t, k) for k in (1, 2, 3)] == [2, 5, 8]
    calls: list = []
    rows = [traj("ok", 1.0, 2), traj("bad", 0.0, 3), traj("junk", 0.0, 2), traj("err", None, 2), traj("lost", 0.0, 2)]
    refiner = scripted(
        {"ok": 0.9, "bad": 0.2, "junk": 0.4999, "lost": 0.0}, {"bad": 3, "junk": None, "lost": 2}, calls, fail={"lost"}
    )
    out, m = refine(rows, refiner, ActorRefinerConfig())  # threshold .5, one round
    # ok is accepted (0.9 >= .5); bad is cut at step 3 (token 8); junk's trimmer named no step: step 1 (token 2);
    # err ended in an env error and is never judged; lost's continuation failed: the original row stays
    assert calls == [("bad", 8), ("junk", 2), ("lost", 5)]
    assert [t.episode_id for t in out] == ["ok", "bad'", "junk'", "err", "lost"]
    assert out[1].info["actor_refiner"] == {
        "coherence": [0.2],
        "round": 1,
        "cut_step": 3,
        "refined_from": "bad",
        "parent_reward": 0.0,
    }
    assert m["actor_refiner/judged"] == 4 and m["actor_refiner/accept_frac"] == 0.25 and m["actor_refiner/refined"] == 2
    assert (
        m["actor_refiner/cut_step_mean"] == 2.0
        and m["actor_refiner/trimmer_unparsed"] == 1
        and m["actor_refiner/regen_failed"] == 1
    )
    assert m["actor_refiner/refined_reward_gain"] == 1.0


def test_max_refinements_judges_the_continuation_again_and_zero_turns_it_off():
    calls: list = []
    refiner = scripted({"a": 0.1, "a'": 0.3, "a''": 0.9}, {"a": 2, "a'": 1, "a''": 1}, calls)
    out, m = refine([traj("a", 0.0, 2)], refiner, ActorRefinerConfig(max_refinements=2))
    assert calls == [("a", 5), ("a'", 2)] and out[0].episode_id == "a''" and m["actor_refiner/judged"] == 2
    assert out[0].info["actor_refiner"]["coherence"] == [0.1, 0.3] and out[0].info["actor_refiner"]["round"] == 2
    out, m = refine([traj("a", 0.0, 2)], scripted({}, {}, calls := []), ActorRefinerConfig(max_refinements=0))
    assert out[0].episode_id == "a" and calls == [] and m["actor_refiner/judged"] == 0


def test_the_refined_row_is_the_exact_prefix_plus_a_newly_sampled_suffix(tmp_path, tiny_model_dir):
    from agent_rl.methods.actor_refiner import ActorRefinerState
    from tests.test_trainer import trainer

    t = trainer(tmp_path, tiny_model_dir, *R2, "trainer.steps=1")
    parents = [x for x in t._rollout(0, 0, 1) if len(x.turns_N) == 2]
    assert parents, "the untrained tiny model takes both turns (no valid answer)"
    state = ActorRefinerState()
    state.bind(t.services)
    real = run_refiner(state, ActorRefinerConfig())
    # the scripted judge rejects everything, the scripted trimmer names step 2; the run's engine regenerates
    refiner = Refiner(lambda rows: [0.0] * len(rows), lambda rows: [2] * len(rows), real.regenerate)
    out, _ = refine(parents, refiner, ActorRefinerConfig())
    for parent, child in zip(parents, out, strict=True):
        cut = parent.turns_N[1].start
        assert child.parent_id == parent.episode_id and child.branch_point == cut and child.group_id == parent.group_id
        assert (
            child.token_ids_T[:cut] == parent.token_ids_T[:cut] and child.loss_mask_T[:cut] == parent.loss_mask_T[:cut]
        )
        assert child.rollout_logprobs_T[:cut] == parent.rollout_logprobs_T[:cut]
        # after the cut: 1 exactly on the new turns' sampled tokens, 0 on the env's observations
        policy = {i for u in child.turns_N for i in range(u.start, u.end)}
        assert child.loss_mask_T == [int(i in policy) for i in range(len(child.token_ids_T))]
        assert child.turns_N[0] == parent.turns_N[0] and child.turns_N[1].start == cut and child.reward is not None
        # the suffix's policy tokens were sampled now (the sampler's logprob of each), its observations were not
        assert all(child.rollout_logprobs_T[i] < 0.0 for i in policy if i >= cut)
        assert all(child.rollout_logprobs_T[i] == 0.0 for i in range(cut, len(child.token_ids_T)) if i not in policy)


def test_a_training_step_with_actor_refiner_on_the_search_env(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    # threshold 1: P(yes) < 1 always, so every episode is cut and regenerated once
    t = trainer(
        tmp_path, tiny_model_dir, *R2, "algorithm.filters=[{name: actor_refiner, threshold: 1.0}]", "trainer.steps=1"
    )
    version = t.learner.version
    metrics = t.step(0)
    assert t.learner.version == version + 1
    assert metrics["actor_refiner/judged"] == 2 and metrics["actor_refiner/accept_frac"] == 0.0
    assert metrics["actor_refiner/refined"] + metrics["actor_refiner/regen_failed"] == 2

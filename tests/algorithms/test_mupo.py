"""mupo (Multi-Group Policy Optimization): partitions by response embeddings, diversity reward,
per-partition standardization and size weights, hand-computed; its need builds embeddings from the
env's info or the generated tokens (and runs in the trainer); without the need it is GRPO."""

from __future__ import annotations

import torch
from losses_helpers import assert_close

from agent_rl.algorithms import ADVANTAGES
from agent_rl.algorithms.advantages.mupo import MupoConfig, bag_of_tokens, mupo, partition
from agent_rl.algorithms.needs import NEEDS, NeedContext
from agent_rl.algorithms.registry import AdvantageInputs
from agent_rl.core.types import Trajectory, TrajectoryGroup, Turn
from tests.builders import trajectory
from tests.test_trainer import trainer  # the quickstart config with a small budget


def inputs(rewards: list[float], emb: list[list[float]] | None) -> AdvantageInputs:
    n = len(rewards)
    extras = {"response_embedding": torch.tensor(emb, dtype=torch.float64)} if emb is not None else {}
    return AdvantageInputs(rewards_B=torch.tensor(rewards), loss_mask_BT=torch.tensor([[0, 1, 1]] * n, dtype=torch.float32),
                           group_index_B=torch.zeros(n, dtype=torch.long), extras=extras)  # fmt: skip


def test_diversity_reward_and_per_partition_standardization_by_hand():
    # partitions {0, 1, 2} (near e1) and {3, 4, 5} (e2); rows 1 and 5 fail
    emb = [[1, 0], [1, 0], [0.8, 0.6], [0, 1], [0, 1], [0, 1]]
    adv = mupo(inputs([1, 0, 1, 1, 1, 0], emb), MupoConfig()).advantages_BT
    # row 0: 1 - cos to e2 = 1 -> div 2 -> s = .9 + .1 * 2 = 1.1; row 2: 1 - .6 -> div .8 -> s = .98; row 1: 0
    # A: mean .693333, unbiased std sqrt(.728267 / 2) = .603434 -> (.406667, -.693333, .286667) / .603434
    # rows 3, 4: distances (1, 1, .4) -> div 1.6 -> s = 1.06; row 5: 0 -> (1.06, 1.06, 0): +-.57735 / -1.15470
    expected_B = [0.673919, -1.148976, 0.475058, 0.577349, 0.577349, -1.154699]
    assert_close(adv, [[0.0, a, a] for a in expected_B], atol=2e-5)


def test_smaller_partitions_weigh_more():
    # sizes 4 and 3: n_avg 3.5; orthogonal partitions -> every correct row's div = 2, s = 1.1
    emb = [[1, 0]] * 4 + [[0, 1]] * 3
    adv = mupo(inputs([1, 1, 0, 0, 1, 0, 0], emb), MupoConfig()).advantages_BT[:, 1]
    # (1.1, 1.1, 0, 0): +-.866025 x 3.5/4; (1.1, 0, 0): (1.154701, -.577350, -.577350) x 3.5/3
    expected = [0.757772, 0.757772, -0.757772, -0.757772, 1.347151, -0.673575, -0.673575]
    assert_close(adv, expected, atol=2e-5)
    flat = mupo(inputs([1, 1, 0, 0, 1, 0, 0], emb), MupoConfig(balance_beta=0.0)).advantages_BT[:, 1]
    assert_close(flat, [0.866025, 0.866025, -0.866025, -0.866025, 1.154701, -0.577350, -0.577350], atol=2e-5)


def test_partitions_keep_their_minimum_size():
    # k-means alone gives 5 + 1; the lone row takes the two rows nearest its centroid (ties: the first rows)
    labels = partition(torch.tensor([[1.0, 0.0]] * 5 + [[0.0, 1.0]]), k=2, size_min=3, iters=20)
    assert labels == [0, 0, 1, 1, 1, 0]
    assert partition(torch.tensor([[1.0, 0.0]] * 5), k=2, size_min=3, iters=20) == [0] * 5  # 5 rows hold one partition


def test_without_embeddings_it_is_grpo():
    x = inputs([1, 0, 1, 1, 0], None)
    grpo = ADVANTAGES.get("grpo")
    assert_close(mupo(x, MupoConfig()).advantages_BT, grpo.fn(x, grpo.config()).advantages_BT, atol=1e-5)
    assert "response_embedding" in ADVANTAGES.get("mupo").needs_for(MupoConfig())


def episode(tokens: list[int], mask: list[int], info: dict | None = None) -> Trajectory:
    n = len(tokens)
    return trajectory("e", 1.0, ids=tokens, mask=mask, turns=[Turn(1, n, n, n)], task="t", info=info)


def test_the_need_reads_the_env_embedding_else_the_generated_tokens():
    assert bag_of_tokens([[5, 7, 5], [7]]).tolist() == [[2.0, 1.0], [0.0, 1.0]]
    compute = NEEDS["response_embedding"].compute
    trajs = [episode([1, 5, 7, 5], [0, 1, 1, 1]), episode([1, 7, 9], [0, 1, 0])]
    ctx = NeedContext(batch=None, groups=[TrajectoryGroup("t", "g", trajs)], step=0, policy=None, score=None)
    assert compute(ctx).tolist() == [[2.0, 1.0], [0.0, 1.0]]  # prompt token 1 and observation token 9 left out
    for t, e in zip(trajs, ([0.5, 0.5], [1.0, 0.0]), strict=True):
        t.info["response_embedding"] = e
    assert compute(ctx).tolist() == [[0.5, 0.5], [1.0, 0.0]]


def test_mupo_runs_in_the_trainer_with_its_need(tmp_path, tiny_model_dir):
    t = trainer(
        tmp_path,
        tiny_model_dir,
        "algorithm.advantage.name=mupo",
        "algorithm.advantage.partition_min=2",
        "rollout.group_size=4",
    )
    metrics = t.step(0)
    # the need gave every row an embedding (the bag of its generated tokens): 4 rows per prompt -> 2 partitions of 2
    assert metrics["adv/mupo_partitions"] == 2.0 and "train/loss" in metrics

"""memreward (arXiv 2603.19310): labels hidden by task hash, the rollout graph and one message-passing
step by hand, GATv2 attention by hand, the GNN fitting a separable memory through the filter, the
state surviving a checkpoint, and real training steps with the key."""

from __future__ import annotations

import math

import pytest
import torch

from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup
from agent_rl.methods.memreward import (
    MemRewardConfig,
    MemRewardState,
    answer_features,
    label_hidden,
    memreward,
    split_response,
)
from agent_rl.methods.memreward_graph import GATv2, HeteroLayer, build_graph


def test_labels_are_hidden_by_the_task_hash():
    # sha256("memreward:task-k")[:8] / 16**8: task-0 .128, task-1 .784, task-2 .770, task-3 .845
    assert [label_hidden(f"task-{k}", 0.8) for k in range(4)] == [True, True, True, False]
    assert [label_hidden(f"task-{k}", 0.775) for k in range(4)] == [True, False, True, False]
    assert not any(label_hidden(f"task-{k}", 0.0) for k in range(4)) and all(
        label_hidden(f"task-{k}", 1.0) for k in range(4)
    )


def test_reasoning_answer_split_and_answer_features():
    assert split_response("a #### b #### 12", ["####", "</think>"]) == ("a #### b", "12")
    assert split_response("think</think> 7", ["####", "</think>"]) == ("think", "7")
    assert split_response("step 1\nso 5\n\n", ["####"]) == ("step 1\nso 5", "so 5")
    # value sign(a) log(1 + |a|) / 20, parses, equals the group's most common answer ("5")
    v5 = math.log(6) / 20
    expected = [[v5, 1, 1], [v5, 1, 0], [-math.log(4) / 20, 1, 0], [0, 0, 0], [v5, 1, 1]]
    torch.testing.assert_close(torch.tensor(answer_features(["5", "x = 5", "-3", "five", "5"])), torch.tensor(expected))


def graph_of_three():
    # memory queries A (0), C (1); new query B (2), nearest memory query C; one rollout each: r0 of A, r1 of C, r2 of B
    query = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.2, 1.0]])
    think = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 4.0]])
    answer = torch.tensor([[2.0, 2.0], [0.0, 2.0], [4.0, 0.0]])
    return build_graph(query, think, answer, torch.tensor([0, 1, 2]), torch.zeros(3, 3), num_memory=2, k=1)


def test_the_graph_of_three_rollouts_by_hand():
    g = graph_of_three()
    edges = {r[1]: e.tolist() for r, e in g.edges.items()}
    assert edges == {
        "generates": [[0, 1, 2], [0, 1, 2]],  # query -> think of its rollout
        "rev_generates": [[0, 1, 2], [0, 1, 2]],
        "leads_to": [[0, 1, 2], [0, 1, 2]],  # think r -> answer r
        "rev_leads_to": [[0, 1, 2], [0, 1, 2]],
        # (src, dst): A receives from C, C from A, the new B from C; nothing flows into the memory from B
        "similar_to": [[1, 0, 1], [0, 1, 2]],
    }
    assert {t: x.shape[0] for t, x in g.x.items()} == {"query": 3, "think": 3, "answer": 3}


def identity(conv: GATv2, att: list[float]) -> GATv2:
    with torch.no_grad():
        for lin in (conv.lin_src, conv.lin_dst):
            lin.weight.copy_(torch.eye(2))
            lin.bias.zero_()
        conv.att.copy_(torch.tensor([att]))
    return conv


def test_one_message_passing_step_by_hand():
    # identity weights, zero attention vector: every node averages what reaches it (self loop on query-query),
    # then the mean over the relations that end at its type, then ReLU
    layer = HeteroLayer(2, heads=1, dropout=0.0)
    for conv in layer.convs.values():
        identity(conv, [0.0, 0.0])
    g = graph_of_three()
    h = layer(g.x, g.edges)
    # A: (think r0 [1, 2] + mean(C, A) [.5, .5]) / 2; C: ([3, -1] + [.5, .5]) / 2 -> ReLU; B: ([0, 4] + mean(C, B) [.1, 1]) / 2
    torch.testing.assert_close(h["query"], torch.tensor([[0.75, 1.25], [1.75, 0.0], [0.05, 2.5]]))
    # think r: (its query + its answer) / 2
    torch.testing.assert_close(h["think"], torch.tensor([[1.5, 1.0], [0.0, 1.5], [2.1, 0.5]]))
    torch.testing.assert_close(h["answer"], torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 4.0]]))  # its think, ReLU


def test_gatv2_attention_by_hand():
    edges = torch.tensor([[0, 1], [0, 0]])  # two sources into one node
    x_src = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    # a = [1, 0]: e = (x_src + x_dst)[:, 0] = [2, 1]; alpha = [s(1), 1 - s(1)]
    conv = identity(GATv2(2, heads=1, dropout=0.0, self_loops=False), [1.0, 0.0])
    a = 1 / (1 + math.exp(-1))
    torch.testing.assert_close(conv(x_src, torch.tensor([[1.0, 1.0]]), edges), torch.tensor([[a, 2 * (1 - a)]]))
    # a = [0, 1], x_dst = [0, -4]: LeakyReLU_0.2 of [-4, -2] -> e = [-0.8, -0.4]
    conv = identity(GATv2(2, heads=1, dropout=0.0, self_loops=False), [0.0, 1.0])
    b = 1 / (1 + math.exp(0.4))
    torch.testing.assert_close(conv(x_src, torch.tensor([[0.0, -4.0]]), edges), torch.tensor([[b, 2 * (1 - b)]]))


# -- the filter, with a scripted embedder: a response that says "right" lies near e0, "wrong" near e1 --------
def fake_embed(texts: list[str]) -> torch.Tensor:
    out = []
    for i, t in enumerate(texts):
        base = (
            [1.0, 0.0, 0.0, 0.0]
            if "right" in t
            else [0.0, 1.0, 0.0, 0.0]
            if "wrong" in t
            else [0.0, 0.0, 1.0, 0.1 * (len(t) % 7)]
        )
        out.append(torch.tensor(base) + 0.05 * torch.sin(torch.arange(4.0) + i))
    return torch.stack(out)


def group(task_id: str, verdicts: list[bool]) -> TrajectoryGroup:
    rows = [Trajectory(task_id, f"g-{task_id}", f"{task_id}-{i}", [1, 2], [0, 1], [0.0, 0.0], [], float(ok), StopReason.DONE,
                       info={"prompt_messages": [{"role": "user", "content": f"question {task_id}"}],
                             "text": f"so {'right' if ok else 'wrong'} #### {5 if ok else 7}"})
            for i, ok in enumerate(verdicts)]  # fmt: skip
    return TrajectoryGroup(task_id, f"g-{task_id}", rows)


SMALL_GNN = {
    "hidden_dim": 16,
    "heads": 2,
    "dot_dim": 8,
    "epochs": 60,
    "lr": 1e-2,
    "refit_epochs": 10,
    "hidden_fraction": 0.5,
}


def bound_state() -> MemRewardState:
    state = MemRewardState()
    state.embed, state.transcript = fake_embed, lambda t: t.info["text"]
    return state


def test_the_gnn_learns_a_separable_memory_and_rewards_the_unlabelled_rows():
    cfg = MemRewardConfig(**SMALL_GNN)
    ids = [f"task-{k}" for k in range(40)]
    labelled = [k for k in ids if not label_hidden(k, 0.5)][:6]
    hidden = [k for k in ids if label_hidden(k, 0.5)][:3]
    state = bound_state()
    # step 1 (warmup): the labelled rollouts fill the memory, the unlabelled group sits out
    # the group's majority answer is right in half the groups, wrong in the other half: only the reasoning tells
    patterns = [[True, False, False, False], [True, True, True, False]]
    first = [group(k, patterns[i % 2]) for i, k in enumerate(labelled)] + [group(hidden[0], [True, True, False, False])]
    out = memreward(first, state, cfg)
    assert out.groups == first[:-1] and out.metrics["memreward/dropped_groups"] == 1.0
    assert len(state.rollouts) == 24 and list(state.queries) == labelled
    assert [r["label"] for r in state.rollouts[:8]] == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    # step 2: the first fit, then the unlabelled rows get the GNN's 0 / 1 (their env rewards were flipped on purpose)
    truth = [[True, False, False, True], [False, False, True, True]]
    second = [group(hidden[1], truth[0]), group(hidden[2], truth[1])]
    for g in second:
        for t in g.trajectories_G:
            t.reward = 1.0 - t.reward  # the hidden label is never what the row ends with
    out = memreward(second, state, cfg)
    assert (
        out.metrics["memreward/fit_loss_last"] < 0.3 and out.metrics["memreward/fit_loss_first"] > 0.6
    )  # BCE from ~log 2
    assert [[t.reward for t in g.trajectories_G] for g in out.groups] == [[float(v) for v in row] for row in truth]
    assert out.metrics["memreward/accuracy"] == 0.0  # measured against the (flipped) env rewards it replaced
    assert len(state.rollouts) == 24 and state.fits == 1  # no labelled group this step: memory unchanged, one fit


def test_the_state_survives_a_checkpoint_and_refit_every_zero_freezes_the_memory():
    cfg = MemRewardConfig(**{**SMALL_GNN, "epochs": 5, "refit_every": 0})
    labelled = [k for k in (f"task-{i}" for i in range(40)) if not label_hidden(k, 0.5)][:3]
    state = bound_state()
    memreward([group(labelled[0], [True, False])], state, cfg)
    memreward([group(labelled[1], [True, False])], state, cfg)  # step 2: fit; frozen from now on
    assert (len(state.rollouts), state.fits) == (2, 1)
    resumed = bound_state()
    resumed.load_state_dict(state.state_dict())
    out = memreward([group(labelled[2], [True])], resumed, cfg)
    assert (len(resumed.rollouts), resumed.fits, resumed.steps) == (
        2,
        1,
        3,
    ) and "memreward/fit_loss_last" not in out.metrics
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.parameters(), state.model.parameters(), strict=True))


def test_memreward_needs_the_run_or_an_embedder():
    with pytest.raises(ValueError, match="memreward"):
        memreward([group("task-3", [True])], MemRewardState(), MemRewardConfig(hidden_fraction=0.0))


def test_two_training_steps_with_memreward(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    spec = "{name: memreward, hidden_fraction: 0.5, hidden_dim: 8, heads: 2, dot_dim: 4, epochs: 3, refit_epochs: 2}"
    t = trainer(
        tmp_path, tiny_model_dir, f"algorithm.filters=[{spec}]", "trainer.prompts_per_step=4", "trainer.steps=2"
    )
    state, version = t.states["filter0"], t.learner.version
    m0 = t.step(0)  # warmup: the labelled groups' rollouts fill the memory, the unlabelled ones sit out
    assert (m0["memreward/labelled_groups"], m0["memreward/hidden_groups"], m0["memreward/dropped_groups"]) == (
        2.0,
        2.0,
        2.0,
    )
    assert state.steps == 1 and len(state.rollouts) == 4 and state.model is None
    m1 = t.step(1)  # the first fit; the unlabelled rows get the GNN's 0 / 1, texts embedded by the tiny policy
    assert (m1["memreward/labelled_groups"], m1["memreward/hidden_groups"], m1["memreward/memory_rollouts"]) == (
        1.0,
        3.0,
        6.0,
    )
    assert state.fits == 1 and "memreward/accuracy" in m1 and t.learner.version == version + 2
    assert state.rollouts[0]["think"].shape == (t.components.model.config.hidden_size,)

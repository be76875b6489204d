"""gcpo's optimizer hook: every update is projected off the initial weights' top singular subspaces."""

from __future__ import annotations

import torch

from agent_rl.algorithms.losses.subspace import GcpoConfig, SubspaceProjection, project_update, top_singular_vectors


def test_projection_by_hand():
    # W0 = diag(3, 2, 1): top-1 singular vectors e1 (left and right). dW = all ones ->
    # (I - e1 e1^T) dW (I - e1 e1^T) zeroes row 0 and column 0
    u, v = top_singular_vectors(torch.diag(torch.tensor([3.0, 2.0, 1.0])), rank_ratio=0.3)  # k = ceil(.9) = 1
    assert u.shape == (3, 1) and torch.allclose(u.abs().flatten(), torch.tensor([1.0, 0.0, 0.0]))
    projected = project_update(torch.ones(3, 3), u, v)
    assert torch.allclose(projected, torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]), atol=1e-6)


def test_optimizer_steps_never_move_along_the_protected_subspaces():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    hook = SubspaceProjection(model, opt, GcpoConfig(rank_ratio=0.4))  # k = 2 of 5 and of 4
    w0 = {p: p.detach().clone() for p in hook.bases}
    bias0 = model[0].bias.detach().clone()
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 6)).pow(2).sum().backward()
        opt.step()
    for p, (u, v) in hook.bases.items():
        delta = p.detach() - w0[p]
        assert delta.abs().max() > 1e-3  # it trains
        assert u.T.matmul(delta).abs().max() < 1e-5  # nothing along the top left singular vectors
        assert delta.matmul(v).abs().max() < 1e-5  # nor the right ones
    assert not torch.equal(model[0].bias.detach(), bias0)  # vectors are not projected
    hook.remove()


def test_the_plan_installs_it_from_the_loss_entry():
    from test_plan import plan_of

    plan = plan_of("algorithm.loss.name=gcpo")
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = plan.install_optimizer_hook(model, opt)
    assert isinstance(hook, SubspaceProjection) and len(hook.bases) == 1
    assert plan_of().install_optimizer_hook(model, opt) is None


def test_the_trainer_installs_it_on_the_learners_optimizer(tmp_path, tiny_model_dir):
    from tests.test_trainer import trainer

    t = trainer(tmp_path, tiny_model_dir, "algorithm.loss.name=gcpo")
    assert isinstance(t.optimizer_hook, SubspaceProjection) and t.optimizer_hook.bases
    embeddings = t.components.model.get_input_embeddings().weight
    assert embeddings not in t.optimizer_hook.bases

"""WeightSync: one gather per step at most, whatever the backend and the rollout source; every
sampler gets the version it was given."""

from __future__ import annotations

import pytest
import torch

from agent_rl.distributed.source import FollowerSource, LocalRolloutSource
from agent_rl.distributed.weights import WeightSync
from agent_rl.models.loading import load_model
from agent_rl.rollout.backends.hf import HfBackend


class RecordingSource:
    """A rollout source whose samplers hold their own weights (asynchronous workers, Ray actors)."""

    needs_weights = True

    def __init__(self) -> None:
        self.received: list[tuple[dict | None, int]] = []

    def sync(self, weights, version: int, fingerprint=None) -> None:
        self.received.append((weights, version))


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(str(tiny_model_dir), "float32", "cpu")


def test_colocated_backend_and_local_source_copy_nothing(model):
    backend = HfBackend(model, pad_token_id=0)
    sync = WeightSync(model, backend, LocalRolloutSource(None, None), rank=0, world=1)
    assert "time/weight_sync_s" in sync(3)
    assert sync.gathers == 0 and backend.policy_version == 3


def test_a_backend_with_its_own_copy_and_asynchronous_workers_share_one_gather(model, tiny_model_dir):
    own = HfBackend(load_model(str(tiny_model_dir), "float32", "cpu"), pad_token_id=0)
    source = RecordingSource()
    sync = WeightSync(model, own, source, rank=0, world=1)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the learner stepped
    sync(1)
    sync(2)
    assert sync.gathers == 2  # one per step
    [(w1, v1), (w2, v2)] = source.received
    assert (v1, v2) == (1, 2) and own.policy_version == 2
    name, param = next(iter(model.state_dict().items()))
    # the source got a detached copy (the learner keeps training in place), the backend the same values
    assert w2[name].data_ptr() != param.data_ptr() and torch.equal(w2[name], param)
    assert torch.equal(own.model.state_dict()[name], param)


def test_colocated_backend_with_asynchronous_workers_gathers_once_for_the_workers(model):
    backend, source = HfBackend(model, pad_token_id=0), RecordingSource()
    sync = WeightSync(model, backend, source, rank=0, world=1)
    sync(5)
    assert sync.gathers == 1 and source.received[0][1] == 5 and backend.policy_version == 5


def test_every_rank_joins_the_one_gather_and_only_rank_0_hands_it_out():
    # several learner ranks: rank 0 samples with an unsharded copy, so the gather (a collective) is
    # needed on every rank; the other ranks hand nothing out
    follower = WeightSync(object(), object(), FollowerSource(), rank=1, world=2)
    assert follower.needs_copy()
    rank0 = WeightSync(object(), object(), RecordingSource(), rank=0, world=2)
    assert rank0.needs_copy()

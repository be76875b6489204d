"""Distributed tests: one small Ray cluster (two nodes of one CPU each, on this machine) for the session."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.test_trainer import SMALL  # the trainer tests' small rollouts


def small_config(tmp_path, model_dir, *overrides: str):
    from agent_rl.config import load_config

    return load_config(
        ROOT / "configs" / "quickstart.yaml", [f"model.path={model_dir}", f"run.root={tmp_path}", *SMALL, *overrides]
    )


@pytest.fixture(scope="session")
def ray_cluster():
    """A head and one more node, one CPU each: placement across nodes without a second machine."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, namespace="agent_rl", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()

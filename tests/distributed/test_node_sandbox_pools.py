"""One sandbox pool actor per Ray node, shared by the envs of that node through the ``ray_node`` backend."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.distributed


def test_one_pool_per_node_shared_by_its_envs(ray_cluster):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from agent_rl.distributed.sandbox_pool import start_pools

    pools = start_pools("process", "agent_rl")  # the caller owns them: they live while it holds the handles

    def _on_node(node_id: str, kill_pool_between: bool = False) -> dict:
        """In a task pinned to ``node_id``: two sandboxes of the node pool, as an env would make them."""
        import ray

        from agent_rl.distributed.sandbox_pool import pool_name, register_backend
        from sandbox import make_sandbox

        register_backend("agent_rl")

        async def scenario() -> dict:
            a, b = make_sandbox(backend="ray_node", timeout_s=5.0), make_sandbox(backend="ray_node", timeout_s=5.0)
            out = {"node": ray.get_runtime_context().get_node_id()}
            res = await a.exec(code="print(6 * 7)")
            out["a"] = res.stdout
            assert res.ok, res.stderr
            await a.write_file("x.txt", "only in a")
            out["b_sees_a"] = (await b.exec(code="import os; print(os.path.exists('x.txt'))")).stdout
            out["a_reads"] = await a.read_file("x.txt")
            pool = ray.get_actor(pool_name(out["node"]), namespace="agent_rl")
            out["pool"] = await pool.stats.remote()
            if kill_pool_between:
                ray.kill(pool, no_restart=False)  # Ray restarts the named pool
                out["after_kill"] = str((await a.exec(code="print(1)")).status)
                for _ in range(120):  # the next calls work once Ray has restarted the pool
                    retry = await a.exec(code="print(2)")
                    if retry.ok:
                        break
                    await asyncio.sleep(0.5)
                out["retry"] = retry.stdout
            await a.close()
            await b.close()
            return out

        return asyncio.run(scenario())

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2
    task = ray.remote(num_cpus=0)(_on_node)
    results = ray.get(
        [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(n, i == 1)
            for i, n in enumerate(nodes)
        ]
    )
    assert [r["node"] for r in results] == nodes
    for r in results:
        assert r["a"] == "42\n"
        assert r["b_sees_a"] == "False\n"  # one session = one work directory
        assert r["a_reads"] == "only in a"
        assert r["pool"]["sessions"] == 2 and r["pool"]["backend"] == "process"
    assert results[0]["pool"]["pid"] != results[1]["pool"]["pid"]  # a pool process per node
    # a pool that died: the call in flight is an infrastructure error, the next one works on the restarted pool
    assert results[1]["after_kill"] == "infra_error"
    assert results[1]["retry"] == "2\n"
    assert len(pools) == 2

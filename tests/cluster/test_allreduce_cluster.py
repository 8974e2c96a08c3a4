"""The all-reduce across two real nodes (network namespaces), two ranks each."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HOSTS = "node1:2,node2:2"


def test_the_code_sees_two_nodes_of_two_ranks(cluster) -> None:
    job = cluster.mpirun(HOSTS, 4, "python", "tests/cluster/_worker_cluster.py", "layout")
    assert job.returncode == 0, job.output[-3000:]
    seen = sorted((json.loads(line.split(" ", 1)[1]) for line in job.output.splitlines()
                   if line.startswith("LAYOUT ")), key=lambda entry: entry["rank"])
    assert [(s["rank"], s["host"], s["local"]) for s in seen] == [
        (0, "node1", 0), (1, "node1", 1), (2, "node2", 0), (3, "node2", 1)]
    assert all(s["nodes"] == 2 and s["local_size"] == 2 for s in seen)
    assert [s["node_ranks"] for s in seen] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    # the node leaders (local rank 0) form their own communicator: world ranks 0 and 2
    assert [s["leaders"] for s in seen] == [[0, 2], None, [0, 2], None]
    # across nodes auto runs the node-aware variant from 1 MiB up (measured: docs/BENCHMARKS.md)
    assert all(s["auto"] == {str(512 << 10): "recursive_doubling", str(1 << 20): "hierarchical",
                             str(64 << 20): "hierarchical"} for s in seen), seen


def test_every_algorithm_dtype_and_op_matches_mpi_bitwise_across_nodes(cluster) -> None:
    job = cluster.mpirun(HOSTS, 4, "python", "tests/cluster/_worker_cluster.py", "allreduce",
                         timeout=180)
    assert job.returncode == 0, job.output[-3000:]
    assert "on 4 ranks, 2 nodes" in job.output, job.output[-3000:]
    assert "ALL OK" in job.output


def test_the_torch_backend_under_mpirun_rendezvous_across_nodes(cluster) -> None:
    # the nodes have no default route: rank 0 once published 127.0.0.1, which node2 cannot reach
    job = cluster.mpirun("node1:1,node2:1", 2, "python", "tests/cluster/_worker_cluster.py",
                         "torch")
    assert job.returncode == 0, job.output[-3000:]
    assert "TORCH OK on 2 ranks" in job.output

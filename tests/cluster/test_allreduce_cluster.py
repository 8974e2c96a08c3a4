"""The all-reduce across two real nodes (network namespaces), two ranks each."""

from __future__ import annotations

import json

import pytest

from deepspeech.distributed.tuning import load_rules

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


def test_tune_writes_rules_for_the_layout_that_allreduce_follows_on_it_only(
        cluster, tmp_path) -> None:
    tuned = tmp_path / "tuned.json"
    job = cluster.mpirun(HOSTS, 4, "python", "-m", "deepspeech", "bench", "allreduce",
                         "--sizes", "64K,2M", "--repeats", "2", "--tune", str(tuned),
                         "--tune-passes", "2", timeout=240)
    assert job.returncode == 0, job.output[-3000:]
    assert f"all-reduce rules for 4 ranks on 2 node(s), 2 pass(es) -> {tuned}" in job.output
    rules = load_rules(tuned)
    assert (rules.world_size, rules.nodes) == (4, 2)
    assert "4 ranks on 2 node(s)" in rules.measured_on
    followed = cluster.mpirun(HOSTS, 4, "python", "tests/distributed/_worker_tuning.py",
                              str(tuned), "follow", timeout=120)
    assert followed.returncode == 0 and "TUNED OK on 4 ranks" in followed.output, \
        followed.output[-3000:]
    # the same 4 ranks on one node: rules for 2 nodes are not applied (these ones, recursive
    # doubling everywhere, differ from the built-in choice at every size checked)
    two_nodes = tmp_path / "two_nodes.json"
    two_nodes.write_text(json.dumps({
        "format": "deepspeech-allreduce-rules/1", "world_size": 4, "nodes": 2,
        "rules": [{"from_bytes": 0, "algorithm": "recursive_doubling"}]}))
    elsewhere = cluster.mpirun("node1:4", 4, "python", "tests/distributed/_worker_tuning.py",
                               str(two_nodes), "elsewhere", timeout=120)
    assert elsewhere.returncode == 0 and "BUILT-IN KEPT on 4 ranks" in elsewhere.output, \
        elsewhere.output[-3000:]


def test_tune_on_nodes_of_different_sizes_times_the_same_candidates_everywhere(
        cluster, tmp_path) -> None:
    """node1 has 2 ranks, node2 one: the node-aware candidate is timed by all or none."""
    tuned = tmp_path / "uneven.json"
    job = cluster.mpirun("node1:2,node2:1", 3, "python", "-m", "deepspeech", "bench", "allreduce",
                         "--sizes", "64K", "--repeats", "1", "--tune", str(tuned),
                         "--tune-passes", "1", timeout=240)
    assert job.returncode == 0, job.output[-3000:]
    assert "hierarchical" in job.output
    assert (load_rules(tuned).world_size, load_rules(tuned).nodes) == (3, 2)

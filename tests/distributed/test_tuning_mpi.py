"""Rules files under real mpirun: written by the benchmark, followed, checked across ranks."""

from __future__ import annotations

import json

import pytest

from deepspeech.distributed.tuning import load_rules

pytestmark = pytest.mark.mpi

HAND_MADE = {"format": "deepspeech-allreduce-rules/1", "world_size": 2, "nodes": 1, "rules": [
    {"from_bytes": 0, "algorithm": "recursive_doubling"},
    {"from_bytes": 1000, "algorithm": "ring", "segment_bytes": 256},
    {"from_bytes": 20000, "algorithm": "hierarchical"},
    {"from_bytes": 100000, "algorithm": "ring"}]}


def test_benchmark_writes_rules_that_allreduce_follows(run_job, tmp_path) -> None:
    tuned = tmp_path / "tuned.json"
    job = run_job("-m deepspeech", 2, "bench", "allreduce", "--sizes", "4K,64K",
                  "--backends", "rd,ring-only@1K,hierarchical,mpi", "--repeats", "2",
                  "--tune", str(tuned), "--tune-passes", "2", timeout=180)
    assert job.returncode == 0, job.output[-3000:]
    assert f"all-reduce rules for 2 ranks on 1 node(s), 2 pass(es) -> {tuned}" in job.output
    rules = load_rules(tuned)
    assert (rules.world_size, rules.nodes) == (2, 1)
    assert {r.algorithm for r in rules.rules} <= {"recursive_doubling", "ring", "hierarchical"}
    job = run_job("_worker_tuning.py", 2, str(tuned), "follow", timeout=120)
    assert job.returncode == 0 and "TUNED OK on 2 ranks" in job.output, job.output[-3000:]


def test_every_algorithm_of_a_rules_file_runs_and_matches_mpi(run_job, tmp_path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(HAND_MADE))
    job = run_job("_worker_tuning.py", 2, str(path), "follow", timeout=120)
    assert job.returncode == 0 and "TUNED OK on 2 ranks" in job.output, job.output[-3000:]


def test_ranks_with_different_rules_are_stopped(run_job, tmp_path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(HAND_MADE))
    job = run_job("_worker_tuning.py", 2, str(path), "mismatch", timeout=120)
    assert job.returncode == 0, job.output[-3000:]
    assert job.output.count("MISMATCH NAMED") == 2, job.output[-3000:]

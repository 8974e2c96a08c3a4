"""Training's gradient buckets under real mpirun: one flat buffer per bucket for the run,
and gradients bitwise those of reducing a fresh ``torch.cat`` of each bucket."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


def test_persistent_buckets_give_the_bits_of_a_fresh_concatenation(run_job) -> None:
    job = run_job("_worker_buckets.py", 2, timeout=120)
    assert job.returncode == 0, job.output[-3000:]
    assert "ALL OK" in job.output and "on 2 ranks" in job.output, job.output[-3000:]

"""A rank that hangs or dies ends the job with a named error, in bounded time."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.mpi

TIMEOUT = 3.0
BOUND = TIMEOUT + 40  # start-up (two torch imports on two cores) and teardown


@pytest.mark.parametrize(("algorithm", "message"), [
    ("ring", "allreduce(ring) on rank 0: no message from rank 1 within 3.0 s "
             "(reduce-scatter step 0)"),
    ("hierarchical", "allreduce(hierarchical) on rank 0: rank 1 did not arrive within 3.0 s"),
])
def test_hanging_rank_is_named_and_the_job_ends(run_job, algorithm: str, message: str) -> None:
    job = run_job("_worker_faults.py", 2, "hang", algorithm, str(TIMEOUT), timeout=BOUND + 30)
    assert job.returncode != 0, job.output[-3000:]
    assert message in job.output, job.output[-3000:]
    assert "MPI_ABORT was invoked on rank 0" in job.output
    assert "finished without noticing" not in job.output
    assert job.seconds < BOUND


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_a_frozen_rank_resumed_by_the_teardown_blames_no_one(run_job, algorithm: str) -> None:
    # Rank 0 names the frozen rank 1 and aborts. mpirun then resumes rank 1 (SIGCONT) before
    # it kills it: its wait must not count the time it was stopped, blame rank 0 and abort
    # the job a second time while the first abort ends it.
    job = run_job("_worker_faults.py", 2, "freeze", algorithm, str(TIMEOUT),
                  timeout=BOUND + 30)
    assert job.returncode != 0, job.output[-3000:]
    assert re.search(r"CommTimeoutError: allreduce\(\w+\) on rank 0: .*rank 1\b", job.output), \
        job.output[-3000:]
    assert "on rank 1:" not in job.output, job.output[-3000:]
    assert job.output.count("MPI_ABORT was invoked") == 1
    assert "munmap_chunk" not in job.output and "Signal: Aborted" not in job.output
    assert job.seconds < BOUND


def test_killed_rank_ends_the_job(run_job) -> None:
    # Open MPI's runtime notices the death itself and ends the job at once
    job = run_job("_worker_faults.py", 2, "kill", "ring", str(TIMEOUT), timeout=BOUND + 30)
    assert job.returncode != 0, job.output[-3000:]
    assert "rank 1" in job.output and "signal 9" in job.output, job.output[-3000:]
    assert job.seconds < BOUND


def test_killed_rank_is_named_when_the_runtime_keeps_going(run_job) -> None:
    # with --enable-recovery mpirun leaves the survivors running: our timeout ends the job
    job = run_job("_worker_faults.py", 2, "kill", "ring", str(TIMEOUT), timeout=BOUND + 30,
                  mpirun_args=("--enable-recovery",))
    assert "allreduce(ring) on rank 0: no message from rank 1 within 3.0 s" in job.output, \
        job.output[-3000:]
    assert "MPI_ABORT was invoked on rank 0" in job.output
    assert "finished without noticing" not in job.output
    assert job.seconds < BOUND

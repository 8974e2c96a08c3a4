"""The Communicator interface on the ring, mpi and torch (gloo) backends, on 2 ranks."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


def test_every_backend_implements_the_interface(run_job) -> None:
    job = run_job("_worker_comm.py", 2, "ring", "mpi", "torch", timeout=180)
    assert job.returncode == 0, job.output[-3000:]
    for backend in ("ring", "mpi", "torch"):
        assert f"{backend} OK" in job.output, job.output[-3000:]

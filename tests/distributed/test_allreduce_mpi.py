"""Our all-reduce against MPI_Allreduce, bit for bit, on 2, 3 and 4 real MPI ranks."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize(("ranks", "matrix"), [(2, "full"), (3, "narrow"), (4, "narrow")])
def test_allreduce_matches_mpi_bitwise(run_job, ranks: int, matrix: str) -> None:
    # 3 ranks: recursive doubling folds an extra rank in; 4 ranks: two "nodes" of two
    job = run_job("_worker_allreduce.py", ranks, matrix, timeout=240)
    assert job.returncode == 0, job.output[-3000:]
    assert "ALL OK" in job.output and f"on {ranks} ranks" in job.output, job.output[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_allreduce_of_cuda_tensors_matches_mpi_bitwise(run_job) -> None:
    # both ranks share the node's first GPU; segments are staged through pinned host
    # buffers unless the MPI library is CUDA-aware
    job = run_job("_worker_allreduce.py", 2, "full", str(7 * 50_000), "cuda", timeout=300)
    assert job.returncode == 0, job.output[-3000:]
    assert "ALL OK" in job.output and "on 2 ranks" in job.output, job.output[-3000:]

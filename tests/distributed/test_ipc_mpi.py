"""The IPC all-reduce on real MPI ranks: shared-memory files standing in for CUDA IPC on
CPU (2 and 3 ranks on a node, 4 ranks as two "nodes" of two), real CUDA IPC on a GPU."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize(("ranks", "ranks_per_node"), [(2, None), (3, None), (4, 2)])
def test_ipc_allreduce_on_cpu(run_job, ranks: int, ranks_per_node: int | None) -> None:
    extra = () if ranks_per_node is None else (str(ranks_per_node),)
    job = run_job("_worker_ipc.py", ranks, "cpu", *extra, timeout=240)
    assert job.returncode == 0, job.output[-3000:]
    assert "ALL OK" in job.output and f"on {ranks} ranks" in job.output, job.output[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ipc_matches_the_staged_path_bitwise(run_job) -> None:
    # both ranks on the node's first GPU: integers as MPI_Allreduce sums them, floats as
    # the staged ring does (a + b = b + a), and the IPC path really taken
    job = run_job("_worker_ipc.py", 2, "cuda", timeout=300)
    assert job.returncode == 0, job.output[-3000:]
    assert "ALL OK" in job.output and "on 2 ranks" in job.output, job.output[-3000:]

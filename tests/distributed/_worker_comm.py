"""The Communicator surface on every backend, in one MPI job.

    _worker_comm.py BACKEND...
"""

from __future__ import annotations

import json
import sys

import torch
from mpi4py import MPI

from deepspeech.distributed import (
    RankMismatchError,
    abort_on_error,
    make_communicator,
    topology,
)

world = MPI.COMM_WORLD


def exercise(backend: str) -> None:
    comm = make_communicator(backend, timeout_s=20.0)
    rank, size = comm.rank, comm.size
    assert (rank, size) == (world.Get_rank(), world.Get_size()), (backend, rank, size)
    comm.barrier()

    x = torch.arange(10, dtype=torch.float32) + rank
    comm.allreduce(x, "sum")
    assert torch.equal(x, torch.arange(10.0) * size + sum(range(size))), (backend, x)
    x = torch.full((3, 5), float(rank + 1))
    comm.allreduce(x, "mean")
    assert torch.allclose(x, torch.full((3, 5), (size + 1) / 2)), (backend, x)
    y = torch.tensor([rank * 1.5 - 7.25, -rank], dtype=torch.float64)
    comm.allreduce(y, "max")
    assert y.tolist() == [(size - 1) * 1.5 - 7.25, 0.0], (backend, y)

    assert comm.max_float(-3.5 + 2.0**-40 * rank) == -3.5 + 2.0**-40 * (size - 1)
    counts = torch.tensor([2**62 + rank, -(rank + 1), 7], dtype=torch.int64)
    comm.sum_int64(counts)
    assert counts.tolist() == [size * 2**62 + sum(range(size)) if size * 2**62 < 2**63
                               else counts[0].item(), -sum(range(1, size + 1)), 7 * size]

    weights = torch.randn(4, 3, dtype=torch.bfloat16) if rank else torch.ones(4, 3,
                                                                                dtype=torch.bfloat16)
    comm.broadcast(weights, root=0)
    assert torch.equal(weights, torch.ones(4, 3, dtype=torch.bfloat16)), (backend, weights)

    gathered = comm.gather_objects({"rank": rank, "name": f"r{rank}"})
    assert [g["rank"] for g in gathered] == list(range(size)), gathered

    comm.check_same("same config", "config")
    try:
        comm.check_same(f"config of rank {min(rank, 1)}", "config")
    except RankMismatchError as error:
        message = str(error)
        assert "config differs across ranks" in message and "rank 0 has" in message, message
    else:
        raise AssertionError(f"{backend}: check_same missed a mismatch")
    config = {"train": {"seed": min(rank, 1), "epochs": 3}, "model": {"rnn": {"hidden": 24}}}
    try:
        comm.check_same(json.dumps(config, sort_keys=True), "resolved config")
    except RankMismatchError as error:
        message = str(error)
        assert "keys that differ: train.seed (rank 0: 0; rank" in message, (backend, message)
        assert "epochs" not in message and "hidden" not in message, (backend, message)
    else:
        raise AssertionError(f"{backend}: check_same missed a config mismatch")

    twin = comm.duplicate()
    z = torch.ones(1000) * rank
    twin.allreduce(z, "sum")
    assert torch.equal(z, torch.full((1000,), float(sum(range(size))))), (backend, z)
    twin.close()
    comm.close()
    # Shared windows left for MPI_Finalize to free can hang the job's exit.
    assert not topology._live_layouts, (backend, topology._live_layouts)
    if rank == 0:
        print(f"{backend} OK", flush=True)


with abort_on_error(world):
    for name in sys.argv[1:]:
        exercise(name)

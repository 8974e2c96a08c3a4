"""Started by ``deepspeech doctor`` under ``mpirun -n 2``: one all-reduce through this package.

Each rank fills a buffer with its rank + 1 and sums it with ``allreduce`` (the ring on
CPU tensors); every element must come back as the sum over ranks. Rank 0 prints one
line, ``ok ...`` with the MPI library, or the exit status says what failed.
"""

from __future__ import annotations

import sys

import torch
from mpi4py import MPI

from .allreduce import allreduce
from .transport import mpi_library

ELEMENTS = 1 << 16
"""Large enough that the ring cuts it into chunks, small enough to take milliseconds."""


def main() -> int:
    """All-reduce once and check the sum; 0 when every rank saw the right one."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    buffer = torch.full((ELEMENTS,), float(rank + 1))
    allreduce(buffer, "sum", comm, timeout_s=30.0)
    expected = size * (size + 1) / 2
    right = bool((buffer == expected).all())
    everyone = comm.allreduce(right, op=MPI.LAND)
    if rank == 0:
        if everyone:
            print(f"ok {mpi_library()}: {size} ranks on this host all-reduced {ELEMENTS:,} floats")
        else:
            print(f"the all-reduce over {size} ranks gave wrong sums (expected {expected:g})")
    return 0 if everyone else 1


if __name__ == "__main__":
    sys.exit(main())

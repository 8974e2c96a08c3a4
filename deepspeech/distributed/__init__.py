"""Collective communication for data-parallel training, over MPI.

Knows nothing of speech; can be lifted out and used alone:

    from deepspeech.distributed import allreduce
    allreduce(tensor, "mean")            # in place, over MPI.COMM_WORLD

`allreduce` is a pipelined ring all-reduce (ring.py explains the algorithm),
with recursive doubling for small buffers and a node-aware shared-memory
variant. `make_communicator` gives training one small interface over it, over
MPI_Allreduce, or over torch.distributed. Every wait has a timeout
(`CommTimeoutError`); `abort_on_error` turns a failure on one rank into the
end of the whole job; `check_same` catches ranks started with different
inputs. Importing this initialises MPI (through mpi4py); a process started
without mpirun is a world of size 1.
"""

from .allreduce import allreduce
from .comm import BACKENDS, Communicator, make_communicator
from .faults import (
    DEFAULT_TIMEOUT_S,
    CommTimeoutError,
    RankMismatchError,
    abort_on_error,
    check_same,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_TIMEOUT_S",
    "CommTimeoutError",
    "Communicator",
    "RankMismatchError",
    "abort_on_error",
    "allreduce",
    "check_same",
    "make_communicator",
]

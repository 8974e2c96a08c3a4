"""Collective communication for data-parallel training, over MPI.

Knows nothing of speech; can be lifted out and used alone:

    from deepspeech.distributed import allreduce
    allreduce(tensor, "mean")            # in place, over MPI.COMM_WORLD

`allreduce` is a pipelined ring all-reduce (ring.py explains the algorithm),
with recursive doubling for small buffers, a node-aware shared-memory
variant, and for GPU buffers one that reads the node peers' GPU memory
through CUDA IPC. `make_communicator` gives training one small interface over it, over
MPI_Allreduce, or over torch.distributed. Every wait has a timeout
(`CommTimeoutError`); `abort_on_error` turns a failure on one rank into the
end of the whole job; `check_same` catches ranks started with different
inputs. Importing this initialises MPI (through mpi4py); a process started
without mpirun is a world of size 1.

Modules, each importing only those listed before it:

* ``faults``, ``transport``: timeouts and rank checks; how a segment reaches MPI;
* ``ring``, ``recursive_doubling``: the flat algorithms;
* ``topology``, ``hierarchical``: which ranks share a node, and their shared
  window; the node-aware algorithm (handed a flat one for between nodes);
* ``ipc``, ``ipc_allreduce``: the node peers' GPU buffers opened through CUDA
  IPC (handles exchanged over MPI, cached per buffer); the node-aware
  algorithm that reduces by reading them;
* ``algorithms``: the registry, name -> function and cost formula, which
  every module below reads and which refuses an unknown name;
* ``costmodel``: the alpha-beta-gamma model;
* ``choice``: the size rule (which algorithm for n bytes);
* ``flat``: the flat dispatch;
* ``tuning``: rules files measured per machine;
* ``allreduce``, ``comm``: the public function; the training communicator.

Its benchmark is ``deepspeech bench allreduce`` (``deepspeech.bench.allreduce``).

Before MPI starts, Open MPI's UCX one-sided component is switched off unless
the user chose otherwise (``OMPI_MCA_osc``): the node-aware all-reduce only
needs shared-memory windows, which the ``sm`` component serves, and on
machines without a UCX network the UCX component's failed start-up crashes
(segmentation fault in ``ucp_cleanup``) when two threads create windows.
"""

import os

os.environ.setdefault("OMPI_MCA_osc", "^ucx")

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

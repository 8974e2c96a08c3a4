"""The communicator the training loop talks to, whatever carries the bytes.

Training needs a handful of collective operations: all-reduce gradients (sum
or mean), agree on exact integers (a max of exponents for fixed-point
gradients, int64 sums), broadcast initial weights, check that all ranks run
the same config, and a barrier. `Communicator` is that surface;
`make_communicator` builds it for one of three backends:

* ``ring`` (default): our `allreduce` over mpi4py (ring, recursive doubling,
  node-aware), with timeouts on every wait;
* ``mpi``: the MPI library's own ``MPI_Allreduce`` (issued as
  ``MPI_Iallreduce`` and polled, so it has the same timeouts), the baseline;
* ``torch``: ``torch.distributed`` with gloo on CPU (and NCCL for CUDA
  tensors), for clusters that already run it.

Launch with ``mpirun -n N ...`` (all backends; torch reads the rank from MPI
and exchanges its rendezvous address through MPI) or ``torchrun`` (torch
backend; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A plain ``python``
process is a world of size 1: every operation returns at once.

Exactness: max and min are exact in any order, and so are integer sums (two's
complement addition is associative, even when it wraps), so these results do
not depend on the backend or the algorithm. Float sums do (rounding order);
each backend is deterministic for a given world size.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import socket
import sys
from typing import Any, NoReturn, Protocol, runtime_checkable

import numpy as np
import torch
import torch.distributed as dist

# Imported here, before any process group exists, on purpose: its functions take
# ``group=group.WORLD`` as a default argument, evaluated at import. Imported after
# ``init_process_group`` (``torch.use_deterministic_algorithms`` pulls it in through
# inductor), those defaults would hold the world group forever: ``destroy_process_group``
# could not free it, gloo's worker threads would outlive it, and one that drops a tensor
# while the interpreter shuts down aborts the process (SIGABRT after a finished run;
# torchrun's agent on the other node then waits 300 s at its exit barrier).
import torch.distributed.nn  # noqa: F401
from mpi4py import MPI

from .allreduce import allreduce
from .faults import (
    DEFAULT_TIMEOUT_S,
    CommTimeoutError,
    allgather_bytes,
    check_same,
    digest,
    raise_if_different,
    wait,
)
from .topology import release_node_layouts

BACKENDS = ("ring", "mpi", "torch")

log = logging.getLogger(__name__)


@runtime_checkable
class Communicator(Protocol):
    """Collective operations over the ranks of one job.

    The backends subclass it and share the operations that follow from ``allreduce``.
    """

    backend: str
    rank: int
    size: int
    timeout_s: float

    def barrier(self) -> None:
        """Wait until every rank has arrived."""

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
        """Overwrite ``tensor`` in place with ``root``'s copy; returns it."""

    def allreduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` in place (sum, mean, max, min); returns it."""

    def use_cuda_paths(self, cuda_ipc: bool, mpi_cuda_aware: bool) -> None:
        """How GPU buffers travel from now on, as the run's execution plan settled it: through
        CUDA IPC inside a node, and handed to MPI directly or staged through host memory.
        Backends that move GPU memory their own way (NCCL) ignore it."""

    def max_float(self, value: float) -> float:
        """The exact maximum of ``value`` over all ranks."""
        buffer = torch.tensor([float(value)], dtype=torch.float64)
        return float(self.allreduce(buffer, "max")[0])

    def sum_int64(self, tensor: torch.Tensor) -> torch.Tensor:
        """Exact, order-independent sum of an int64 tensor, in place."""
        if tensor.dtype != torch.int64:
            raise TypeError(f"sum_int64 needs an int64 tensor, got {tensor.dtype}")
        return self.allreduce(tensor, "sum")

    def check_same(self, value: bytes | str, what: str) -> None:
        """Raise `RankMismatchError` unless every rank passes the same ``value``."""

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's picklable ``value``, in rank order, on every rank."""

    def duplicate(self) -> Communicator:
        """A communicator over the same ranks whose messages never mix with this one's.

        Collective. Give one to each thread that issues collectives: two
        threads sharing a communicator would have to issue their collectives
        in the same global order on every rank, which threads cannot promise.
        """

    def abort(self, exit_code: int = 1) -> NoReturn:
        """End the whole job now (after a fatal error on this rank)."""

    def close(self) -> None:
        """Release backend resources; the communicator is unusable afterwards."""


class MPICommunicator(Communicator):
    """Backends ``ring`` (our all-reduce) and ``mpi`` (the library's) over an mpi4py comm."""

    _MPI_OPS = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def __init__(self, backend: str = "ring", timeout_s: float = DEFAULT_TIMEOUT_S,
                 comm: MPI.Comm | None = None, algorithm: str = "auto", *,
                 owns_comm: bool = False) -> None:
        """``owns_comm``: ``close`` frees ``comm`` (a duplicate made for this object)."""
        if backend not in ("ring", "mpi"):
            raise ValueError(f"MPICommunicator backend must be ring or mpi, got {backend!r}")
        self.backend = backend
        self.timeout_s = timeout_s
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.algorithm = algorithm
        self._owns_comm = owns_comm
        self.cuda_ipc: bool | None = None
        self.mpi_cuda_aware: bool | None = None

    def _wait(self, request: MPI.Request, operation: str) -> None:
        wait(request, self.timeout_s, lambda: CommTimeoutError(
            f"{operation} on rank {self.rank}: not all {self.size} ranks took part within "
            f"{self.timeout_s} s", rank=self.rank))

    def barrier(self) -> None:
        if self.size > 1:
            self._wait(self.comm.Ibarrier(), f"barrier({self.backend})")

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
        if self.size == 1 or tensor.numel() == 0:
            return tensor
        if not tensor.is_contiguous() or tensor.is_cuda:
            staged = tensor.detach().to("cpu", copy=True).contiguous()
            self.broadcast(staged, root)
            tensor.copy_(staged)
            return tensor
        raw = tensor.detach().view(-1).view(torch.uint8).numpy()  # MPI has no bfloat16
        self._wait(self.comm.Ibcast(raw, root=root), f"broadcast({self.backend}) from {root}")
        return tensor

    def use_cuda_paths(self, cuda_ipc: bool, mpi_cuda_aware: bool) -> None:
        self.cuda_ipc, self.mpi_cuda_aware = cuda_ipc, mpi_cuda_aware

    def allreduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.backend == "ring":
            staging = None
            if tensor.is_cuda and self.mpi_cuda_aware is not None:
                staging = not self.mpi_cuda_aware
            return allreduce(tensor, op, self.comm, algorithm=self.algorithm,
                             timeout_s=self.timeout_s, staging=staging, ipc=self.cuda_ipc)
        return self._mpi_allreduce(tensor, op)

    def _mpi_allreduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        if op not in self._MPI_OPS:
            raise ValueError(f"allreduce: unknown op {op!r}; expected sum, mean, max or min")
        if self.size == 1 or tensor.numel() == 0:
            return tensor
        if tensor.dtype in (torch.float16, torch.bfloat16) or tensor.is_cuda \
                or not tensor.is_contiguous():
            # MPI has no bfloat16 (and no portable float16): reduce a float32 copy
            wide = tensor.detach().to("cpu", torch.float32 if tensor.is_floating_point()
                                      else tensor.dtype, copy=True).contiguous()
            self._mpi_allreduce(wide, op)
            tensor.copy_(wide)
            return tensor
        array = tensor.detach().view(-1).numpy()
        self._wait(self.comm.Iallreduce(MPI.IN_PLACE, array, op=self._MPI_OPS[op]),
                   "allreduce(mpi)")
        if op == "mean":
            tensor.div_(self.size)
        return tensor

    def check_same(self, value: bytes | str, what: str) -> None:
        check_same(self.comm, value, what, self.timeout_s)

    def gather_objects(self, value: Any) -> list[Any]:
        if self.size == 1:
            return [value]
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return [pickle.loads(part) for part in allgather_bytes(
            self.comm, data, self.timeout_s, f"gather_objects({self.backend})")]

    def duplicate(self) -> MPICommunicator:
        twin = MPICommunicator(self.backend, self.timeout_s, self.comm.Dup(), self.algorithm,
                               owns_comm=True)
        twin.cuda_ipc, twin.mpi_cuda_aware = self.cuda_ipc, self.mpi_cuda_aware
        return twin

    def abort(self, exit_code: int = 1) -> NoReturn:
        self.comm.Abort(exit_code)
        raise SystemExit(exit_code)  # not reached

    def close(self) -> None:
        # MPI itself is finalised by mpi4py at exit; what the all-reduce built on
        # this communicator (shared windows) must be freed before that.
        release_node_layouts(self.comm)
        if self._owns_comm:
            self.comm.Free()


class TorchCommunicator(Communicator):
    """Backend ``torch``: torch.distributed (gloo on CPU, NCCL for CUDA tensors)."""

    backend = "torch"

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, device: str = "cpu") -> None:
        self._dist = dist
        self.timeout_s = timeout_s
        self._group = None  # None: the default (world) group
        self._owns_group = False
        self._under_mpi = False
        if dist.is_initialized():
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            return
        rank, size, store = _torch_rendezvous(timeout_s)
        self.rank, self.size = rank, size
        self._under_mpi = store is not None
        if size == 1 and store is None and "MASTER_ADDR" not in os.environ:
            return  # a lone process needs no process group
        backend = "gloo"
        if str(device).startswith("cuda") and dist.is_nccl_available():
            _require_a_gpu_per_process()
            backend = "cpu:gloo,cuda:nccl"
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is not None:
            dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                                    timeout=timeout)
        else:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size,
                                    timeout=timeout)
        self._owns_group = True

    def _run(self, operation: str, function, *args, **kwargs) -> None:
        if self.size == 1:
            return
        try:
            function(*args, **kwargs)
        except RuntimeError as error:  # gloo reports timeouts and lost peers this way
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            message = f"{operation}(torch) on rank {self.rank}: {text}"
            if "timed out" in str(error).lower() or "timeout" in str(error).lower():
                raise CommTimeoutError(message, rank=self.rank) from error
            raise RuntimeError(message) from error

    def barrier(self) -> None:
        self._run("barrier", self._dist.barrier, group=self._group)

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
        self._run("broadcast", self._dist.broadcast, tensor, src=root, group=self._group)
        return tensor

    def allreduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        ops = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}
        if op not in ops:
            raise ValueError(f"allreduce: unknown op {op!r}; expected sum, mean, max or min")
        if self.size == 1:
            return tensor
        reduce_op = getattr(self._dist.ReduceOp, ops[op])
        self._run("allreduce", self._dist.all_reduce, tensor, op=reduce_op, group=self._group)
        if op == "mean":
            tensor.div_(self.size)
        return tensor

    def check_same(self, value: bytes | str, what: str) -> None:
        if self.size == 1:
            return
        mine = torch.from_numpy(np.frombuffer(digest(value), dtype=np.uint8).copy())
        everyone = [torch.empty_like(mine) for _ in range(self.size)]
        self._run("check_same", self._dist.all_gather, everyone, mine, group=self._group)
        digests = [bytes(d.numpy()) for d in everyone]
        if len(set(digests)) > 1:  # the same on every rank: all of them exchange the values
            raise_if_different(digests, what, self.gather_objects(value))

    def gather_objects(self, value: Any) -> list[Any]:
        if self.size == 1:
            return [value]
        everyone: list[Any] = [None] * self.size
        self._run("gather_objects", self._dist.all_gather_object, everyone, value,
                  group=self._group)
        return everyone

    def duplicate(self) -> TorchCommunicator:
        twin = object.__new__(TorchCommunicator)
        twin.__dict__.update(self.__dict__)
        twin._owns_group = False
        if self.size > 1:
            twin._group = self._dist.new_group(list(range(self.size)))
        return twin

    def abort(self, exit_code: int = 1) -> NoReturn:
        if self._under_mpi:
            MPI.COMM_WORLD.Abort(exit_code)
        sys.stderr.flush()
        os._exit(exit_code)  # torchrun notices and stops the other workers

    def close(self) -> None:
        if self._owns_group and self._dist.is_initialized():
            self._dist.destroy_process_group()
            self._owns_group = False


LOCAL_SIZE_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE")


def _require_a_gpu_per_process() -> None:
    """NCCL refuses two processes on one GPU ("Duplicate GPU detected") at its first
    collective, deep in a traceback; say so before starting it, with the way out."""
    local_size = next((int(os.environ[name]) for name in LOCAL_SIZE_VARIABLES
                       if os.environ.get(name)), 1)
    gpus = torch.cuda.device_count()
    if local_size > gpus:
        raise ValueError(
            f"distributed.backend=torch runs NCCL on CUDA, which needs a GPU per process: "
            f"{local_size} processes on this node share {gpus} GPU(s). Start at most {gpus} "
            f"per node, or use distributed.backend=ring (it stages through host memory).")


def _torch_rendezvous(timeout_s: float):
    """(rank, size, store or None): from torchrun's variables, else from MPI, else alone."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if size == 1:
        return 0, 1, None
    timeout = datetime.timedelta(seconds=timeout_s)
    address = np.zeros(64, dtype=np.uint8)  # "host:port", NUL-padded
    store = None
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or _routable_address()
        port = int(os.environ.get("MASTER_PORT", "0"))
        store = dist.TCPStore(host, port, size, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        text = f"{host}:{store.port}".encode()
        address[: len(text)] = np.frombuffer(text, dtype=np.uint8)
    wait(world.Ibcast(address, root=0), timeout_s, lambda: CommTimeoutError(
        f"torch rendezvous on rank {rank}: no address from rank 0 within {timeout_s} s",
        rank=rank, peer=0))
    if rank != 0:
        host, port = bytes(address).rstrip(b"\0").decode().rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, is_master=False, timeout=timeout)
    return rank, size, store


def _routable_address() -> str:
    """An address of this host that the other nodes reach: the one on the default route
    (no packet is sent); on nodes without a default route (a cluster's private network
    only) the one its hostname resolves to; else loopback, enough for one node."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def make_communicator(backend: str = "ring", timeout_s: float = DEFAULT_TIMEOUT_S, *,
                      device: str = "cpu", comm: MPI.Comm | None = None) -> Communicator:
    """Build the communicator for ``backend`` (ring, mpi or torch)."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if backend in ("ring", "mpi"):
        return MPICommunicator(backend, timeout_s, comm)
    if backend == "torch":
        if comm is not None:
            raise ValueError("the torch backend runs on torch.distributed's world, not on "
                             "an MPI communicator")
        return TorchCommunicator(timeout_s, device)
    raise ValueError(f"unknown distributed backend {backend!r}; expected one of "
                     f"{', '.join(BACKENDS)}")

"""How a segment of a tensor gets into and out of MPI.

The collective algorithms (ring, recursive doubling) speak in segments:
"send this slice to rank r", "receive a slice from rank l and reduce it into
this one", "receive a slice into this one and pass it on". This module decides
what memory MPI actually touches:

* `DirectTransport`: MPI reads and writes the tensor's own memory. Used for
  CPU tensors (zero copy) and for CUDA tensors when the MPI library is
  CUDA-aware (`mpi_is_cuda_aware`). Segments received for a reduction land in
  a small pool of scratch buffers next to the tensor (host or device).
* `StagedTransport`: CUDA tensors with an MPI that cannot read GPU memory.
  Each outgoing segment is copied into a pinned host buffer and sent from
  there; each incoming segment lands in a pinned host buffer, is copied to the
  GPU and reduced there. Buffers come from a pool that recycles them as soon as
  their send has completed and their copy has run, so the host holds only the
  segments in flight, never the whole tensor. All-gather segments are passed
  on from the host buffer they arrived in, without a round trip to the GPU.

Staging works on CPU tensors too (the "device" is then the CPU and the
copies are plain memcpys). The tests force it that way, which is how the
segment logic of the GPU path is exercised on machines without a GPU.

MPI only ever sees bytes (``MPI.BYTE``): MPI has no bfloat16 type, and the
reduction is always done by us, so the element type never matters to MPI.
Buffers are handed over as raw addresses (``MPI.memory.fromaddress``), which
costs about 1 us, against about 15 us for mpi4py's DLPack path.

Per-call overhead matters (a 256 KiB all-reduce takes about 100 us), so
transports and their scratch buffers are kept per thread and reused, and CPU
reductions of numpy-native dtypes go through numpy (about 1 us a call against
5-7 us for a torch call on a slice); both round IEEE operations identically.
Numpy would warn on float overflow, which torch never does; the reductions
therefore run in a per-thread context where numpy's error state is "ignore"
(`quietly`).
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from mpi4py import MPI

T = TypeVar("T")
Op = str  # "sum" | "max" | "min"; "mean" is a sum followed by a division


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int8: np.int8,
                 torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
                 torch.uint8: np.uint8}
_NUMPY_OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum}
_TORCH_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "sum": torch.Tensor.add_,
    "max": lambda dst, src: torch.maximum(dst, src, out=dst),
    "min": lambda dst, src: torch.minimum(dst, src, out=dst),
}


def reduce_into(dst: torch.Tensor, src: torch.Tensor, op: Op) -> None:
    """``dst = dst (op) src`` in place, element-wise, with torch."""
    try:
        _TORCH_OPS[op](dst, src)
    except KeyError:
        raise ValueError(f"unknown reduction {op!r}; expected sum, max or min") from None


_local = threading.local()


def quietly(function: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run ``function`` with numpy floating-point warnings off, in this thread only."""
    context = getattr(_local, "context", None)
    if context is None:
        context = _local.context = contextvars.copy_context()
        context.run(np.seterr, all="ignore")
    if _local.__dict__.get("inside"):
        return function(*args, **kwargs)
    _local.inside = True
    try:
        return context.run(function, *args, **kwargs)
    finally:
        _local.inside = False


class Buffer:
    """A flat contiguous tensor addressed by element ranges: MPI spans, in-place math."""

    __slots__ = ("tensor", "address", "itemsize", "array")

    def __init__(self, tensor: torch.Tensor, use_numpy: bool = True) -> None:
        self.tensor = tensor
        self.address = tensor.data_ptr()
        self.itemsize = tensor.element_size()
        numpy_ok = use_numpy and not tensor.is_cuda and tensor.dtype in _NUMPY_DTYPES
        self.array: np.ndarray | None = tensor.numpy() if numpy_ok else None

    def span(self, start: int, stop: int) -> list:
        """MPI buffer spec for elements ``[start, stop)``."""
        return [MPI.memory.fromaddress(self.address + start * self.itemsize,
                                       (stop - start) * self.itemsize), MPI.BYTE]

    def reduce(self, start: int, stop: int, other: Buffer, op: Op, other_start: int = 0) -> None:
        """``self[start:stop] (op)= other[other_start : other_start + stop - start]``."""
        end = other_start + stop - start
        if self.array is not None and other.array is not None:
            dst = self.array[start:stop]
            _NUMPY_OPS[op](dst, other.array[other_start:end], out=dst)
        else:
            reduce_into(self.tensor[start:stop], other.tensor[other_start:end], op)

    def copy_from(self, start: int, stop: int, other: Buffer, other_start: int = 0) -> None:
        """``self[start:stop] = other[other_start:...]``; asynchronous from pinned memory."""
        end = other_start + stop - start
        if self.array is not None and other.array is not None:
            self.array[start:stop] = other.array[other_start:end]
            return
        source = other.tensor[other_start:end]
        self.tensor[start:stop].copy_(source, non_blocking=source.is_pinned())

    def divide(self, start: int, stop: int, divisor: int) -> None:
        if self.array is not None:
            dst = self.array[start:stop]
            np.divide(dst, divisor, out=dst)
        else:
            self.tensor[start:stop].div_(divisor)


class _Pool:
    """Scratch segments of one capacity; a buffer is reused once its ``ready`` test passes."""

    def __init__(self, capacity: int, dtype: torch.dtype, device: torch.device, pin: bool):
        self.capacity, self._dtype, self._device, self._pin = capacity, dtype, device, pin
        self._free: list[Buffer] = []
        self._busy: list[tuple[Buffer, Callable[[], bool]]] = []
        self.allocated = 0

    def acquire(self) -> Buffer:
        if not self._free and self._busy:
            still = []
            for buffer, ready in self._busy:
                if ready():
                    self._free.append(buffer)
                else:
                    still.append((buffer, ready))
            self._busy = still
        if self._free:
            return self._free.pop()
        self.allocated += 1
        return Buffer(torch.empty(self.capacity, dtype=self._dtype, device=self._device,
                                  pin_memory=self._pin))

    def release(self, buffer: Buffer, ready: Callable[[], bool] | None = None) -> None:
        if ready is None:
            self._free.append(buffer)
        else:
            self._busy.append((buffer, ready))

    def settle(self, keep: int) -> None:
        """All transfers are done: everything is free again; keep at most ``keep`` buffers."""
        self._free.extend(buffer for buffer, _ in self._busy)
        self._busy = []
        del self._free[keep:]


_KEEP = 4  # scratch buffers a transport keeps between calls


def _after_stream(device: torch.device) -> Callable[[], bool]:
    """A test that passes once the work queued so far on ``device`` has run."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event.query


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class DirectTransport:
    """MPI reads and writes the tensor's memory itself (CPU, or CUDA-aware MPI).

    Receive tokens are scratch buffers (reductions) or ``None`` (copies land
    in place); sends read the tensor.
    """

    staged = False

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self._device = device
        self._cuda = device.type == "cuda"
        self._scratch = _Pool(0, dtype, device, pin=False)
        self.data: Buffer

    def bind(self, flat: torch.Tensor, capacity: int) -> DirectTransport:
        """Work on ``flat`` next, with scratch segments of at least ``capacity`` elements."""
        self.data = Buffer(flat)
        if self._scratch.capacity < capacity:
            self._scratch = _Pool(capacity, flat.dtype, self._device, pin=False)
        return self

    def start(self) -> None:
        """Kernels still writing the tensor must finish before MPI reads it."""
        if self._cuda:
            _sync(self._device)

    def finish(self) -> None:
        self._scratch.settle(_KEEP)
        del self.data  # do not keep the caller's tensor alive

    def isend(self, comm: MPI.Comm, start: int, stop: int, dest: int, tag: int) -> MPI.Request:
        if self._cuda:  # a reduction kernel may still be writing this range
            _sync(self._device)
        return comm.Isend(self.data.span(start, stop), dest, tag)

    def irecv_reduce(self, comm: MPI.Comm, n: int, source: int,
                     tag: int) -> tuple[MPI.Request, Buffer]:
        scratch = self._scratch.acquire()
        return comm.Irecv(scratch.span(0, n), source, tag), scratch

    def finish_reduce(self, token: Buffer, start: int, stop: int, op: Op) -> None:
        self.data.reduce(start, stop, token, op)
        self._scratch.release(token, _after_stream(self._device) if self._cuda else None)

    def irecv_copy(self, comm: MPI.Comm, start: int, stop: int, source: int,
                   tag: int) -> tuple[MPI.Request, None]:
        return comm.Irecv(self.data.span(start, stop), source, tag), None

    def finish_copy(self, token: None, start: int, stop: int) -> None:
        return None

    def forward(self, comm: MPI.Comm, token: None, start: int, stop: int, dest: int,
                tag: int) -> MPI.Request:
        return comm.Isend(self.data.span(start, stop), dest, tag)

    def drop(self, token: None) -> None:
        return None

    @property
    def buffers_allocated(self) -> int:
        return self._scratch.allocated


class StagedTransport:
    """Segments travel through (pinned) host buffers; reductions run on the tensor's device.

    Receive tokens are host buffers; after ``finish_copy`` the token is the
    pair (host buffer, "device copy done" test) so it can be passed on.
    """

    staged = True

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self._device = device
        self._cuda = device.type == "cuda"
        self._pin = self._cuda and torch.cuda.is_available()
        self._host = _Pool(0, dtype, torch.device("cpu"), pin=self._pin)
        self._device_scratch = Buffer(torch.empty(0, dtype=dtype, device=device))
        self.data: Buffer

    def bind(self, flat: torch.Tensor, capacity: int) -> StagedTransport:
        """Work on ``flat`` next, with host segments of at least ``capacity`` elements."""
        # numpy stays out: the reductions are what a GPU would run, through torch
        self.data = Buffer(flat, use_numpy=False)
        if self._host.capacity < capacity:
            self._host = _Pool(capacity, flat.dtype, torch.device("cpu"), pin=self._pin)
            # one device scratch segment suffices: copies and reductions share a stream
            self._device_scratch = Buffer(
                torch.empty(capacity, dtype=flat.dtype, device=self._device), use_numpy=False)
        return self

    def _done(self) -> Callable[[], bool]:
        return _after_stream(self._device) if self._cuda else _always

    def start(self) -> None:
        return None  # every copy below is ordered on the current stream

    def finish(self) -> None:
        """Host buffers must outlive the asynchronous copies that read them."""
        _sync(self._device)
        self._host.settle(_KEEP)
        del self.data  # do not keep the caller's tensor alive

    def isend(self, comm: MPI.Comm, start: int, stop: int, dest: int, tag: int) -> MPI.Request:
        host = self._host.acquire()
        # device to host is synchronous (pageable destination semantics): MPI reads it next
        host.tensor[: stop - start].copy_(self.data.tensor[start:stop])
        request = comm.Isend(host.span(0, stop - start), dest, tag)
        self._host.release(host, request.Test)
        return request

    def irecv_reduce(self, comm: MPI.Comm, n: int, source: int,
                     tag: int) -> tuple[MPI.Request, Buffer]:
        host = self._host.acquire()
        return comm.Irecv(host.span(0, n), source, tag), host

    def finish_reduce(self, token: Buffer, start: int, stop: int, op: Op) -> None:
        self._device_scratch.copy_from(0, stop - start, token)
        self.data.reduce(start, stop, self._device_scratch, op)
        self._host.release(token, self._done())

    def irecv_copy(self, comm: MPI.Comm, start: int, stop: int, source: int,
                   tag: int) -> tuple[MPI.Request, Buffer]:
        host = self._host.acquire()
        return comm.Irecv(host.span(0, stop - start), source, tag), host

    def finish_copy(self, token: Buffer, start: int,
                    stop: int) -> tuple[Buffer, Callable[[], bool]]:
        self.data.copy_from(start, stop, token)
        return token, self._done()

    def forward(self, comm: MPI.Comm, token: tuple[Buffer, Callable[[], bool]],
                start: int, stop: int, dest: int, tag: int) -> MPI.Request:
        """Pass on the host copy that just arrived (no round trip through the device)."""
        host, copied = token
        request = comm.Isend(host.span(0, stop - start), dest, tag)
        self._host.release(host, lambda: request.Test() and copied())
        return request

    def drop(self, token: tuple[Buffer, Callable[[], bool]]) -> None:
        """A received host buffer that is not passed on goes back to the pool."""
        host, copied = token
        self._host.release(host, copied)

    @property
    def buffers_allocated(self) -> int:
        return self._host.allocated


def _always() -> bool:
    return True


Transport = DirectTransport | StagedTransport


def get_transport(flat: torch.Tensor, capacity: int, staging: bool | None) -> Transport:
    """This thread's transport for ``flat``, bound to it with scratch of ``capacity`` elements.

    ``staging=None`` stages only CUDA tensors on an MPI that is not CUDA-aware.
    """
    if staging is None:
        staging = flat.is_cuda and not mpi_is_cuda_aware()
    cache = getattr(_local, "transports", None)
    if cache is None:
        cache = _local.transports = {}
    key = (staging, flat.dtype, flat.device)
    transport = cache.get(key)
    if transport is None:
        cls = StagedTransport if staging else DirectTransport
        transport = cache[key] = cls(flat.dtype, flat.device)
    return transport.bind(flat, capacity)


def staging_buffer(like: torch.Tensor) -> torch.Tensor:
    """This thread's pinned host buffer, viewed with ``like``'s shape and dtype.

    Kept between calls and grown as needed: pinning memory costs more than
    the small transfers it serves.
    """
    nbytes = like.numel() * like.element_size()
    buffer = getattr(_local, "staging", None)
    if buffer is None or buffer.numel() < nbytes:
        buffer = _local.staging = torch.empty(nbytes, dtype=torch.uint8,
                                              pin_memory=torch.cuda.is_available())
    return buffer[:nbytes].view(like.dtype).view(like.shape)


def discard_transports() -> None:
    """Forget this thread's transports (after a failed collective left them mid-transfer)."""
    _local.transports = {}


@functools.cache
def mpi_library() -> str:
    """The MPI library's name and version ("Open MPI v5.0.11"), without its build details."""
    return MPI.Get_library_version().split(",")[0].strip("\0 \n")


def mpi_is_cuda_aware() -> bool:
    """True when GPU buffers may be handed to the MPI library directly.

    ``DEEPSPEECH_MPI_CUDA_AWARE=0|1`` overrides what the library reports
    (``mpi_reports_cuda_support``). Training passes its execution plan's decision instead.
    """
    forced = os.environ.get("DEEPSPEECH_MPI_CUDA_AWARE")
    if forced is not None:
        return forced.strip().lower() in ("1", "true", "yes")
    return mpi_reports_cuda_support()


@functools.cache
def mpi_reports_cuda_support() -> bool:
    """Whether the loaded libmpi says it can read and write CUDA memory: Open MPI's
    ``MPIX_Query_cuda_support()``; an MPI without it is taken not to (staging is always
    correct)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi.so" in line}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            query = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    return False



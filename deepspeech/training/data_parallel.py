"""Data-parallel gradient synchronization over ``deepspeech.distributed``.

Two modes, chosen by ``distributed.deterministic``:

* Default: gradients are fused into buckets of ``distributed.bucket_mb`` in a
  fixed order (reverse registration order, roughly the order backward produces
  them). While the last micro-batch's backward still runs, autograd hooks mark
  parameters ready and a communication thread all-reduces each complete bucket,
  strictly in bucket order, so every rank issues the same collectives in the
  same order. Bitwise reproducible for a given world size.

* Deterministic: each micro-batch gradient is converted to fixed point (int64,
  one power-of-two scale per bucket, agreed by an exact max-reduction over all
  ranks and micro-batches) and the integers are summed. Integer sums do not
  depend on order or on which process computed a micro-batch, so the weights
  after N steps are bitwise identical for 1, 2, 4 ... processes. Batch-norm
  running statistics get the same treatment: each step applies the mean of the
  per-micro-batch updates, summed in fixed point.

Buffers (batch-norm running statistics) in the default mode follow rank 0, as
in PyTorch's DistributedDataParallel.
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import threading
import time
from typing import Any

import torch

from deepspeech.config import DistributedConfig
from deepspeech.distributed import tuning
from deepspeech.distributed.comm import Communicator, make_communicator
from deepspeech.errors import ConfigError
from deepspeech.execution import ExecutionPlan
from deepspeech.training.determinism import state_dict_digest

log = logging.getLogger(__name__)
FIXED_POINT_BITS = 62


class DataParallelSync:
    """``GradientSync`` for several processes (or one, in deterministic mode)."""

    def __init__(self, config: DistributedConfig, comm: Communicator | None = None,
                 device: str = "cpu") -> None:
        self.config = config
        if config.allreduce_tuning:
            try:
                tuning.use_rules(config.allreduce_tuning)
            except tuning.TuningFileError as error:
                raise ConfigError(f"distributed.allreduce_tuning: {error}") from None
        try:
            self.comm = comm or make_communicator(config.backend, timeout_s=config.timeout_s,
                                                  device=device)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        self.rank, self.size = self.comm.rank, self.comm.size
        self.deterministic = config.deterministic
        self.buckets: list[list[torch.nn.Parameter]] = []
        self.comm_wait_seconds = 0.0
        self._armed = False
        self._micro_gradients: list[torch.Tensor] = []
        self._micro_buffer_deltas: list[torch.Tensor] = []
        self._buffers_before: torch.Tensor | None = None
        self._tracked_before: list[int] = []
        self._overlap: _OverlappedReducer | None = None

    # -- set-up ---------------------------------------------------------------
    @property
    def gradient_hooks(self) -> bool:
        return not self.deterministic  # the overlapped reducer's

    def check_same(self, value: str, what: str) -> None:
        self.comm.check_same(value, what)

    def prepare(self, model: torch.nn.Module, plan: ExecutionPlan) -> None:
        """Broadcast rank 0's weights and buffers, check that all ranks agree, build buckets;
        GPU buffers travel as ``plan`` says."""
        self.comm.use_cuda_paths(plan.cuda_ipc, plan.mpi_cuda_aware)
        shapes = ";".join(f"{n}:{tuple(p.shape)}" for n, p in model.state_dict().items())
        self.comm.check_same(shapes, "parameter names and shapes")
        for tensor in model.state_dict().values():
            if tensor.is_floating_point() or tensor.dtype == torch.int64:
                self.comm.broadcast(tensor, root=0)
        self.comm.check_same(state_dict_digest(model.state_dict()), "weights after broadcast")
        parameters = [p for p in model.parameters() if p.requires_grad]
        self.buckets = _make_buckets(list(reversed(parameters)),
                                     int(self.config.bucket_mb * 2**20))
        if not self.deterministic:
            # The reducer's thread gets its own communicator: its collectives can
            # never be matched with the training thread's.
            self._overlap = _OverlappedReducer(self.comm.duplicate(), self.buckets)
        self._snapshot_buffers(model)
        mode = "deterministic fixed-point" if self.deterministic else "overlapped"
        log.info("data parallel over %d processes (%s backend, %s mode), %d gradient buckets",
                 self.size, self.config.backend, mode, len(self.buckets))

    # -- per micro-batch --------------------------------------------------------
    def start_micro_batch(self, last: bool) -> None:
        if last and self._overlap is not None:
            self._overlap.arm()
            self._armed = True

    def micro_batch_done(self, model: torch.nn.Module) -> None:
        if not self.deterministic:
            return
        flat = torch.cat([_grad_or_zeros(p).reshape(-1) for b in self.buckets for p in b])
        self._micro_gradients.append(flat)
        for parameter in model.parameters():
            parameter.grad = None
        buffers = _running_buffers(model)
        if buffers.numel():
            self._micro_buffer_deltas.append(buffers - self._buffers_before)
            _set_running_buffers(model, self._buffers_before)

    # -- per step -----------------------------------------------------------------
    def finish_step(self, model: torch.nn.Module, local_loss: torch.Tensor,
                    stop: bool = False) -> tuple[float, bool]:
        start = time.perf_counter()
        loss_and_stops = torch.tensor([float(local_loss), float(stop)], dtype=torch.float64)
        self.comm.allreduce(loss_and_stops, op="sum")
        if self.deterministic:
            self._deterministic_reduce(model)
            self.comm_wait_seconds += time.perf_counter() - start
        else:
            if not self._armed:  # no micro-batch on this rank: contribute zeros
                self._overlap.arm()
            self._armed = False
            self.comm_wait_seconds += self._overlap.finish()
            for tensor in _running_buffer_tensors(model):
                self.comm.broadcast(tensor, root=0)
        self._snapshot_buffers(model)
        return float(loss_and_stops[0]), bool(loss_and_stops[1] > 0)

    def _snapshot_buffers(self, model: torch.nn.Module) -> None:
        """Batch-norm statistics at the start of a step (micro-batches restart from them)."""
        self._buffers_before = _running_buffers(model)
        self._tracked_before = [int(m.num_batches_tracked or 0) for m in _batch_norms(model)]

    def _deterministic_reduce(self, model: torch.nn.Module) -> None:
        sizes = [sum(p.numel() for p in bucket) for bucket in self.buckets]
        local = self._micro_gradients or [torch.zeros(sum(sizes))]
        micro_count = torch.tensor([len(self._micro_gradients)], dtype=torch.int64)
        self.comm.allreduce(micro_count, op="sum")
        summed = _fixed_point_sum(self.comm, local, sizes, int(micro_count[0]))
        offset = 0
        for bucket in self.buckets:
            for parameter in bucket:
                count = parameter.numel()
                parameter.grad = summed[offset:offset + count].view_as(parameter).to(
                    device=parameter.device, dtype=parameter.dtype, copy=True)
                offset += count
        self._micro_gradients.clear()
        if self._buffers_before is not None and self._buffers_before.numel():
            deltas = self._micro_buffer_deltas or [torch.zeros_like(self._buffers_before)]
            total = _fixed_point_sum(self.comm, deltas, [self._buffers_before.numel()],
                                     int(micro_count[0]))
            mean_delta = total / max(int(micro_count[0]), 1)
            _set_running_buffers(model, self._buffers_before + mean_delta.to(
                self._buffers_before))
            for module, tracked in zip(_batch_norms(model), self._tracked_before, strict=True):
                if module.num_batches_tracked is not None:
                    module.num_batches_tracked.fill_(tracked + 1)
            self._micro_buffer_deltas.clear()

    # -- small collectives -----------------------------------------------------------
    def gather_objects(self, value: Any) -> list[Any]:
        return self.comm.gather_objects(value)

    def sum_counts(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64)
        self.comm.allreduce(tensor, op="sum")
        return tensor.tolist()

    def close(self) -> None:
        """Stop the reducer thread, then free its communicator and ours, in that order."""
        if self._overlap is not None:
            self._overlap.close()
            self._overlap = None
        self.comm.close()


def _fixed_point_sum(comm: Communicator, vectors: list[torch.Tensor], bucket_sizes: list[int],
                     terms: int) -> torch.Tensor:
    """Sum ``vectors`` over all ranks exactly: int64 fixed point, one scale per bucket.

    The scale of a bucket is 2**e with e chosen from the global maximum magnitude so
    that ``terms`` values of that size cannot overflow 62 bits. The integers live
    on the CPU whatever device the vectors are on; the result is a CPU tensor.
    """
    vectors = [vector.cpu() for vector in vectors]
    bounds = [0]
    for size in bucket_sizes:
        bounds.append(bounds[-1] + size)
    maxima = torch.zeros(len(bucket_sizes), dtype=torch.float64)
    for vector in vectors:
        if not torch.isfinite(vector).all():
            maxima.fill_(math.inf)
            break
        for index in range(len(bucket_sizes)):
            part = vector[bounds[index]:bounds[index + 1]]
            if part.numel():
                maxima[index] = max(maxima[index], float(part.abs().max()))
    comm.allreduce(maxima, op="max")
    if not torch.isfinite(maxima).all():
        return torch.full((bounds[-1],), math.nan, dtype=torch.float64)
    headroom = FIXED_POINT_BITS - math.ceil(math.log2(max(terms, 1)))
    exponents = [headroom - math.frexp(float(m))[1] if m > 0 else 0 for m in maxima]
    total = torch.zeros(bounds[-1], dtype=torch.int64)
    for vector in vectors:
        for index, exponent in enumerate(exponents):
            part = vector[bounds[index]:bounds[index + 1]].double()
            total[bounds[index]:bounds[index + 1]] += torch.round(
                torch.ldexp(part, torch.tensor(float(exponent), dtype=torch.float64))
            ).to(torch.int64)
    comm.allreduce(total, op="sum")
    result = torch.empty(bounds[-1], dtype=torch.float64)
    for index, exponent in enumerate(exponents):
        result[bounds[index]:bounds[index + 1]] = torch.ldexp(
            total[bounds[index]:bounds[index + 1]].double(),
            torch.tensor(float(-exponent), dtype=torch.float64))
    return result


class _OverlappedReducer:
    """All-reduces gradient buckets on a background thread while backward runs.

    Hooks count the parameters of each bucket that received their final gradient
    of the step; the thread takes buckets strictly in order (0, 1, 2, ...), waiting
    for each to be complete, so every rank issues the same collectives in the same
    order. ``finish`` marks what backward never touched as ready (a rank without a
    micro-batch in a short last batch, unused parameters) and waits for the rest.
    """

    def __init__(self, comm: Communicator, buckets: list[list[torch.nn.Parameter]]) -> None:
        self.comm = comm
        self.buckets = buckets
        self.bucket_of = {id(p): i for i, bucket in enumerate(buckets) for p in bucket}
        # One flat buffer per bucket for the run's life: the all-reduce sees the same
        # tensor every step (one IPC registration, not one per step).
        self.flats = [_bucket_buffer(bucket) for bucket in buckets]
        self.lock = threading.Lock()
        self.armed = False
        self.pending: list[int] = []
        self.ready = [threading.Event() for _ in buckets]
        self.steps: queue.Queue[bool] = queue.Queue()
        self.done: queue.Queue[BaseException | float] = queue.Queue()
        for bucket in buckets:
            for parameter in bucket:
                parameter.register_post_accumulate_grad_hook(self._on_gradient)
        self.thread = threading.Thread(target=self._serve, name="allreduce", daemon=True)
        self.thread.start()

    def arm(self) -> None:
        """The coming backward is the step's last: reduce buckets as they complete."""
        with self.lock:
            self.pending = [len(b) for b in self.buckets]
            for event in self.ready:
                event.clear()
            self.armed = True
        self.steps.put(True)

    def _on_gradient(self, parameter: torch.nn.Parameter) -> None:
        if not self.armed:
            return
        index = self.bucket_of[id(parameter)]
        with self.lock:
            self.pending[index] -= 1
            if self.pending[index] == 0:
                self.ready[index].set()

    def _serve(self) -> None:
        while self.steps.get():
            try:
                busy = 0.0
                for index, bucket in enumerate(self.buckets):
                    self.ready[index].wait()
                    start = time.perf_counter()
                    flat = self.flats[index]
                    _gather_gradients(bucket, flat)
                    self.comm.allreduce(flat, op="sum")
                    busy += time.perf_counter() - start
                self.done.put(busy)
            except BaseException as error:  # surfaces in the training thread
                self.done.put(error)

    def close(self) -> None:
        self.steps.put(False)
        self.thread.join()
        self.comm.close()

    def finish(self) -> float:
        """Wait for every bucket of this step; returns the seconds the caller waited."""
        start = time.perf_counter()
        with self.lock:
            self.armed = False
            for event in self.ready:
                event.set()
        outcome = self.done.get()
        if isinstance(outcome, BaseException):
            raise outcome
        return time.perf_counter() - start


def _make_buckets(parameters: list[torch.nn.Parameter], bucket_bytes: int
                  ) -> list[list[torch.nn.Parameter]]:
    buckets: list[list[torch.nn.Parameter]] = [[]]
    size = 0
    for parameter in parameters:
        nbytes = parameter.numel() * parameter.element_size()
        if buckets[-1] and size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(parameter)
        size += nbytes
    return buckets


def _bucket_buffer(bucket: list[torch.nn.Parameter]) -> torch.Tensor:
    """The flat gradient buffer of ``bucket``: its parameters' sizes, dtype as
    ``torch.cat`` of their gradients would promote it, on their device."""
    dtype = functools.reduce(torch.promote_types, (p.dtype for p in bucket))
    return torch.zeros(sum(p.numel() for p in bucket), dtype=dtype, device=bucket[0].device)


def _gather_gradients(bucket: list[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Each parameter's gradient (zeros where it has none) into its place in ``flat``,
    which its ``.grad`` then is a view of; a gradient that already is one stays put."""
    offset = 0
    for parameter in bucket:
        count = parameter.numel()
        place = flat[offset:offset + count].view_as(parameter)
        grad = parameter.grad
        if grad is None:
            place.zero_()
        elif not _is_view_of(grad, place):
            place.copy_(grad)
        parameter.grad = place
        offset += count


def _is_view_of(grad: torch.Tensor, place: torch.Tensor) -> bool:
    return (grad.data_ptr() == place.data_ptr() and grad.dtype == place.dtype
            and grad.shape == place.shape and grad.stride() == place.stride())


def _grad_or_zeros(parameter: torch.nn.Parameter) -> torch.Tensor:
    return parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)


def _batch_norms(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def _running_buffer_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [tensor for module in _batch_norms(model)
            for tensor in (module.running_mean, module.running_var) if tensor is not None]


def _running_buffers(model: torch.nn.Module) -> torch.Tensor:
    tensors = _running_buffer_tensors(model)
    return torch.cat([t.reshape(-1) for t in tensors]).clone() if tensors else torch.zeros(0)


def _set_running_buffers(model: torch.nn.Module, values: torch.Tensor) -> None:
    offset = 0
    for tensor in _running_buffer_tensors(model):
        count = tensor.numel()
        tensor.copy_(values[offset:offset + count].view_as(tensor))
        offset += count

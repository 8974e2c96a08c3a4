"""Data-loader worker processes: how they start, which signals they ignore, and that
they never outlive the process that owns them.

Workers ignore the signals that ask a job to stop, so that a Ctrl-C to the process
group or a cluster's SIGTERM to every process does not kill the workers that the
last step still needs: the process that owns them ends them. That has two sides,
both handled here:

* an error met while a worker decodes a file (NaN samples, a cut-off FLAC) ends the
  owner with its named error while the loader's iterator, held by the traceback, is
  still alive; at exit Python's multiprocessing sends its daemonic children SIGTERM,
  which they ignore, and then waits for them for ever. The owner kills its workers
  itself at exit instead (``_end_workers_at_exit``);
* an owner killed with SIGKILL cannot end them: the kernel does
  (``PR_SET_PDEATHSIG``), where torch's own check would notice only within 5 s.

How a worker hands a batch over: torch sends every tensor through its own shared-memory
file, whose descriptor the main process fetches from the worker over a fresh,
authenticated socket connection: about 1 ms a tensor on a loaded 2-core host, whatever its
size. A batch is one large tensor and half a dozen small ones (lengths, targets, spans),
so at small batches the small ones cost more than the audio. Workers send tensors up to
``BY_VALUE_BYTES`` inside the pickle instead (``_hand_over_small_tensors_by_value``): the
same values, dtype and shape, no descriptor.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing.reductions import reduce_tensor
from torch.utils.data import DataLoader

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
"""The signals that ask a job to stop (``deepspeech.training.stop``): the process that
owns a data-loader worker decides when it ends, so the worker ignores them."""
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when its parent dies (Linux)."""
EXIT_WAIT_S = 5.0
BY_VALUE_BYTES = 1 << 20
"""Largest tensor a worker sends inside the pickle. Measured per batch of one tensor, two
workers, 2-vCPU host: by value 0.5-0.7 ms up to 256 KiB and 2.4 ms at 1 MiB against 1.3,
2.2 and 3.1 ms through shared memory; at 2 MiB and more shared memory wins."""
_BY_VALUE_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                              torch.int64, torch.float16, torch.float32, torch.float64})


def worker_start_method(num_workers: int) -> str | None:
    """How data-loader workers start: forked (fastest, the default) unless this process
    has used CUDA. A forked child that so much as frees an inherited CUDA tensor dies
    ("CUDA error: initialization error"), so such processes start workers from a fork
    server that never touched the GPU."""
    return "forkserver" if num_workers > 0 and torch.cuda.is_initialized() else None


def loader_batches(loader: DataLoader) -> Iterator:
    """Iterate ``loader`` so that a dead worker is noticed where the main process waits
    for a batch, not wherever it happens to be.

    torch's first multi-process iterator installs a SIGCHLD handler that raises a worker's
    death at once, often from inside backward. Freeing the autograd graph of a step so cut
    short crashed the process (SIGSEGV, glibc heap corruption, no message) in 3 of 20 tries
    of a plain torch 2.11 training loop whose worker was killed, against 0 of 20 without
    the handler: most likely the interrupted backward leaves the graph corrupt. Without it
    the loader's own check, every 5 s while it waits, raises the same RuntimeError at the
    next fetch.
    """
    batches = iter(loader)
    if loader.num_workers > 0 and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    return batches


def init_data_worker(worker_id: int) -> None:
    """Start a data-loader worker with one thread, as feature extraction is cheap per
    sample and more would take the cores the model needs, deaf to the signals that
    stop training, and bound to die with the process that forked it."""
    torch.set_num_threads(1)
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    _die_with_parent()
    _hand_over_small_tensors_by_value()


def _hand_over_small_tensors_by_value() -> None:
    """In a worker: pickle small plain CPU tensors as their values, every other tensor as
    torch does (module docstring). Only this process's pickler changes."""
    ForkingPickler.register(torch.Tensor, _reduce_tensor)


def _reduce_tensor(tensor: torch.Tensor) -> tuple:
    if (tensor.device.type == "cpu" and tensor.layout == torch.strided
            and tensor.dtype in _BY_VALUE_DTYPES and not tensor.requires_grad
            and tensor.is_contiguous() and tensor.nbytes <= BY_VALUE_BYTES):
        return torch.from_numpy, (tensor.numpy(),)
    return reduce_tensor(tensor)


def _die_with_parent() -> None:
    """Ask the kernel for SIGKILL when the parent dies, then check that it has not died
    already. A worker started by a fork server (after CUDA) has the server as its parent,
    which ends when its owner does."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not allowed here (a sandbox): torch's own check still ends the worker
    if os.getppid() != parent:
        os._exit(1)


def _end_workers_at_exit() -> None:
    """Kill the daemonic child processes still alive at exit: data-loader workers that an
    error left behind, which ignore the SIGTERM multiprocessing would send them. torch's
    SIGCHLD handler, where a loader installed it, would raise each death as an error."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in multiprocessing.active_children():
        if child.daemon:
            child.kill()
            child.join(EXIT_WAIT_S)


# Registered after multiprocessing's own exit handler (imported with torch), so it runs
# first: atexit calls handlers last registered first.
atexit.register(_end_workers_at_exit)

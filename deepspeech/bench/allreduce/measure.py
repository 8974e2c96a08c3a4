"""Timing the backends: every size, every backend on the same buffer, interleaved repeat by
repeat; a repeat is a batch of calls lasting about ``BATCH_SECONDS``, its time the slowest
rank's; and how busy other processes kept the machine meanwhile."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch
from mpi4py import MPI

from deepspeech.bench.allreduce.backends import SENDRECV, make_runner, sendrecv_runner
from deepspeech.distributed.comm import make_communicator
from deepspeech.distributed.faults import check_same

BATCH_SECONDS = 0.005  # small sizes: calls per timed batch chosen to last about this long
MAX_BATCH = 200


def measure(comm: MPI.Comm, sizes: list[int], backends: list[str], repeats: int,
            dtype: torch.dtype, timeout_s: float,
            device: torch.device | None = None) -> tuple[dict, dict]:
    """Median seconds per (backend, size), and per size the half-size Sendrecv seconds.

    On a GPU every timed batch ends with a device synchronization, so that
    queued kernels and copies count.
    """
    # ranks that would time different lists would match one algorithm's messages with
    # another's and wait forever: say so instead
    check_same(comm, repr((sizes, backends, repeats, str(dtype))),
               "the list of benchmark sizes and backends", timeout_s)
    device = device or torch.device("cpu")
    finish = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else _nothing
    torch_comm = None
    if any(b.partition("@")[0] == "gloo" for b in backends):
        torch_comm = make_communicator("torch", timeout_s)
    runners = {b: make_runner(b, comm, timeout_s, torch_comm) for b in backends}
    runners[SENDRECV] = sendrecv_runner(comm)
    timed = [*backends, SENDRECV]
    results: dict[tuple[str, int], float] = {}
    sendrecv: dict[int, float] = {}
    itemsize = torch.empty(0, dtype=dtype).element_size()
    for nbytes in sizes:
        n = max(1, nbytes // itemsize)
        # small integers: every sum is exact, so every backend computes the same bits
        initial = (torch.arange(n, device=device) % 3).to(dtype)
        buffer = initial.clone()
        times: dict[str, list[float]] = {b: [] for b in timed}
        batch = dict.fromkeys(timed, 1)
        for repeat in range(repeats + 1):  # repeat 0 warms up and sizes the batches
            shift = repeat % len(timed)
            for name in timed[shift:] + timed[:shift]:
                buffer.copy_(initial)
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(batch[name]):
                    runners[name](buffer)
                finish()
                elapsed = (time.perf_counter() - start) / batch[name]
                if repeat:
                    times[name].append(elapsed)
            if repeat == 0:
                batch = _batch_sizes(comm, timed, buffer, initial, runners, finish)
        for name in timed:
            slowest = np.array(times[name])
            comm.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)
            results[name, nbytes] = float(np.median(slowest))
        sendrecv[nbytes] = results.pop((SENDRECV, nbytes))
    if torch_comm is not None:
        torch_comm.close()
    return results, sendrecv

def _nothing() -> None:
    return None

def _batch_sizes(comm: MPI.Comm, timed: list[str], buffer: torch.Tensor,
                 initial: torch.Tensor, runners: dict,
                 finish: Callable[[], None]) -> dict[str, int]:
    """Calls per timed batch, so that a batch lasts about BATCH_SECONDS (same on all ranks).

    Small all-reduces are timed back to back, as training issues them and as
    nccl-tests does: one call after a barrier would mostly time the barrier's skew.
    """
    once = np.empty(len(timed))
    for i, name in enumerate(timed):
        buffer.copy_(initial)
        comm.Barrier()
        start = time.perf_counter()
        runners[name](buffer)
        finish()
        once[i] = time.perf_counter() - start
    comm.Allreduce(MPI.IN_PLACE, once, op=MPI.MAX)
    return {name: int(min(MAX_BATCH, max(1, BATCH_SECONDS // max(t, 1e-7))))
            for name, t in zip(timed, once, strict=True)}

def cpu_ticks() -> tuple[int, int]:
    """(busy ticks of the whole machine, ticks used by this process); (0, 0) if unknown."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        with open("/proc/self/stat") as own:
            mine = own.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return 0, 0
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy, int(mine[11]) + int(mine[12])  # utime + stime

def other_load(comm: MPI.Comm, start: tuple[int, int], end: tuple[int, int],
               seconds: float) -> float:
    """CPUs' worth of work done by processes other than the benchmark's ranks."""
    mine = np.array([end[1] - start[1]], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.SUM)
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    others = (end[0] - start[0]) - int(mine[0])
    return max(0.0, others / ticks / max(seconds, 1e-9))

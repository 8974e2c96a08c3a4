"""All-reduce benchmark: our algorithms against MPI_Allreduce and gloo.

    mpirun -n 2 deepspeech bench allreduce --sizes 4K-256M
    deepspeech bench allreduce --sizes 4K-256M --json

For every size all backends reduce the same buffer, interleaved repeat by
repeat (the order rotates), so a noisy machine disturbs them alike. A repeat
is a batch of calls back to back (as many as fill about 5 ms, so a single
call for large buffers), started after a barrier and reset to the same values
before; its time per call is the slowest rank's, and the table shows the
median over repeats. The header reports how much CPU other processes took
meanwhile (the machine is shared). Bandwidths follow nccl-tests: algbw = bytes / time and
busbw = algbw * 2(N-1)/N, the rate each rank's link must sustain, comparable
across world sizes. The same run times a Sendrecv of half the buffer with a
partner rank, interleaved with the backends on the same buffer (same caches):
for 2 ranks a ring all-reduce is two such exchanges plus a reduction, so the
Sendrecv bandwidth is the ceiling for the ring's busbw.

Backends: ``auto`` (the default `allreduce`), ``ring`` (flat: recursive
doubling below the crossover, the ring above; for CUDA tensors the staged
path), ``ring-only``, ``rd`` (recursive doubling at every size),
``hierarchical``, ``ipc`` (CUDA tensors: the node's ranks read each other's
GPU memory; elsewhere it falls back and says why), ``mpi`` (MPI_Allreduce),
``gloo`` (torch.distributed). Ours accept ``@SIZE`` for the segment size, e.g.
``ring-only@256K``, which is how the segment size was tuned (for
``hierarchical`` it is the block size of the shared window).

``--check-bitwise`` then reduces one random float (or integer) buffer per size
with every backend and fails unless all give the same bits on every rank: with
2 ranks every correct sum does (a + b = b + a), e.g. the staged ring against
IPC on one GPU::

    mpirun -n 2 deepspeech bench allreduce --device cuda --sizes 64M --backends ring,ipc \
        --check-bitwise

At the end an alpha-beta-gamma cost model is fitted to the
ring, recursive doubling and Sendrecv timings and predicts which algorithm
wins at 8 to 1024 ranks (``deepspeech.distributed.costmodel``).

``--tune FILE`` times the pure algorithms (by default recursive doubling, the
ring with several segment sizes and, where ranks share a node, the node-aware
variant) in several passes and writes the fastest per size as a rules file
that `allreduce` then follows on this machine (``deepspeech.distributed.tuning``);
where the built-in choice is among them, it stays unless another beats it in every
pass.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from deepspeech.arguments import output_file, positive_float, positive_int
from deepspeech.distributed import costmodel, ipc, tuning
from deepspeech.distributed.algorithms import ALGORITHMS
from deepspeech.distributed.allreduce import DEFAULT_SEGMENT_BYTES, allreduce
from deepspeech.distributed.choice import builtin_algorithm
from deepspeech.distributed.comm import make_communicator
from deepspeech.distributed.faults import check_same
from deepspeech.distributed.flat import flat_allreduce
from deepspeech.distributed.hierarchical import hierarchical_allreduce
from deepspeech.distributed.topology import node_layout
from deepspeech.distributed.transport import mpi_is_cuda_aware, staging_buffer

DEFAULT_BACKENDS = "ring,hierarchical,mpi,gloo"
TUNING_CANDIDATES = "rd,ring-only@256K,ring-only@1M,ring-only@4M,ring-only@16M,ring-only@64M"
_SENDRECV = "sendrecv"
_FOREIGN_BACKENDS = ("mpi", "gloo")
# Backends that run one algorithm at every size, named after it ("ring" is taken:
# that backend follows the flat size rule).
_PURE_BACKENDS = {{"ring": "ring-only", "recursive_doubling": "rd"}.get(name, name): name
                  for name in ALGORITHMS}
_BACKENDS = ("auto", "ring", *_PURE_BACKENDS) + _FOREIGN_BACKENDS
BATCH_SECONDS = 0.005  # small sizes: calls per timed batch chosen to last about this long
MAX_BATCH = 200
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}


def parse_size(text: str) -> int:
    """``"4K"`` -> 4096; units K, M, G are powers of 1024; a plain number is bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 4K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_sizes(text: str) -> list[int]:
    """``"4K-1M"`` -> powers of two from 4 KiB to 1 MiB; ``"4K,1M,3000"`` -> that list."""
    if "-" in text and "," not in text:
        low, high = (parse_size(part) for part in text.split("-", 1))
        if low <= 0 or high < low:
            raise ValueError(f"bad size range {text!r}: need 0 < low <= high")
        sizes, size = [], 1 << (low - 1).bit_length()
        if size != low:
            sizes.append(low)
        while size <= high:
            sizes.append(size)
            size <<= 1
        return sizes
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(f"bad size list {text!r}: sizes must be positive")
    return sizes


def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s as nccl-tests define them."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def _sizes_argument(text: str) -> list[int]:
    try:
        return parse_sizes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _backends_argument(text: str) -> list[str]:
    """Names checked before any rank starts timing: a typo used to surface as a
    traceback (``ring@abc``) or, for ``@0``, as one-element segments."""
    backends = [name.strip() for name in text.split(",") if name.strip()]
    if not backends:
        raise argparse.ArgumentTypeError("no backend named")
    for name in backends:
        base, at, segment = name.partition("@")
        if base not in _BACKENDS:
            raise argparse.ArgumentTypeError(
                f"unknown backend {name!r}; expected {', '.join(_BACKENDS)} "
                f"(ours may add @SEGMENT)")
        if at and base in _FOREIGN_BACKENDS:
            raise argparse.ArgumentTypeError(f"{name!r}: only our own backends take @SEGMENT")
        if at:
            try:
                size = parse_size(segment)
            except ValueError as error:
                raise argparse.ArgumentTypeError(f"{name!r}: {error}") from None
            if size <= 0:
                raise argparse.ArgumentTypeError(f"{name!r}: the segment must be positive")
    return backends


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench allreduce``."""
    parser.add_argument("--sizes", type=_sizes_argument, default="4K-256M",
                        help="a range of powers of two (4K-256M) or a list (4K,1M,3000)")
    parser.add_argument("--backends", type=_backends_argument, default=None,
                        help="comma list of auto, ring, ring-only, rd, hierarchical, ipc, mpi, "
                             "gloo; ours take @SEGMENT, e.g. ring-only@256K (default "
                             f"{DEFAULT_BACKENDS}; with --tune: {TUNING_CANDIDATES}, plus "
                             "hierarchical where ranks share a node, plus mpi for comparison)")
    parser.add_argument("--repeats", type=positive_int, default=20, help="timed repeats per size")
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the buffers live; cuda: each rank takes the GPU of its "
                             "rank within the node (modulo the GPUs there), so ranks may "
                             "share one")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch intra-op threads per rank (default 1: a core per rank)")
    parser.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per wait")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per backend and size instead of a table")
    parser.add_argument("--model", action="store_true",
                        help="with --json, also print the fitted cost model as JSON")
    parser.add_argument("--tune", metavar="FILE", type=output_file,
                        help="write the fastest pure algorithm per size (rd, ring-only@SEGMENT, "
                             "hierarchical among --backends) as an all-reduce rules file, "
                             f"for {tuning.ENVIRONMENT_VARIABLE} or distributed.allreduce_tuning")
    parser.add_argument("--check-bitwise", action="store_true",
                        help="after timing, reduce one random buffer per size with every "
                             "backend; exit 1 unless all give the same bits on every rank")
    parser.add_argument("--tune-passes", type=positive_int, default=3,
                        help="with --tune, measure this many times; a candidate replaces the "
                             "built-in choice only if it is faster in every pass (default 3)")


def _default_backends(comm: MPI.Comm, tune: str | None) -> str:
    """What to time without --backends; with --tune the candidates (collective)."""
    if not tune:
        return DEFAULT_BACKENDS
    # whether any ranks share a node: the same answer on every rank, unlike a node's own
    # rank count (2 ranks on node1 and 1 on node2 must time the same list)
    shared = node_layout(comm).nodes < comm.Get_size()
    return TUNING_CANDIDATES + (",hierarchical" if shared else "") + ",mpi"


def _candidate_rule(name: str) -> tuning.Rule | None:
    """The rule a pure-algorithm backend stands for; None for the others."""
    base, _, segment = name.partition("@")
    algorithm = _PURE_BACKENDS.get(base)
    if algorithm is None or (algorithm == "hierarchical" and segment) or algorithm == "ipc":
        # not a pure algorithm, hierarchical@ (the window block: not a rule), or one for
        # GPU buffers (rules are for CPU tensors)
        return None
    return tuning.Rule(0, algorithm, parse_size(segment) if segment else None)


def _incumbents(comm: MPI.Comm, sizes: list[int],
                candidates: dict[str, tuning.Rule]) -> dict[int, str]:
    """Per size, the candidate that runs what the built-in choice runs (where one does)."""
    by_rule = {(rule.algorithm, rule.segment_bytes or DEFAULT_SEGMENT_BYTES): name
               for name, rule in candidates.items()}
    incumbents = {}
    for nbytes in sizes:
        name = by_rule.get((builtin_algorithm(nbytes, comm), DEFAULT_SEGMENT_BYTES))
        if name is not None:
            incumbents[nbytes] = name
    return incumbents


def _write_rules(path: str, passes: list[dict], candidates: dict[str, tuning.Rule],
                 incumbents: dict[int, str], world: int, nodes: int) -> list[str]:
    """Turn the candidates' timings into a rules file (rank 0); lines saying what it holds."""
    timings = {key: [timed[key] for timed in passes] for key in passes[0]
               if key[0] in candidates}
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    library = MPI.Get_library_version().split(",")[0].strip("\0 \n")
    measured_on = (f"{cpu}, {os.cpu_count()} CPUs, {library}, "
                   f"{time.strftime('%Y-%m-%d')}, {world} ranks on {nodes} node(s)")
    rules = tuning.rules_from_timings(timings, candidates, world, nodes, measured_on,
                                      incumbents)
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(rules.to_json())
    partial.replace(target)
    lines = [f"all-reduce rules for {world} ranks on {nodes} node(s), {len(passes)} "
             f"pass(es) -> {target}:"]
    for rule in rules.rules:
        segment = f", segments {format_size(rule.segment_bytes)}" if rule.segment_bytes else ""
        lines.append(f"  from {format_size(rule.from_bytes) if rule.from_bytes else '0'}: "
                     f"{rule.algorithm}{segment}")
    lines.append(f"use them: {tuning.ENVIRONMENT_VARIABLE}={target} (every rank) or "
                 f"distributed.allreduce_tuning={target}")
    return lines


def _make_runner(name: str, comm: MPI.Comm, timeout_s: float,
                 torch_comm: object | None) -> Callable[[torch.Tensor], object]:
    base, _, segment = name.partition("@")
    segment_bytes = parse_size(segment) if segment else None  # None: allreduce's default
    algorithms = {"auto": "auto", **_PURE_BACKENDS}
    if base == "hierarchical" and segment:  # @ sets the shared window's block size
        def blocked(x: torch.Tensor) -> object:
            return hierarchical_allreduce(x, "sum", comm, timeout_s=timeout_s, divide_by=None,
                                          between_nodes=flat_allreduce,
                                          segment_elems=DEFAULT_SEGMENT_BYTES // 4,
                                          window_bytes=segment_bytes)
        return blocked
    if base in algorithms:
        algorithm = algorithms[base]
        return lambda x: allreduce(x, "sum", comm, algorithm=algorithm, timeout_s=timeout_s,
                                   segment_bytes=segment_bytes)
    if base == "ring":  # flat: what "auto" does when the node-aware variant is not chosen
        def flat(x: torch.Tensor) -> object:
            algorithm = builtin_algorithm(x.numel() * x.element_size(), comm, node_aware=False)
            return allreduce(x, "sum", comm, timeout_s=timeout_s, segment_bytes=segment_bytes,
                             algorithm=algorithm)
        return flat
    if base == "mpi":
        def mpi(x: torch.Tensor) -> object:
            if x.dtype in (torch.float16, torch.bfloat16):
                raise SystemExit("the mpi backend cannot reduce 16-bit floats; use --dtype "
                                 "float32")
            if x.is_cuda and not mpi_is_cuda_aware():
                return _staged_mpi_allreduce(comm, x)
            return comm.Allreduce(MPI.IN_PLACE, x if x.is_cuda else x.numpy(), op=MPI.SUM)
        return mpi
    if base == "gloo":
        assert torch_comm is not None
        return lambda x: torch_comm.allreduce(x, "sum")
    raise ValueError(f"unknown backend {name!r}")  # the command line checks names earlier


def _staged_mpi_allreduce(comm: MPI.Comm, x: torch.Tensor) -> None:
    """What a CUDA program does with an MPI that cannot read GPU memory: the whole
    buffer to a pinned host copy, MPI_Allreduce there, and back."""
    host = staging_buffer(x)
    host.copy_(x)
    comm.Allreduce(MPI.IN_PLACE, host.numpy(), op=MPI.SUM)
    x.copy_(host)


def _cpu_ticks() -> tuple[int, int]:
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


def _sendrecv_runner(comm: MPI.Comm) -> Callable[[torch.Tensor], object]:
    """Exchange half the buffer with the partner rank (rank ^ 1): the ceiling's yardstick.

    It runs on the same buffer as the all-reduces, interleaved with them, so
    it sees the same caches: first half out, second half in.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    partner = rank ^ 1

    def sendrecv(x: torch.Tensor) -> object:
        # GPU buffers: the host link is what staged transfers cross, so time it there
        raw = (staging_buffer(x) if x.is_cuda else x).view(-1).view(torch.uint8).numpy()
        half = raw.size // 2
        if partner < size and half:
            comm.Sendrecv(raw[:half], partner, 11, raw[half : 2 * half], partner, 11)
        return None
    return sendrecv


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
    runners = {b: _make_runner(b, comm, timeout_s, torch_comm) for b in backends}
    runners[_SENDRECV] = _sendrecv_runner(comm)
    timed = [*backends, _SENDRECV]
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
        sendrecv[nbytes] = results.pop((_SENDRECV, nbytes))
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


def _samples(results: dict, sendrecv: dict, comm: MPI.Comm) -> list[costmodel.Sample]:
    """Timings the cost model can explain: the flat algorithms and Sendrecv."""
    world = comm.Get_size()
    samples = []
    for (name, nbytes), seconds in results.items():
        base, _, segment = name.partition("@")
        if segment and parse_size(segment) != DEFAULT_SEGMENT_BYTES:
            continue
        algorithm = _PURE_BACKENDS.get(base)
        if base == "ring":
            algorithm = builtin_algorithm(nbytes, comm, node_aware=False)
        if algorithm in costmodel.MODELLED_ALGORITHMS:
            samples.append(costmodel.Sample(algorithm, nbytes, world, seconds))
    for nbytes, seconds in sendrecv.items():
        samples.append(costmodel.Sample("sendrecv", max(1, nbytes // 2), 2, seconds))
    return samples


def model_report(model: costmodel.CostModel) -> list[str]:
    """Lines describing the fitted model and where each algorithm wins."""
    lines = [f"cost model: alpha = {model.alpha * 1e6:.1f} us, "
             f"1/beta = {1 / model.beta / 1e9 if model.beta else float('inf'):.2f} GB/s, "
             f"1/gamma = {1 / model.gamma / 1e9 if model.gamma else float('inf'):.2f} GB/s",
             "predicted winner by size, and ms for 64 MiB (ring / Rabenseifner / "
             "recursive doubling):"]
    sizes = [1 << k for k in range(12, 31)]
    for world, ranges in costmodel.winners(model, [8, 16, 32, 64, 128, 256, 512, 1024], sizes):
        parts = [f"{format_size(a)}-{format_size(b)}: {name}" for a, b, name in ranges]
        times = " / ".join(f"{model.time(name, 64 << 20, world) * 1e3:.1f}"
                           for name in ("ring", "rabenseifner", "recursive_doubling"))
        lines.append(f"  {world:>5} ranks: {'; '.join(parts)}   [{times}]")
    return lines


def _rank_device(comm: MPI.Comm, kind: str) -> torch.device:
    """The CPU, or the GPU of this rank's index among the ranks of its node."""
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available on this node")
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    device = torch.device("cuda", node.Get_rank() % torch.cuda.device_count())
    node.Free()
    torch.cuda.set_device(device)
    return device


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; rank 0 prints. Returns the exit status."""
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(args.threads)
    sizes = args.sizes
    if args.tune and (world == 1 or args.device != "cpu"):
        if rank == 0:
            print("--tune needs 2 or more ranks and CPU buffers (the rules apply to CPU "
                  "tensors only)", file=sys.stderr)
        return 2
    backends = args.backends or _backends_argument(_default_backends(comm, args.tune))
    candidates = {b: rule for b in backends if (rule := _candidate_rule(b)) is not None}
    if args.tune and not candidates:
        if rank == 0:
            print("--tune: none of --backends is a pure algorithm (rd, ring-only@SEGMENT, "
                  "hierarchical)", file=sys.stderr)
        return 2
    if world == 1 and rank == 0:
        print("note: one rank only; start with mpirun -n 2 or more to measure communication",
              file=sys.stderr)
    device = _rank_device(comm, args.device)
    nodes = node_layout(comm).nodes if args.tune else 0
    incumbents = _incumbents(comm, sizes, candidates) if args.tune else {}
    ticks, started = _cpu_ticks(), time.monotonic()
    passes = [measure(comm, sizes, backends, args.repeats, _DTYPES[args.dtype], args.timeout,
                      device) for _ in range(args.tune_passes if args.tune else 1)]
    elapsed = time.monotonic() - started
    load = other_load(comm, ticks, _cpu_ticks(), elapsed)
    bitwise = check_bitwise(comm, sizes, backends, _DTYPES[args.dtype], args.timeout,
                            device) if args.check_bitwise else []
    status = 1 if any(not agree for _, _, agree in bitwise) else 0
    # collective the first time: on every rank, before rank 0 alone goes on
    no_ipc = ipc.unavailable(torch.empty(1, device=device), comm, args.timeout) \
        if device.type == "cuda" and world > 1 else None
    if rank != 0:
        return status
    # the table shows each figure's median over the passes
    results = {key: statistics.median(p[0][key] for p in passes) for key in passes[0][0]}
    sendrecv = {n: statistics.median(p[1][n] for p in passes) for n in passes[0][1]}
    tuned = _write_rules(args.tune, [p[0] for p in passes], candidates, incumbents, world,
                         nodes) if args.tune else []
    samples = _samples(results, sendrecv, comm)
    model = None
    if world > 1 and len({s.algorithm for s in samples}) > 1:
        try:
            model = costmodel.fit(samples)
        except ValueError:
            model = None
    if args.json:
        for nbytes in sizes:
            for name in backends:
                seconds = results[name, nbytes]
                algbw, busbw = bus_bandwidth(nbytes, seconds, world)
                print(json.dumps({"backend": name, "bytes": nbytes, "seconds": seconds,
                                  "algbw_gbps": algbw, "busbw_gbps": busbw}))
            half = max(1, nbytes // 2)
            print(json.dumps({"backend": "sendrecv", "bytes": half, "seconds": sendrecv[nbytes],
                              "algbw_gbps": half / sendrecv[nbytes] / 1e9,
                              "busbw_gbps": half / sendrecv[nbytes] / 1e9}))
        if args.model and model is not None:
            print(json.dumps({"model": {"alpha_s": model.alpha, "beta_s_per_byte": model.beta,
                                        "gamma_s_per_byte": model.gamma}}))
        for nbytes, groups, agree in bitwise:
            print(json.dumps({"bitwise": {"bytes": nbytes, "equal": agree, "groups": groups}}))
        print(json.dumps({"world_size": world, "seconds": elapsed, "other_cpus_busy": load}))
        if tuned:
            print("\n".join(tuned), file=sys.stderr)
        return status
    where = ""
    if device.type == "cuda":
        how = "CUDA-aware MPI" if mpi_is_cuda_aware() else "staged through host memory"
        peers = f"no CUDA IPC: {no_ipc}" if no_ipc else "ipc: CUDA IPC inside the node"
        where = f", {torch.cuda.get_device_name(device)} buffers ({how}; {peers})"
    over = f" in each of {len(passes)} passes, then their median" if len(passes) > 1 else ""
    print(f"all-reduce, {world} ranks, {args.dtype}{where}, median of {args.repeats} repeats "
          f"(slowest rank){over}; busbw in GB/s; time in us")
    print(f"{elapsed:.0f} s; other processes kept {load:.2f} of {os.cpu_count()} CPUs busy "
          "meanwhile (noise)")
    header = f"{'size':>6}" + "".join(f" {name:>22}" for name in backends)
    header += f" {'sendrecv/2 ceiling':>19}"
    print(header)
    for nbytes in sizes:
        row = f"{format_size(nbytes):>6}"
        for name in backends:
            seconds = results[name, nbytes]
            row += f" {seconds * 1e6:>11.1f} {bus_bandwidth(nbytes, seconds, world)[1]:>10.2f}"
        half = max(1, nbytes // 2)
        row += f" {half / sendrecv[nbytes] / 1e9:>19.2f}"
        print(row)
    _print_ratios(results, sendrecv, sizes, backends)
    _print_speedups(results, sizes, backends)
    if bitwise:
        print()
        for nbytes, groups, agree in bitwise:
            verdict = "equal" if agree else "DIFFERENT (" + " | ".join(
                "=".join(group) for group in groups) + ", or across ranks)"
            print(f"{format_size(nbytes):>6} bitwise: {', '.join(backends)}: {verdict}")
    if model is not None:
        print()
        print("\n".join(model_report(model)))
    if tuned:
        print()
        print("\n".join(tuned))
    return status


def _print_ratios(results: dict, sendrecv: dict, sizes: list[int], backends: list[str]) -> None:
    ours = [b for b in backends if b.partition("@")[0] in ("ring", "auto", "hierarchical")]
    theirs = [b for b in backends if b in _FOREIGN_BACKENDS]
    if not ours or not theirs:
        return
    print()
    columns = [f"{a}/{b}" for a in ours for b in theirs] + [f"{a}/ceiling" for a in ours]
    print(f"{'size':>6}" + "".join(f" {c:>20}" for c in columns) + "   (speedup; >1: ours faster)")
    for nbytes in sizes:
        row = f"{format_size(nbytes):>6}"
        for a in ours:
            for b in theirs:
                row += f" {results[b, nbytes] / results[a, nbytes]:>20.2f}"
        for a in ours:
            ring_ideal = 2 * sendrecv[nbytes]  # two half-size exchanges (2 ranks)
            row += f" {ring_ideal / results[a, nbytes]:>20.2f}"
        print(row)


def _print_speedups(results: dict, sizes: list[int], backends: list[str]) -> None:
    """Our other backends against ``ring`` (on GPU buffers: the staged path)."""
    others = [b for b in backends if b != "ring" and b not in _FOREIGN_BACKENDS]
    if "ring" not in backends or not others:
        return
    print()
    print(f"{'size':>6}" + "".join(f" {b + '/ring':>20}" for b in others)
          + "   (speedup over ring; >1: faster)")
    for nbytes in sizes:
        print(f"{format_size(nbytes):>6}" + "".join(
            f" {results['ring', nbytes] / results[b, nbytes]:>20.2f}" for b in others))


def check_bitwise(comm: MPI.Comm, sizes: list[int], backends: list[str], dtype: torch.dtype,
                  timeout_s: float, device: torch.device) -> list[tuple[int, list, bool]]:
    """Per size: the backends grouped by the bits they give one random buffer (random
    floats, or integers for integer dtypes; each rank its own), and whether all agree
    on every rank. Collective."""
    torch_comm = make_communicator("torch", timeout_s) \
        if any(b.partition("@")[0] == "gloo" for b in backends) else None
    runners = {b: _make_runner(b, comm, timeout_s, torch_comm) for b in backends}
    itemsize = torch.empty(0, dtype=dtype).element_size()
    verdicts = []
    for nbytes in sizes:
        n = max(1, nbytes // itemsize)
        g = torch.Generator().manual_seed(nbytes * 7919 + comm.Get_rank())
        values = torch.randn(n, generator=g) if dtype.is_floating_point \
            else torch.randint(-1000, 1000, (n,), generator=g)
        source = values.to(dtype).to(device)
        digests = []
        for name in backends:
            x = source.clone()
            runners[name](x)
            digests.append(hashlib.sha256(x.cpu().view(torch.uint8).numpy()).hexdigest())
        everyone = comm.allgather(digests)
        groups: dict[str, list[str]] = {}
        for name, digest in zip(backends, digests, strict=True):
            groups.setdefault(digest, []).append(name)
        agree = len(groups) == 1 and all(other == digests for other in everyone)
        verdicts.append((nbytes, list(groups.values()), agree))
    if torch_comm is not None:
        torch_comm.close()
    return verdicts

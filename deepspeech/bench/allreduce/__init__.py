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

The parts: ``sizes`` (option parsing, bandwidths), ``backends`` (what each name runs),
``measure`` (the timing), ``tune`` (rules files), ``model`` (the cost model),
``bitwise`` (the bit check); this module is the command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from mpi4py import MPI

from deepspeech.arguments import output_file, positive_float, positive_int
from deepspeech.bench.allreduce.backends import FOREIGN_BACKENDS, backends_argument
from deepspeech.bench.allreduce.bitwise import check_bitwise
from deepspeech.bench.allreduce.measure import cpu_ticks, measure, other_load
from deepspeech.bench.allreduce.model import model_report, model_samples
from deepspeech.bench.allreduce.sizes import bus_bandwidth, format_size, parse_sizes
from deepspeech.bench.allreduce.tune import (
    DEFAULT_BACKENDS,
    TUNING_CANDIDATES,
    builtin_incumbents,
    candidate_rule,
    default_backends,
    write_rules,
)
from deepspeech.distributed import costmodel, ipc, tuning
from deepspeech.distributed.topology import node_layout
from deepspeech.distributed.transport import mpi_is_cuda_aware

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}


def _sizes_argument(text: str) -> list[int]:
    try:
        return parse_sizes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench allreduce``."""
    parser.add_argument("--sizes", type=_sizes_argument, default="4K-256M",
                        help="a range of powers of two (4K-256M) or a list (4K,1M,3000)")
    parser.add_argument("--backends", type=backends_argument, default=None,
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
    backends = args.backends or backends_argument(default_backends(comm, args.tune))
    candidates = {b: rule for b in backends if (rule := candidate_rule(b)) is not None}
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
    incumbents = builtin_incumbents(comm, sizes, candidates) if args.tune else {}
    ticks, started = cpu_ticks(), time.monotonic()
    passes = [measure(comm, sizes, backends, args.repeats, _DTYPES[args.dtype], args.timeout,
                      device) for _ in range(args.tune_passes if args.tune else 1)]
    elapsed = time.monotonic() - started
    load = other_load(comm, ticks, cpu_ticks(), elapsed)
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
    tuned = write_rules(args.tune, [p[0] for p in passes], candidates, incumbents, world,
                         nodes) if args.tune else []
    samples = model_samples(results, sendrecv, comm)
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
    theirs = [b for b in backends if b in FOREIGN_BACKENDS]
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
    others = [b for b in backends if b != "ring" and b not in FOREIGN_BACKENDS]
    if "ring" not in backends or not others:
        return
    print()
    print(f"{'size':>6}" + "".join(f" {b + '/ring':>20}" for b in others)
          + "   (speedup over ring; >1: faster)")
    for nbytes in sizes:
        print(f"{format_size(nbytes):>6}" + "".join(
            f" {results['ring', nbytes] / results[b, nbytes]:>20.2f}" for b in others))

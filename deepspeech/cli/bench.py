"""``deepspeech bench``: benchmarks that print their figures (never timed tests).

Each benchmark module has ``add_arguments(parser)`` and ``run(args)``; it is
imported only when chosen, so that MPI, Triton or the decoders load only for their bench.
"""

from __future__ import annotations

import argparse
from importlib import import_module

# name -> (module, help)
BENCHMARKS = {
    "allreduce": ("deepspeech.bench.allreduce", "all-reduce bandwidth per backend and size"),
    "train": ("deepspeech.bench.train", "training throughput and GFLOP/s against peak"),
    "data": ("deepspeech.bench.data", "feature pipeline throughput (x real time per core)"),
    "decode": ("deepspeech.bench.decode", "real-time factor of greedy and beam+LM"),
    "ctc": ("deepspeech.bench.ctc", "CTC loss on a GPU: Triton kernels against the CPU kernel"),
    "batching": ("deepspeech.bench.batching",
                 "batches of a fixed count against batches sized by audio"),
    "memory": ("deepspeech.bench.memory",
               "trainer's peak memory by corpus size; what loader workers copy"),
    "package": ("deepspeech.bench.package",
                "model package against its checkpoint: size and load time"),
    "serve": ("deepspeech.bench.serve", "load on a running deepspeech serve: HTTP and streams"),
    "resample": ("deepspeech.bench.resample",
                 "resampling time and peak memory by source rate, files and streams"),
    "rnn": ("deepspeech.bench.rnn", "GRU stack on a GPU: cuDNN against the persistent kernel"),
}


def _run(args: argparse.Namespace) -> int:
    module_name, help_text = BENCHMARKS[args.benchmark]
    module = import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"deepspeech bench {args.benchmark}",
                                     description=help_text)
    module.add_arguments(parser)
    return module.run(parser.parse_args(args.arguments))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``bench``."""
    names = ", ".join(f"{name} ({help_text})" for name, (_, help_text) in BENCHMARKS.items())
    parser = subparsers.add_parser(
        "bench", help=f"benchmarks: {', '.join(BENCHMARKS)}",
        description=f"Benchmarks: {names}. 'deepspeech bench NAME --help' lists its options.")
    parser.add_argument("benchmark", choices=sorted(BENCHMARKS))
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="the benchmark's options")
    parser.set_defaults(handler=_run)

"""The alpha-beta-gamma cost model fitted to the benchmark's timings, and what it predicts
for 8 to 1024 ranks (``deepspeech.distributed.costmodel``)."""

from __future__ import annotations

from mpi4py import MPI

from deepspeech.bench.allreduce.backends import PURE_BACKENDS
from deepspeech.bench.allreduce.sizes import format_size, parse_size
from deepspeech.distributed import costmodel
from deepspeech.distributed.allreduce import DEFAULT_SEGMENT_BYTES
from deepspeech.distributed.choice import builtin_algorithm


def model_samples(results: dict, sendrecv: dict, comm: MPI.Comm) -> list[costmodel.Sample]:
    """Timings the cost model can explain: the flat algorithms and Sendrecv."""
    world = comm.Get_size()
    samples = []
    for (name, nbytes), seconds in results.items():
        base, _, segment = name.partition("@")
        if segment and parse_size(segment) != DEFAULT_SEGMENT_BYTES:
            continue
        algorithm = PURE_BACKENDS.get(base)
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

"""The alpha-beta-gamma cost model of all-reduce algorithms.

The classic model (Hockney; Thakur, Rabenseifner and Gropp 2005) prices an
all-reduce of n bytes over N ranks with three machine constants:

* alpha: latency of one message (seconds), including our per-message overhead;
* beta: transfer time per byte (seconds per byte, the inverse link bandwidth);
* gamma: reduction time per byte (seconds per byte of the local add).

With L = log2(N) for a power of two N:

=====================  ============  ===============  ===============
algorithm              alpha         beta             gamma
=====================  ============  ===============  ===============
ring                   2(N-1)        2 n (N-1)/N      n (N-1)/N
recursive doubling     L             n L              n L
Rabenseifner           2 L           2 n (N-1)/N      n (N-1)/N
=====================  ============  ===============  ===============

Rabenseifner is reduce-scatter by recursive halving followed by all-gather by
recursive doubling. When N is not a power of two, recursive doubling and
Rabenseifner first fold the extra ranks in and out (one extra send with a
reduction and one extra send: ``2 alpha + 2 n beta + n gamma``) and run on the
largest power of two below N.

An implemented algorithm's formula is part of its entry in the registry
(algorithms.py), so an algorithm added there with a formula is priced here
too; Rabenseifner, which is not implemented, has its formula here, to see
where it would win.

The constants are fitted by least squares to timings of our own ring,
recursive doubling and a plain Sendrecv, so the model describes this
implementation on this machine; it knows nothing of network topology or
contention, which favour the ring on real fabrics (it only uses neighbour
links). `DEFAULT` holds the constants fitted on the development machine; the
crossover between recursive doubling and the ring used by `allreduce` comes
from it, so it is a constant of the code and the same on every rank.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .algorithms import ALGORITHMS, Coefficients, folded


@folded
def _rabenseifner_cost(nbytes: float, power: int) -> Coefficients:
    """Recursive halving then doubling: 2 log2(N) messages, the ring's bytes."""
    steps = math.log2(power)
    part = (power - 1) / power
    return 2.0 * steps, 2.0 * nbytes * part, nbytes * part


_FORMULAS = {**{name: entry.cost for name, entry in ALGORITHMS.items()
                if entry.cost is not None},
             "rabenseifner": _rabenseifner_cost}

MODELLED_ALGORITHMS = tuple(_FORMULAS)
"""What the model prices: the registered algorithms that have a formula, and Rabenseifner."""


@dataclass(frozen=True)
class Sample:
    """One timing: ``algorithm`` (a MODELLED_ALGORITHMS entry or "sendrecv") on ``nbytes``."""

    algorithm: str
    nbytes: int
    world_size: int
    seconds: float


def coefficients(algorithm: str, nbytes: float, world_size: int) -> Coefficients:
    """Multipliers of (alpha, beta, gamma) in the time of ``algorithm``."""
    n = float(nbytes)
    if algorithm == "sendrecv":  # one message of n bytes each way, at the same time
        return 1.0, n, 0.0
    formula = _FORMULAS.get(algorithm)
    if formula is None:
        raise ValueError(f"cost model: no formula for algorithm {algorithm!r}; it prices "
                         f"{', '.join(MODELLED_ALGORITHMS)} and sendrecv")
    if world_size <= 1:
        return 0.0, 0.0, 0.0
    return formula(n, world_size)


@dataclass(frozen=True)
class CostModel:
    """Machine constants: alpha (s/message), beta (s/byte sent), gamma (s/byte reduced)."""

    alpha: float
    beta: float
    gamma: float

    def time(self, algorithm: str, nbytes: float, world_size: int) -> float:
        """Predicted seconds for ``algorithm`` on ``nbytes`` over ``world_size`` ranks."""
        a, b, c = coefficients(algorithm, nbytes, world_size)
        return a * self.alpha + b * self.beta + c * self.gamma

    def best(self, nbytes: float, world_size: int) -> str:
        """The fastest of MODELLED_ALGORITHMS according to the model."""
        return min(MODELLED_ALGORITHMS, key=lambda name: self.time(name, nbytes, world_size))

    def crossover_bytes(self, world_size: int) -> int:
        """Size below which recursive doubling beats the ring (0: never)."""
        if world_size <= 1:
            return 0
        ring = coefficients("ring", 1.0, world_size)
        doubling = coefficients("recursive_doubling", 1.0, world_size)
        latency_saved = (ring[0] - doubling[0]) * self.alpha
        per_byte_lost = (doubling[1] - ring[1]) * self.beta + (doubling[2] - ring[2]) * self.gamma
        if latency_saved <= 0:
            return 0
        if per_byte_lost <= 0:
            return 1 << 62
        return int(latency_saved / per_byte_lost)


def _solve(rows: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """Least-squares solution of rows @ x = rhs by the normal equations (tiny systems)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, rhs, strict=True)) for i in range(k)]
    for col in range(k):  # Gauss-Jordan with partial pivoting
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-300:
            raise ValueError("cost model: measurements do not determine the constants")
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(k):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
                b[i] -= f * b[col]
    return [b[i] / a[i][i] for i in range(k)]


def fit(samples: Iterable[Sample]) -> CostModel:
    """Non-negative least-squares fit of (alpha, beta, gamma), in relative error.

    Each timing is weighted by 1/seconds, so a 4 KiB and a 256 MiB measurement
    count alike. Three unknowns: every subset of them is tried and the best
    non-negative solution kept (an exact NNLS for this size).
    """
    samples = list(samples)
    if not samples:
        raise ValueError("cost model: no measurements to fit")
    rows = [[c / s.seconds for c in coefficients(s.algorithm, s.nbytes, s.world_size)]
            for s in samples]
    rhs = [1.0] * len(rows)
    best: tuple[float, list[float]] | None = None
    for r in range(1, 4):
        for keep in itertools.combinations(range(3), r):
            sub = [[row[i] for i in keep] for row in rows]
            try:
                x = _solve(sub, rhs)
            except ValueError:
                continue
            if any(v < 0 for v in x):
                continue
            full = [0.0, 0.0, 0.0]
            for i, v in zip(keep, x, strict=True):
                full[i] = v
            residual = sum((sum(c * v for c, v in zip(row, full, strict=True)) - 1.0) ** 2
                           for row in rows)
            if best is None or residual < best[0]:
                best = (residual, full)
    if best is None:
        raise ValueError("cost model: no non-negative fit")
    return CostModel(*best[1])


def winners(model: CostModel, world_sizes: Iterable[int],
            sizes: Sequence[int]) -> list[tuple[int, list[tuple[int, int, str]]]]:
    """For each world size, the size ranges ``(from, to, algorithm)`` where each wins."""
    table = []
    for world in world_sizes:
        ranges: list[tuple[int, int, str]] = []
        for nbytes in sizes:
            name = model.best(nbytes, world)
            if ranges and ranges[-1][2] == name:
                ranges[-1] = (ranges[-1][0], nbytes, name)
            else:
                ranges.append((nbytes, nbytes, name))
        table.append((world, ranges))
    return table


# Fitted on the development machine (2 cores, 2 ranks, Open MPI 5 over shared
# memory, our Python implementation) by `deepspeech bench allreduce`; see
# docs/BENCHMARKS.md. Only the ratios matter to `allreduce`: they scale the
# crossover measured on 2 ranks to other world sizes.
DEFAULT = CostModel(alpha=21.1e-6, beta=1.0 / 6.08e9, gamma=1.0 / 5.28e9)

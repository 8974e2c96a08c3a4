"""The alpha-beta-gamma model: coefficients, fit and predictions (no MPI needed)."""

from __future__ import annotations

import math

import pytest

from deepspeech.distributed import costmodel
from deepspeech.distributed.costmodel import CostModel, Sample, coefficients


def test_coefficients_follow_the_textbook_formulas() -> None:
    n = 1000.0
    assert coefficients("ring", n, 4) == (6.0, 1500.0, 750.0)
    assert coefficients("recursive_doubling", n, 8) == (3.0, 3000.0, 3000.0)
    assert coefficients("rabenseifner", n, 8) == (6.0, 1750.0, 875.0)
    assert coefficients("sendrecv", n, 2) == (1.0, 1000.0, 0.0)
    # 6 ranks: fold two extra ranks in and out around 4-rank recursive doubling
    assert coefficients("recursive_doubling", n, 6) == (4.0, 4000.0, 3000.0)
    assert coefficients("ring", n, 1) == (0.0, 0.0, 0.0)
    for name in ("tree", "hierarchical"):  # unregistered; registered without a formula
        with pytest.raises(ValueError, match=f"no formula for algorithm '{name}'; it prices "
                                             "ring, recursive_doubling, rabenseifner and sendrecv"):
            coefficients(name, n, 4)


def test_fit_recovers_the_constants_of_synthetic_timings() -> None:
    truth = CostModel(alpha=15e-6, beta=1 / 9e9, gamma=1 / 5e9)
    samples = [Sample(name, size, world, truth.time(name, size, world))
               for name in ("ring", "recursive_doubling", "sendrecv")
               for size in (4096, 1 << 16, 1 << 20, 1 << 24) for world in (2, 4)]
    fitted = costmodel.fit(samples)
    for got, want in zip((fitted.alpha, fitted.beta, fitted.gamma),
                         (truth.alpha, truth.beta, truth.gamma), strict=True):
        assert got == pytest.approx(want, rel=1e-6)


def test_fit_never_returns_negative_constants() -> None:
    # timings that fall with size would need a negative beta: clipped to zero instead
    samples = [Sample("sendrecv", 1000, 2, 2e-5), Sample("sendrecv", 100000, 2, 1e-5),
               Sample("ring", 1000, 2, 4e-5), Sample("recursive_doubling", 1000, 2, 3e-5)]
    fitted = costmodel.fit(samples)
    assert min(fitted.alpha, fitted.beta, fitted.gamma) >= 0


def test_crossover_and_winners() -> None:
    model = CostModel(alpha=20e-6, beta=1 / 8e9, gamma=1 / 4e9)
    # two ranks: the ring saves half the reduction and pays one more latency
    assert model.crossover_bytes(2) == int(2 * model.alpha / model.gamma)
    assert model.crossover_bytes(1) == 0
    for world in (8, 64, 1024):
        small, large = 1024, 1 << 28
        assert model.best(small, world) == "recursive_doubling"
        # same bandwidth terms as the ring and fewer latencies
        assert model.time("rabenseifner", large, world) < model.time("ring", large, world)
        assert model.best(large, world) == "rabenseifner"
    table = dict(costmodel.winners(model, [8], [1 << k for k in range(10, 30)]))
    ranges = table[8]
    assert ranges[0][2] == "recursive_doubling" and ranges[-1][2] == "rabenseifner"
    assert all(a <= b for a, b, _ in ranges)


def test_default_model_is_sane() -> None:
    model = costmodel.DEFAULT
    assert model.alpha > 0 and model.beta > 0 and model.gamma > 0
    assert 4096 <= model.crossover_bytes(2) <= 16 << 20
    assert math.isfinite(model.time("ring", 1 << 30, 1024))

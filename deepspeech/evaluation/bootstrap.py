"""How far a WER measured on a small test set can be trusted: the bootstrap over utterances.

A dev set of a few hundred words moves by a point when two utterances change, so a
single WER says little about whether one model is better than another. Bisani and Ney
(2004) resample the test set's utterances with replacement and recompute the corpus-level
WER each time: the spread of those rates is a confidence interval, and for two systems
scored on the same utterances the share of resamples in which one makes fewer errors is
its "probability of improvement" (Kaldi's ``compute-wer-bootci`` reports the same).

Utterances are treated as independent. When a few speakers make most of the errors,
as on a speaker-disjoint dev split, the interval is narrower than another set of speakers
would justify; it measures the test set's sampling noise, not a training seed's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 0                 # a fixed seed: the same reports always give the same figures
_DRAWS_PER_BLOCK = 1 << 22  # bounds the [resamples, utterances] draws held in memory


@dataclass(frozen=True)
class Interval:
    """A two-sided percentile interval of a rate, as fractions."""

    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class Comparison:
    """System B against system A on the same utterances."""

    wer_a: float
    wer_b: float
    difference: Interval        # of WER(B) - WER(A): below zero where B is better
    probability_b_better: float  # share of resamples in which B makes fewer word errors


def _resample_sums(columns: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, k]`` sums of ``columns`` (``[n, k]``) over utterances drawn with
    replacement, in blocks so that a test set of any size fits in memory."""
    rng = np.random.default_rng(seed)
    count = columns.shape[0]
    block = max(1, _DRAWS_PER_BLOCK // count)
    sums = []
    for start in range(0, resamples, block):
        drawn = rng.integers(0, count, size=(min(block, resamples - start), count))
        sums.append(columns[drawn].sum(axis=1))
    return np.concatenate(sums)


def _as_columns(*counts: Sequence[int]) -> np.ndarray:
    lengths = {len(column) for column in counts}
    if len(lengths) != 1:
        raise ValueError(f"one count per utterance in every column, got lengths {sorted(lengths)}")
    if not lengths.pop():
        raise ValueError("no utterances to resample")
    columns = np.asarray(counts, dtype=np.int64).T
    if (columns < 0).any():
        raise ValueError("error and word counts must not be negative")
    return columns


def _percentiles(values: np.ndarray, confidence: float) -> Interval:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return Interval(float(low), float(high), confidence)


def wer_interval(word_errors: Sequence[int], reference_words: Sequence[int],
                 confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                 seed: int = SEED) -> Interval:
    """Percentile bootstrap interval of the corpus-level WER, from per-utterance counts."""
    columns = _as_columns(word_errors, reference_words)
    sums = _resample_sums(columns, resamples, seed)
    # max(words, 1): a resample drawing only empty references would divide by zero.
    return _percentiles(sums[:, 0] / np.maximum(sums[:, 1], 1), confidence)


def compare(word_errors_a: Sequence[int], word_errors_b: Sequence[int],
            reference_words: Sequence[int], confidence: float = CONFIDENCE,
            resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """Paired bootstrap of two systems' per-utterance word errors on the same utterances:
    both are scored on each resample, so the utterances' own difficulty cancels."""
    columns = _as_columns(word_errors_a, word_errors_b, reference_words)
    sums = _resample_sums(columns, resamples, seed)
    words = np.maximum(sums[:, 2], 1)
    difference = (sums[:, 1] - sums[:, 0]) / words
    total_words = max(int(columns[:, 2].sum()), 1)
    return Comparison(
        wer_a=float(columns[:, 0].sum() / total_words),
        wer_b=float(columns[:, 1].sum() / total_words),
        difference=_percentiles(difference, confidence),
        probability_b_better=float(np.mean(sums[:, 1] < sums[:, 0])),
    )

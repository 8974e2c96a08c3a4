"""How well word confidences predict errors: ROC AUC and a reliability table.

The confidences come from ``deepspeech.decoding.confidence``. A hypothesis word is
right when the edit-distance alignment to the reference (jiwer's, as for the WER)
pairs it with an equal reference word; substituted and inserted words are wrong.
Deleted reference words have no hypothesis word and so no confidence: they are not
scored here.

* The ROC AUC is the chance that a right word, drawn at random, has a higher
  confidence than a wrong one (ties count half): 1 separates them perfectly, 0.5 is a
  coin. It says whether the confidence can flag words for a person to check,
  whatever its scale.
* The reliability table bins the words by confidence and gives each bin's mean
  confidence beside the fraction of its words that are right: a calibrated confidence
  has the two equal. The expected calibration error is their gap, averaged over the
  words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import jiwer
import numpy as np


def word_correctness(reference: str, hypothesis: str) -> list[bool]:
    """For each hypothesis word: does the alignment pair it with an equal reference word?"""
    words = hypothesis.split()
    correct = [False] * len(words)
    if not reference.split() or not words:
        return correct
    output = jiwer.process_words(" ".join(reference.split()), " ".join(words))
    for chunk in output.alignments[0]:
        if chunk.type == "equal":
            correct[chunk.hyp_start_idx:chunk.hyp_end_idx] = [True] * (chunk.hyp_end_idx
                                                                       - chunk.hyp_start_idx)
    return correct


def roc_auc(confidences: Sequence[float], correct: Sequence[bool]) -> float | None:
    """Probability that a random right item is more confident than a random wrong one
    (ties count half); None without both kinds. Mann-Whitney U from average ranks."""
    scores = np.asarray(confidences, dtype=np.float64)
    labels = np.asarray(correct, dtype=bool)
    if scores.shape != labels.shape:
        raise ValueError(f"{scores.size} confidences for {labels.size} labels")
    right, wrong = int(labels.sum()), int((~labels).sum())
    if not right or not wrong:
        return None
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # Rank of each distinct value: the mean of the 1-based positions its ties occupy.
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]
    return float((ranks[labels].sum() - right * (right + 1) / 2.0) / (right * wrong))


@dataclass(frozen=True)
class ReliabilityBin:
    """Words whose confidence lies in ``[low, high)`` (the last bin includes 1)."""

    low: float
    high: float
    count: int
    mean_confidence: float
    fraction_correct: float


def reliability(confidences: Sequence[float], correct: Sequence[bool],
                bins: int = 10) -> list[ReliabilityBin]:
    """Equal-width confidence bins over [0, 1]: the non-empty ones, lowest first."""
    scores = np.asarray(confidences, dtype=np.float64)
    labels = np.asarray(correct, dtype=bool)
    if scores.shape != labels.shape:
        raise ValueError(f"{scores.size} confidences for {labels.size} labels")
    if scores.size and not ((scores >= 0) & (scores <= 1)).all():
        raise ValueError("confidences must lie in [0, 1]")
    index = np.minimum((scores * bins).astype(int), bins - 1)
    table = []
    for number in range(bins):
        members = index == number
        if members.any():
            table.append(ReliabilityBin(number / bins, (number + 1) / bins, int(members.sum()),
                                        float(scores[members].mean()),
                                        float(labels[members].mean())))
    return table


@dataclass(frozen=True)
class ConfidenceSummary:
    """How well the word confidences of an evaluation predict its word errors."""

    words: int
    wrong: int
    auc: float | None
    calibration_error: float  # expected calibration error over the bins
    bins: list[ReliabilityBin] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(confidences: Sequence[float], correct: Sequence[bool],
              bins: int = 10) -> ConfidenceSummary:
    """AUC, reliability table and expected calibration error of scored words."""
    table = reliability(confidences, correct, bins)
    total = sum(row.count for row in table)
    gap = sum(row.count * abs(row.mean_confidence - row.fraction_correct) for row in table)
    return ConfidenceSummary(words=len(correct), wrong=sum(not c for c in correct),
                             auc=roc_auc(confidences, correct),
                             calibration_error=gap / total if total else 0.0, bins=table)

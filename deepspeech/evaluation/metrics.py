"""Error rates: WER and CER with substitution/deletion/insertion counts (jiwer).

Rates are corpus-level (total edits over total reference words or characters),
not averages of per-utterance rates, as every ASR paper reports them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import jiwer


@dataclass(frozen=True)
class ErrorCounts:
    """Edit counts against the reference at one granularity (words or characters)."""

    substitutions: int
    deletions: int
    insertions: int
    reference_length: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        if self.reference_length == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.reference_length

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(self.substitutions + other.substitutions,
                           self.deletions + other.deletions,
                           self.insertions + other.insertions,
                           self.reference_length + other.reference_length)

    def as_list(self) -> list[int]:
        return [self.substitutions, self.deletions, self.insertions, self.reference_length]

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "rate": self.rate}


def word_errors(references: Sequence[str], hypotheses: Sequence[str]) -> ErrorCounts:
    """Word-level edit counts over the whole set."""
    return _counts(references, hypotheses, characters=False)


def char_errors(references: Sequence[str], hypotheses: Sequence[str]) -> ErrorCounts:
    """Character-level edit counts over the whole set (spaces count as characters)."""
    return _counts(references, hypotheses, characters=True)


def word_substitutions(references: Sequence[str],
                       hypotheses: Sequence[str]) -> Counter[tuple[str, str]]:
    """How often each reference word was heard as which other word.

    A held-out speaker's WER is mostly a few such pairs ("three" heard as "nine"):
    sclite prints them as confusion pairs, and they say what a corpus is missing.
    """
    pairs: Counter[tuple[str, str]] = Counter()
    for reference, hypothesis in _stripped_pairs(references, hypotheses):
        if not reference:
            continue
        output = jiwer.process_words(reference, hypothesis)
        ref_words, hyp_words = output.references[0], output.hypotheses[0]
        for chunk in output.alignments[0]:
            # A substitution chunk covers as many reference words as hypothesis words.
            if chunk.type == "substitute":
                pairs.update(zip(ref_words[chunk.ref_start_idx:chunk.ref_end_idx],
                                 hyp_words[chunk.hyp_start_idx:chunk.hyp_end_idx], strict=True))
    return pairs


def _stripped_pairs(references: Sequence[str],
                    hypotheses: Sequence[str]) -> list[tuple[str, str]]:
    """(reference, hypothesis) pairs without surrounding whitespace, one per reference."""
    if len(references) != len(hypotheses):
        raise ValueError("one hypothesis per reference is required")
    return [(reference.strip(), hypothesis.strip())
            for reference, hypothesis in zip(references, hypotheses, strict=True)]


def _counts(references: Sequence[str], hypotheses: Sequence[str],
            characters: bool) -> ErrorCounts:
    substitutions = deletions = insertions = length = 0
    for reference, hypothesis in _stripped_pairs(references, hypotheses):
        if not reference:  # jiwer rejects empty references: all hypothesis tokens are inserted
            insertions += len(hypothesis) if characters else len(hypothesis.split())
            continue
        process = jiwer.process_characters if characters else jiwer.process_words
        output = process(reference, hypothesis)
        substitutions += output.substitutions
        deletions += output.deletions
        insertions += output.insertions
        length += len(reference) if characters else len(reference.split())
    return ErrorCounts(substitutions, deletions, insertions, length)

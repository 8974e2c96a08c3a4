"""Greedy (best path) CTC decoding: the most likely class per frame, collapsed.

CTC's rule turns a frame-level path into text: merge runs of the same class, then
drop blanks ("aa-ab" -> "aab"). Taking the best class per frame is not the most
likely *text* (that sums over all paths, see ``beam.py``), but it is what Deep
Speech 2 reports without a language model, and it is nearly free: one argmax over
the batch, and per utterance a gather of the frames where a new token starts. Words
come with their frames and confidences (``deepspeech.decoding.confidence``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from deepspeech.data.text import Vocabulary
from deepspeech.decoding.confidence import token_confidences, word_confidence


def _lengths(log_probs: torch.Tensor, lengths: torch.Tensor | Sequence[int] | None) -> torch.Tensor:
    batch, frames = log_probs.shape[:2]
    if lengths is None:
        return torch.full((batch,), frames, dtype=torch.long)
    lengths = torch.as_tensor(lengths, dtype=torch.long).cpu()
    if lengths.shape != (batch,):
        raise ValueError(f"expected {batch} lengths, got shape {tuple(lengths.shape)}")
    return lengths.clamp(0, frames)


def _token_starts(best: torch.Tensor, lengths: torch.Tensor, blank: int) -> torch.Tensor:
    """Mask of the frames that start a new non-blank token (within each length)."""
    starts = best != blank
    starts[:, 1:] &= best[:, 1:] != best[:, :-1]
    starts &= torch.arange(best.shape[1]) < lengths[:, None]
    return starts


def greedy_tokens(log_probs: torch.Tensor, lengths: torch.Tensor | Sequence[int] | None,
                  blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best path's tokens, every utterance's in a row (as CTC takes its targets), and
    how many each utterance has."""
    best = log_probs.detach().argmax(dim=2).cpu()
    starts = _token_starts(best, _lengths(log_probs, lengths), blank)
    return best[starts], starts.sum(dim=1)


def greedy_decode(
    log_probs: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None,
    vocabulary: Vocabulary,
) -> list[str]:
    """Texts from ``[batch, frames, classes]`` scores (log-probs or logits) and valid lengths."""
    if log_probs.dim() != 3 or log_probs.shape[2] != len(vocabulary):
        raise ValueError(f"expected [batch, frames, {len(vocabulary)}] scores, "
                         f"got {tuple(log_probs.shape)}")
    tokens, counts = greedy_tokens(log_probs, lengths, vocabulary.blank)
    tokens, counts = tokens.tolist(), counts.tolist()
    characters = ["", *vocabulary.characters]
    texts, at = [], 0
    for count in counts:
        text = "".join([characters[i] for i in tokens[at:at + count]])
        # Runs of spaces collapse and ends are stripped, as in normalized transcripts.
        texts.append(" ".join(w for w in text.split(" ") if w) if " " in text else text)
        at += count
    return texts


class WordSegment(NamedTuple):
    """A word, its frames (``start``, the first, to ``end``, exclusive) and its confidence
    in [0, 1] (``deepspeech.decoding.confidence``)."""

    word: str
    start: int
    end: int
    confidence: float

    def seconds(self, frame_seconds: float) -> tuple[float, float]:
        """(start, end) in seconds, given the duration of one output frame."""
        return self.start * frame_seconds, self.end * frame_seconds


def greedy_decode_words(
    log_probs: torch.Tensor,
    lengths: torch.Tensor | Sequence[int] | None,
    vocabulary: Vocabulary,
) -> list[tuple[str, list[WordSegment]]]:
    """``greedy_decode``'s texts, each with its words (``greedy_word_segments``)."""
    texts = greedy_decode(log_probs, lengths, vocabulary)
    return [(text, greedy_word_segments(scores, vocabulary, int(length)))
            for text, scores, length in zip(texts, log_probs, _lengths(log_probs, lengths),
                                            strict=True)]


def greedy_word_segments(
    log_probs: torch.Tensor,
    vocabulary: Vocabulary,
    length: int | None = None,
) -> list[WordSegment]:
    """Greedy words of one utterance (``[frames, classes]`` scores) with their frame spans
    and confidences.

    A word starts at the first frame of its first character and ends after the last
    frame of its last character (blanks around it excluded), so times are
    ``frame * frame_seconds``. Without a space in the vocabulary (e.g. Mandarin),
    every character is its own segment.
    """
    if log_probs.dim() != 2 or log_probs.shape[1] != len(vocabulary):
        raise ValueError(f"expected [frames, {len(vocabulary)}] scores, "
                         f"got {tuple(log_probs.shape)}")
    frames = log_probs.shape[0] if length is None else max(0, min(int(length), log_probs.shape[0]))
    best = log_probs.detach()[:frames].argmax(dim=1).cpu()
    # Runs of one class: the class and the frame after the run.
    classes, run_lengths = torch.unique_consecutive(best, return_counts=True)
    run_ends = torch.cumsum(run_lengths, 0)
    emitted = classes != vocabulary.blank
    classes, run_ends, run_starts = (classes[emitted].tolist(), run_ends[emitted].tolist(),
                                     (run_ends - run_lengths)[emitted].tolist())
    scores = token_confidences(log_probs, classes, run_starts, frames)
    space = vocabulary.characters.index(" ") + 1 if " " in vocabulary.characters else None

    segments: list[WordSegment] = []
    word: list[str] = []
    confidences: list[float] = []
    start = end = 0
    for cls, run_start, run_end, score in zip(classes, run_starts, run_ends, scores,
                                              strict=True):
        if cls != space:
            if not word:
                start = run_start
            word.append(vocabulary.characters[cls - 1])
            confidences.append(score)
            end = run_end
        if word and (cls == space or space is None):
            segments.append(WordSegment("".join(word), start, end, word_confidence(confidences)))
            word, confidences = [], []
    if word:
        segments.append(WordSegment("".join(word), start, end, word_confidence(confidences)))
    return segments

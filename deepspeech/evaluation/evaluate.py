"""Batched, length-sorted evaluation of a model on a dataset: CER, WER, loss, speed.

Used by the trainer (validation each epoch, sharded over ranks) and by
``deepspeech evaluate`` (any manifest, a checkpoint, greedy or beam decoding). Each
hypothesis word keeps its confidence and whether it was right, so that
``deepspeech.evaluation.confidence`` can say how well the one predicts the other. Each
keeps its manifest line's other fields too (age, gender...), so that error rates can be
told apart by group (``deepspeech.evaluation.groups``), from the result or from its
report later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from deepspeech.data.dataset import SpeechDataset, collate, ctc_targets
from deepspeech.data.text import Vocabulary
from deepspeech.data.workers import init_data_worker, worker_start_method
from deepspeech.decoding.confidence import utterance_confidence
from deepspeech.decoding.greedy import WordSegment
from deepspeech.decoding.vtln import transcript_log_likelihood
from deepspeech.errors import ReportError
from deepspeech.evaluation.bootstrap import Comparison, Interval, compare, wer_interval
from deepspeech.evaluation.confidence import ConfidenceSummary, summarize, word_correctness
from deepspeech.evaluation.groups import group_rows
from deepspeech.evaluation.metrics import (
    ErrorCounts,
    char_errors,
    word_errors,
    word_substitutions,
)
from deepspeech.files import atomic_write
from deepspeech.jsonl import read_objects
from deepspeech.model.ctc_loss import ctc_loss_sum

DecodeWords = Callable[[torch.Tensor, torch.Tensor], list[tuple[str, list[WordSegment]]]]
"""``[batch, frames, classes]`` log-probs and lengths -> each utterance's text and words
(``greedy_decode_words``, ``BeamSearchDecoder.decode_words``)."""


@dataclass
class UtteranceResult:
    """One line of the per-utterance report."""

    audio_filepath: str
    reference: str
    hypothesis: str
    word_errors: int
    reference_words: int
    char_errors: int
    reference_chars: int
    speaker: str | None = None
    offset: float | None = None  # seconds into the file, for segments of a longer recording
    confidence: float | None = None  # the utterance's (decoding.confidence)
    words: list[dict] | None = None  # each hypothesis word: word, confidence, correct
    extra: dict[str, Any] = field(default_factory=dict)  # the manifest line's other fields

    @property
    def key(self) -> str:
        """The utterance's identity across reports: its file, and where in it."""
        if self.offset is None:
            return self.audio_filepath
        return f"{self.audio_filepath}@{self.offset:g}s"


@dataclass
class EvalResult:
    """Corpus-level error rates plus what a person needs to trust them."""

    wer: ErrorCounts
    cer: ErrorCounts
    loss: float
    utterances: int
    audio_seconds: float
    elapsed_seconds: float
    details: list[UtteranceResult] = field(default_factory=list)

    @property
    def real_time_factor(self) -> float:
        """Processing time over audio time: below 1 is faster than real time."""
        return self.elapsed_seconds / self.audio_seconds if self.audio_seconds else 0.0

    def summary(self, group_by: Sequence[str] = ()) -> dict:
        """Everything ``deepspeech evaluate --json`` prints; ``group_by``: see ``by_group``."""
        return {
            "utterances": self.utterances,
            "wer": self.wer.rate, "cer": self.cer.rate,
            "word_errors": self.wer.to_dict(), "char_errors": self.cer.to_dict(),
            "loss": self.loss, "audio_seconds": round(self.audio_seconds, 3),
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "real_time_factor": round(self.real_time_factor, 5),
            **({"wer_interval": asdict(self.wer_interval())} if self.details else {}),
            "speakers": self.by_speaker(),
            "groups": {grouping: self.by_group(grouping) for grouping in group_by},
            "substitutions": [[reference, hypothesis, count] for (reference, hypothesis), count
                              in self.substitutions()],
            **({"confidence": confidence.to_dict()}
               if (confidence := self.confidence()) is not None else {}),
        }

    def confidence(self) -> ConfidenceSummary | None:
        """How well the hypothesis words' confidences predict which are right
        (``deepspeech.evaluation.confidence``); None where no word has one."""
        words = [word for item in self.details for word in item.words or []]
        if not words:
            return None
        return summarize([word["confidence"] for word in words],
                         [word["correct"] for word in words])

    def by_speaker(self) -> dict[str, dict]:
        """WER and CER of each named speaker, the one with the most word errors first.

        With a few held-out speakers one of them often makes most of the errors; the
        corpus rate alone hides that. Ordered by errors, not by rate, so that a speaker
        with one short utterance does not head the list.
        """
        rows = group_rows([item for item in self.details if item.speaker is not None],
                          "speaker")
        return dict(sorted(rows.items(), key=lambda row: (-row[1]["word_errors"], row[0])))

    def by_group(self, grouping: str) -> dict[str, dict]:
        """WER and CER for each value of a manifest field (``gender``), or of several joined
        (``age_group+gender``), by value (``deepspeech.evaluation.groups``)."""
        return group_rows(self.details, grouping)

    def substitutions(self, top: int = 10) -> list[tuple[tuple[str, str], int]]:
        """The ``top`` most frequent (reference word, hypothesis word) substitutions."""
        pairs = word_substitutions([item.reference for item in self.details],
                                   [item.hypothesis for item in self.details])
        return sorted(pairs.items(), key=lambda pair: (-pair[1], pair[0]))[:top]

    def wer_interval(self) -> Interval:
        """95% bootstrap interval of the WER over the scored utterances
        (``deepspeech.evaluation.bootstrap``)."""
        return wer_interval([item.word_errors for item in self.details],
                            [item.reference_words for item in self.details])

    def compare_with(self, baseline: Sequence[UtteranceResult], source: str) -> Comparison:
        """Paired bootstrap of this result (system B) against a ``baseline`` report (A) of
        the same utterances; ``source`` names the baseline in errors."""
        earlier: dict[str, UtteranceResult] = {}
        for item in baseline:
            if item.key in earlier:
                raise ReportError(f"{source}: scores {item.key} twice; a report of "
                                  "`deepspeech evaluate --report` scores each utterance once")
            earlier[item.key] = item
        for item in self.details:
            match = earlier.get(item.key)
            if match is None:
                raise ReportError(f"{source}: does not score {item.key}; compare "
                                  "reports of the same manifest")
            if match.reference != item.reference:
                raise ReportError(f"{source}: another reference for {item.key} "
                                  f"({match.reference!r}, here {item.reference!r})")
        if len(earlier) != len(self.details):
            missing = sorted(earlier.keys() - {item.key for item in self.details})
            raise ReportError(f"{source}: scores {len(missing)} utterance(s) not scored here, "
                              f"the first {missing[0]}; compare reports of the same manifest")
        return compare([earlier[item.key].word_errors for item in self.details],
                       [item.word_errors for item in self.details],
                       [item.reference_words for item in self.details])

    def write_report(self, path: str | Path) -> None:
        """Per-utterance JSON Lines: reference, hypothesis and error counts."""
        with atomic_write(path, "w", encoding="utf-8") as handle:
            for item in self.details:
                handle.write(json.dumps(asdict(item), ensure_ascii=False, allow_nan=False) + "\n")


def _confidences(reference: str, hypothesis: str, segments: list[WordSegment],
                 log_probs: torch.Tensor, length: int, vocabulary: Vocabulary
                 ) -> tuple[float, list[dict] | None]:
    """The utterance's confidence and its words' (with their correctness), where the
    decoder's words are the hypothesis's (a vocabulary without spaces has one per
    character, which the WER does not score)."""
    confidence = utterance_confidence([s.confidence for s in segments], log_probs, vocabulary,
                                      length)
    if [s.word for s in segments] != hypothesis.split():
        return round(confidence, 6), None
    return round(confidence, 6), [
        {"word": s.word, "confidence": round(s.confidence, 6), "correct": correct}
        for s, correct in zip(segments, word_correctness(reference, hypothesis), strict=True)]


def read_report(path: str | Path) -> list[UtteranceResult]:
    """A report of ``EvalResult.write_report``, checked line by line."""
    what = "a report line of `deepspeech evaluate --report`"
    names = {item.name for item in fields(UtteranceResult)}
    required = names - {"speaker", "offset", "confidence", "words", "extra"}
    results = []
    for number, row in read_objects(path, ReportError, what):
        if not required <= row.keys():
            raise ReportError(f"{path}:{number}: not {what} (missing "
                              f"{', '.join(sorted(required - row.keys()))})")
        counts = ("word_errors", "reference_words", "char_errors", "reference_chars")
        if not all(isinstance(row[key], int) and row[key] >= 0 for key in counts):
            raise ReportError(f"{path}:{number}: error and reference counts must be "
                              "non-negative integers")
        if not isinstance(row.get("extra", {}), dict):
            raise ReportError(f"{path}:{number}: extra must be an object of the manifest "
                              "line's other fields")
        results.append(UtteranceResult(**{key: row[key] for key in names if key in row}))
    if not results:
        raise ReportError(f"{path}: the report is empty")
    return results


def length_sorted_batches(durations: Sequence[float], batch_size: int, rank: int = 0,
                          size: int = 1) -> list[list[int]]:
    """Indices sorted by duration (little padding), dealt to ranks, cut into batches."""
    order = sorted(range(len(durations)), key=lambda i: (durations[i], i))[rank::size]
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


BatchOutput = tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]
"""Dataset indices, feature lengths, CTC log-probs ``[B, T', C]`` and output lengths."""


@torch.inference_mode()
def model_outputs(model: torch.nn.Module, dataset: SpeechDataset, batches: list[list[int]],
                  num_workers: int = 0, warps: Sequence[float] = (1.0,)
                  ) -> Iterator[BatchOutput]:
    """The model's outputs on ``batches`` of ``dataset``, on the CPU, batch by batch.

    With several ``warps`` (``deepspeech.decoding.vtln``) the dataset is run once per warp
    factor and each utterance keeps the output the model is most confident of; the
    batches then come in the same order, re-padded.
    """
    device = next(model.parameters()).device

    def run(warp: float) -> Iterator[BatchOutput]:
        loader = DataLoader(dataset.at_warp(warp), batch_sampler=batches,
                            num_workers=num_workers, collate_fn=collate,
                            worker_init_fn=init_data_worker,
                            multiprocessing_context=worker_start_method(num_workers))
        for batch in loader:
            log_probs, out_lengths = model(batch.features.to(device),
                                           batch.feature_lengths.to(device))
            yield batch.indices, batch.feature_lengths, log_probs.float().cpu(), out_lengths.cpu()

    if len(warps) == 1:
        yield from run(warps[0])
        return
    best: dict[int, tuple[float, int, torch.Tensor]] = {}
    for warp in warps:
        for indices, feature_lengths, log_probs, out_lengths in run(warp):
            scores = transcript_log_likelihood(log_probs, out_lengths)
            for row, index in enumerate(indices):
                if index not in best or scores[row] > best[index][0]:
                    best[index] = (float(scores[row]), int(feature_lengths[row]),
                                   log_probs[row, :out_lengths[row]])
    for indices in batches:
        chosen = [best[index] for index in indices]
        yield (list(indices), torch.tensor([frames for _, frames, _ in chosen]),
               pad_sequence([scores for _, _, scores in chosen], batch_first=True),
               torch.tensor([len(scores) for _, _, scores in chosen]))


@torch.inference_mode()
def evaluate_dataset(model: torch.nn.Module, dataset: SpeechDataset, vocabulary: Vocabulary,
                     batch_size: int, num_workers: int = 0, sync=None,
                     decode: DecodeWords | None = None,
                     warps: Sequence[float] = (1.0,)) -> EvalResult:
    """Decode every utterance (greedy unless ``decode`` is given) and score it, and each
    hypothesis word's confidence against its correctness.

    With ``sync`` (several processes) each rank decodes a shard and the counts are
    summed; the per-utterance details stay on rank 0's shard. ``warps``: see
    ``model_outputs``.
    """
    if decode is None:
        from deepspeech.decoding.greedy import greedy_decode_words

        def decode(log_probs: torch.Tensor, lengths: torch.Tensor
                   ) -> list[tuple[str, list[WordSegment]]]:
            return greedy_decode_words(log_probs, lengths, vocabulary)

    rank, size = (sync.rank, sync.size) if sync is not None else (0, 1)
    was_training = model.training
    model.eval()
    batches = length_sorted_batches(dataset.durations(), batch_size, rank, size)
    details: list[UtteranceResult] = []
    wer = cer = ErrorCounts(0, 0, 0, 0)
    loss_sum = audio_seconds = 0.0
    start = time.perf_counter()
    for indices, feature_lengths, log_probs, out_lengths in model_outputs(
            model, dataset, batches, num_workers, warps):
        targets, target_lengths = ctc_targets([dataset.label(index) for index in indices])
        loss_sum += float(ctc_loss_sum(log_probs, out_lengths, targets, target_lengths,
                                       zero_infinity=True))
        audio_seconds += dataset.extractor.audio_seconds(feature_lengths)
        decoded = decode(log_probs, out_lengths)
        for row, (index, (hypothesis, segments)) in enumerate(zip(indices, decoded, strict=True)):
            reference = vocabulary.decode(dataset.labels[index])
            words = word_errors([reference], [hypothesis])
            chars = char_errors([reference], [hypothesis])
            wer, cer = wer + words, cer + chars
            utterance = dataset.utterances[index]
            details.append(UtteranceResult(
                utterance.audio_filepath, reference, hypothesis, words.errors,
                words.reference_length, chars.errors, chars.reference_length,
                utterance.speaker, utterance.offset,
                *_confidences(reference, hypothesis, segments, log_probs[row],
                              int(out_lengths[row]), vocabulary), utterance.extra))
    elapsed = time.perf_counter() - start
    counts = [*wer.as_list(), *cer.as_list(), loss_sum, audio_seconds, len(details), elapsed]
    if sync is not None and size > 1:
        counts = sync.sum_counts(counts)
        counts[-1] /= size
    if was_training:
        model.train()
    total = max(int(counts[10]), 1)
    return EvalResult(
        wer=ErrorCounts(*(int(c) for c in counts[0:4])),
        cer=ErrorCounts(*(int(c) for c in counts[4:8])),
        loss=counts[8] / total, utterances=int(counts[10]), audio_seconds=counts[9],
        elapsed_seconds=counts[11], details=sorted(details, key=lambda d: d.audio_filepath),
    )

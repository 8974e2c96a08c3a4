"""A manifest made ready for training: transcripts encoded, unusable utterances handled.

Problems found here stop the run before the first step (``data.bad_input: error``)
or are skipped and counted once (``skip``); either way the report names the
manifest, the line and the audio file.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from deepspeech.config import DataConfig
from deepspeech.data.manifest import Utterance, iter_manifest
from deepspeech.data.table import LabelTable, LabelTableBuilder, UtteranceTable
from deepspeech.data.text import TextNormalizer, Vocabulary
from deepspeech.errors import ManifestError
from deepspeech.files import atomic_write

log = logging.getLogger(__name__)
REPORT_LIMIT = 20
SKIP_HINT = "data.bad_input=skip in training, --skip-bad in evaluate and decode tune, skips them"
"""How to go on without the utterances an error lists."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong: its kind (a key of ``check.KINDS``), where, and what; ``index`` is
    the utterance's position in the corpus or list that was checked."""

    kind: str
    message: str
    audio: str | None = None
    line: int | None = None
    index: int | None = None


@dataclass
class Corpus:
    """Usable utterances of one manifest with their encoded transcripts, as columns
    (``deepspeech.data.table``); lists given here are stored as columns too."""

    manifest: str
    utterances: UtteranceTable
    labels: LabelTable
    skipped: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.utterances, UtteranceTable):
            self.utterances = UtteranceTable.of(self.utterances)
        if not isinstance(self.labels, LabelTable):
            self.labels = LabelTable.of(self.labels)

    @property
    def hours(self) -> float:
        return sum(self.utterances.durations.tolist()) / 3600.0

    def where(self, index: int) -> str:
        """The manifest line and audio file of utterance ``index``, as reports name them."""
        return (f"{self.manifest} line {int(self.utterances.lines[index])} "
                f"({self.utterances.paths[index]})")

    def without(self, problems: Sequence[Problem]) -> Corpus:
        """This corpus less the utterances ``problems`` point at, counted as skipped."""
        bad = {problem.index for problem in problems}
        keep = [i for i in range(len(self.utterances)) if i not in bad]
        return Corpus(self.manifest, self.utterances.take(keep), self.labels.take(keep),
                      self.skipped + len(bad))


def ctc_frames_needed(labels: str) -> int:
    """CTC needs a frame per label plus a blank between each pair of equal neighbours."""
    return len(labels) + sum(1 for a, b in zip(labels, labels[1:], strict=False) if a == b)


def transcript_problems(raw: str, text: str, vocabulary: Vocabulary, seconds: float | None,
                        output_frames: Callable[[float], int] | None) -> list[tuple[str, str]]:
    """What keeps a transcript from training, as ``(kind, message)`` pairs: ``raw`` as the
    manifest has it, ``text`` normalized; ``output_frames(seconds)`` is what the model makes
    of the audio (CTC needs ``ctc_frames_needed``). Training and ``data check`` both ask."""
    if not text:
        before = f" (before normalization: {raw!r})" if raw else ""
        return [("empty_text", f"empty transcript{before}")]
    problems = []
    unknown = vocabulary.unknown(text)
    if unknown:
        shown = ", ".join(repr(ch) for ch in unknown)
        problems.append(("vocabulary", f"character(s) outside the vocabulary: {shown} in "
                                       f"{text!r}"))
    if seconds is not None and output_frames is not None:
        needed, made = ctc_frames_needed(text), output_frames(seconds)
        if needed > made:
            problems.append(("ctc", f"{len(text)} characters need {needed} output frames, "
                                    f"{seconds:.2f} s gives {made}: CTC cannot align it"))
    return problems


def encode_corpus(
    manifest: str,
    table: UtteranceTable,
    vocabulary: Vocabulary,
    normalizer: TextNormalizer,
    config: DataConfig,
    max_labels: Callable[[float], int] | None = None,
) -> tuple[Corpus, list[Problem]]:
    """The utterances of ``table`` within the duration limits, encoded, and what keeps
    some of them from training (``settle`` decides what becomes of those).

    ``max_labels(duration)`` is the number of output frames the model produces for
    that duration: CTC cannot align a transcript that needs more frames than that.
    """
    kept: list[int] = []
    labels = LabelTableBuilder()
    problems: list[Problem] = []
    too_long = too_short = 0
    for index, (duration, raw) in enumerate(zip(table.durations.tolist(), table.texts,
                                                strict=True)):
        if duration > config.max_duration:
            too_long += 1
            continue
        if duration < config.min_duration:
            too_short += 1
            continue
        text = normalizer(raw)
        found = transcript_problems(raw, text, vocabulary, duration, max_labels)
        if found:
            problems.append(Problem(found[0][0], "; ".join(message for _, message in found),
                                    index=len(kept)))
            labels.add([])
        else:
            labels.add(vocabulary.encode(text, f"{manifest} line {int(table.lines[index])}"))
        kept.append(index)
    if too_long or too_short:
        log.info("%s: left out %d utterance(s) longer than %.1f s and %d shorter than %.1f s",
                 manifest, too_long, config.max_duration, too_short, config.min_duration)
    return Corpus(manifest, table.take(kept), labels.build()), problems


class ProblemReport:
    """Every unusable utterance a run meets, all in one file, where log messages and
    errors show the first ``REPORT_LIMIT``: at 0.1% of a million utterances, a thousand
    lines. The file exists only while there is something to report."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        path.unlink(missing_ok=True)  # an earlier attempt's, about other data

    def add(self, lines: list[str]) -> None:
        self.lines += lines
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.path, "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in self.lines)


def settle(corpus: Corpus, problems: Sequence[Problem], bad_input: str,
           report: ProblemReport | None = None) -> Corpus:
    """Raise one error naming every unusable utterance (``bad_input="error"``), or warn and
    leave them out (``"skip"``); ``report`` gets the whole list."""
    problems = sorted({p.index: p for p in reversed(problems)}.values(),
                      key=lambda p: p.index)  # one per utterance, the first found
    if problems:
        named = [f"{corpus.where(p.index)}: {p.message}" for p in problems]
        shown = "\n  ".join(named[:REPORT_LIMIT])
        if len(named) > REPORT_LIMIT:
            shown += f"\n  ... and {len(named) - REPORT_LIMIT} more"
        if report is not None:
            report.add(named)
            shown += f"\n  (every one in {report.path})"
        if bad_input == "error":
            raise ManifestError(f"{corpus.manifest}: {len(named)} unusable utterance(s) "
                                f"({SKIP_HINT}):\n  {shown}")
        log.warning("%s: skipping %d unusable utterance(s):\n  %s", corpus.manifest,
                    len(named), shown)
        corpus = corpus.without(problems)
    if not corpus.utterances:
        raise ManifestError(f"{corpus.manifest}: no usable utterances")
    return corpus


def read_texts(manifest: str, normalizer: TextNormalizer) -> list[str]:
    """Normalized transcripts of a manifest (to build a vocabulary from)."""
    return [normalizer(utterance.text) for _, utterance in iter_manifest(manifest)]


def load_corpus(
    manifest: str,
    vocabulary: Vocabulary,
    normalizer: TextNormalizer,
    config: DataConfig,
    max_labels: Callable[[float], int] | None = None,
) -> Corpus:
    """Read, filter by duration, encode; every problem in one report (``settle``)."""
    corpus, problems = encode_corpus(manifest, UtteranceTable.read(manifest), vocabulary,
                                     normalizer, config, max_labels)
    return settle(corpus, problems, config.bad_input)


def warn_if_held_out_in_training(training: Corpus, held_out: Corpus) -> None:
    """Say so when the validation data shares audio with the training data.

    Its WER would then measure memorization, and ``best.pt`` would be chosen by it; the
    usual cause is a dev manifest cut from the training one, or the same file listed in
    both. Same file means the same path and offset (segments of one long recording differ).
    """
    trained = {_audio_key(u) for u in training.utterances}
    shared = [u for u in held_out.utterances if _audio_key(u) in trained]
    if shared:
        log.warning("%s: %d of its %d utterances are also training data (the same audio, "
                    "e.g. %s): its WER measures memorization, not recognition of unseen "
                    "speech", held_out.manifest, len(shared), len(held_out.utterances),
                    shared[0].audio_filepath)


def _audio_key(utterance: Utterance) -> tuple[str, float | None]:
    return os.path.normpath(os.path.abspath(utterance.audio_filepath)), utterance.offset


def mix_corpora(parts: list[tuple[Corpus, float]], seed: int) -> Corpus:
    """One training corpus from weighted parts: each is repeated ``int(weight)`` times plus
    a seeded random ``weight % 1`` share of it, so the mixture is fixed by the seed."""
    utterances: list[UtteranceTable] = []
    labels: list[LabelTable] = []
    for number, (corpus, weight) in enumerate(parts):
        count = len(corpus.utterances)
        chosen = list(range(count)) * int(weight)
        share = round((weight % 1) * count)
        chosen += sorted(random.Random(seed * 1_000_003 + number).sample(range(count), share))
        utterances.append(corpus.utterances.take(chosen))
        labels.append(corpus.labels.take(chosen))
        log.info("%s: %d utterance(s) of %d mixed in (weight %g)", corpus.manifest,
                 len(chosen), count, weight)
    mixed = UtteranceTable.concat(utterances)
    if not mixed:
        raise ManifestError("the weighted training mixture holds no utterances")
    name = " + ".join(corpus.manifest for corpus, _ in parts)
    return Corpus(name, mixed, LabelTable.concat(labels),
                  skipped=sum(c.skipped for c, _ in parts))

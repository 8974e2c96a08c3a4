"""A manifest made ready for training: transcripts encoded, unusable utterances handled.

Problems found here stop the run before the first step (``data.bad_input: error``)
or are skipped and counted once (``skip``); either way the report names the
manifest, the line and the audio file.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

from deepspeech.config import DataConfig
from deepspeech.data.manifest import Utterance, iter_manifest
from deepspeech.data.text import TextNormalizer, Vocabulary
from deepspeech.errors import ManifestError

log = logging.getLogger(__name__)
REPORT_LIMIT = 20
SKIP_HINT = "data.bad_input=skip in training, --skip-bad in evaluate and decode tune, skips them"
"""How to go on without the utterances an error lists."""


@dataclass
class Corpus:
    """Usable utterances of one manifest with their encoded transcripts."""

    manifest: str
    utterances: list[Utterance]
    labels: list[list[int]]
    skipped: int = 0

    @property
    def hours(self) -> float:
        return sum(u.duration for u in self.utterances) / 3600.0


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
    """Read, filter by duration, encode; collect every problem before failing.

    ``max_labels(duration)`` is the number of output frames the model produces for
    that duration: CTC cannot align a transcript that needs more frames than that.
    """
    utterances: list[Utterance] = []
    labels: list[list[int]] = []
    problems: list[str] = []
    too_long = too_short = 0
    for line, utterance in iter_manifest(manifest):
        where = f"{manifest} line {line} ({utterance.audio_filepath})"
        if utterance.duration > config.max_duration:
            too_long += 1
            continue
        if utterance.duration < config.min_duration:
            too_short += 1
            continue
        text = normalizer(utterance.text)
        found = transcript_problems(utterance.text, text, vocabulary, utterance.duration,
                                    max_labels)
        if found:
            problems.append(f"{where}: {'; '.join(message for _, message in found)}")
            continue
        utterances.append(utterance)
        labels.append(vocabulary.encode(text, where))
    if too_long or too_short:
        log.info("%s: left out %d utterance(s) longer than %.1f s and %d shorter than %.1f s",
                 manifest, too_long, config.max_duration, too_short, config.min_duration)
    if problems:
        report = "\n  ".join(problems[:REPORT_LIMIT])
        if len(problems) > REPORT_LIMIT:
            report += f"\n  ... and {len(problems) - REPORT_LIMIT} more"
        if config.bad_input == "error":
            raise ManifestError(
                f"{len(problems)} unusable utterance(s) ({SKIP_HINT}):"
                f"\n  {report}"
            )
        log.warning("skipping %d unusable utterance(s):\n  %s", len(problems), report)
    if not utterances:
        raise ManifestError(f"{manifest}: no usable utterances")
    return Corpus(manifest, utterances, labels, skipped=len(problems))


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
    utterances: list[Utterance] = []
    labels: list[list[int]] = []
    for number, (corpus, weight) in enumerate(parts):
        count = len(corpus.utterances)
        chosen = list(range(count)) * int(weight)
        share = round((weight % 1) * count)
        chosen += sorted(random.Random(seed * 1_000_003 + number).sample(range(count), share))
        utterances += [corpus.utterances[i] for i in chosen]
        labels += [corpus.labels[i] for i in chosen]
        log.info("%s: %d utterance(s) of %d mixed in (weight %g)", corpus.manifest,
                 len(chosen), count, weight)
    if not utterances:
        raise ManifestError("the weighted training mixture holds no utterances")
    name = " + ".join(corpus.manifest for corpus, _ in parts)
    return Corpus(name, utterances, labels, skipped=sum(c.skipped for c, _ in parts))

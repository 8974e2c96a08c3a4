"""Open audio files once to learn what training could not load, before it tries.

``probe_audio`` reads one file's header (``soundfile.info``, a parse of the WAV/SPHERE
header and one read at the end of the file), or with ``decode`` every sample, and
returns its ``AudioFacts``: frames, rate, channels, peak and the problems found
(missing, empty, unreadable, truncated, no samples; with ``decode`` NaN samples and
silence). ``probe_files`` does it for many files in threads.

``find_unreadable`` / ``without_unreadable`` turn facts into verdicts on a manifest's
utterances, for the trainer, inference and the noise sets: run once before the first
step, they turn "crash in a DataLoader worker at hour 10" into a report up front, or a
skip under ``data.bad_input: skip``. The trainer hands them facts probed across ranks
and kept between runs (``deepspeech.data.probe_cache``, the layer above this one);
``deepspeech data check`` (``deepspeech.data.check``) reports the same facts in full.
"""

from __future__ import annotations

import logging
import math
import os
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf
from tqdm import tqdm

from deepspeech.data.audio import cut_off, falls_short
from deepspeech.data.corpus import Corpus, Problem, settle
from deepspeech.data.manifest import Utterance
from deepspeech.data.shards import cut_short, member_file, member_ref, stored_file
from deepspeech.errors import AudioError

log = logging.getLogger(__name__)

# Kinds that make a file unusable for training (the rest are warnings about content).
UNREADABLE = ("missing", "empty_file", "unreadable", "truncated", "no_samples", "offset", "nan",
              "too_short", "checksum")
DURATION_TOLERANCE = (0.1, 0.05)   # seconds, fraction: the larger of the two is allowed
TAIL_FRAMES = 1024
BLOCK_FRAMES = 1 << 16


@dataclass(slots=True)
class AudioFacts:
    """What opening (and maybe decoding) one file found (slots: the pre-flight holds one
    per audio file of the corpus at once)."""

    frames: int = 0
    sample_rate: int = 0
    channels: int = 0
    peak: float | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0

    @property
    def usable(self) -> bool:
        return not any(kind in UNREADABLE for kind, _ in self.problems)


def probe_audio(path: str, decode: bool = False, silence_db: float = -60.0) -> AudioFacts:
    """Header facts and problems of one file; ``decode`` also reads every sample."""
    facts = AudioFacts()
    ref = member_ref(path)
    try:
        status = os.stat(stored_file(path))
    except OSError:
        status = None
    if status is not None and stat.S_ISDIR(status.st_mode):
        facts.problems.append(("unreadable", "a folder, not an audio file"))
        return facts
    if status is None or not stat.S_ISREG(status.st_mode):
        facts.problems.append(("missing", "shard file missing" if ref else "audio file missing"))
        return facts
    short = cut_short(ref, status.st_size) if ref else None
    if short:
        facts.problems.append(("truncated", short))
        return facts
    if (ref.size if ref else status.st_size) == 0:
        facts.problems.append(("empty_file", "file is empty (0 bytes)"))
        return facts
    try:
        # One open for the header and the read at the end: at a few hundred thousand
        # files the pre-flight is bound by these opens (a shard member: reads, no open).
        handle = sf.SoundFile(member_file(ref) if ref else path)
    except AudioError as exc:  # the shard, changed since the stat
        facts.problems.append(("unreadable", str(exc)))
        return facts
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        facts.problems.append(("unreadable", f"not readable as audio ({_reason(exc)})"))
        return facts
    with handle:
        facts.frames, facts.sample_rate, facts.channels = (handle.frames, handle.samplerate,
                                                           handle.channels)
        if handle.frames <= 0:
            facts.problems.append(("no_samples", "header declares no samples"))
            return facts
        # The same test as load_audio's, so training and transcribe agree with this.
        missing = cut_off(path, handle.frames, handle.samplerate, handle.format)
        if missing:
            facts.problems.append(("truncated", missing))
            return facts
        try:
            if decode:
                read, peak, finite = 0, 0.0, True
                while len(block := handle.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
                    read += len(block)
                    finite = finite and bool(np.isfinite(block).all())
                    peak = max(peak, float(np.nanmax(np.abs(block), initial=0.0)))
                short = falls_short(read, handle.frames, handle.samplerate)
            else:  # one read at the end: a cut FLAC raises here, a cut MP3 reads nothing
                wanted = min(TAIL_FRAMES, handle.frames)
                handle.seek(handle.frames - wanted)
                short = len(handle.read(wanted, dtype="float32")) < wanted // 2
        except (sf.LibsndfileError, RuntimeError, AudioError) as exc:
            facts.problems.append(("truncated", f"decoding fails before the end the header "
                                                f"declares ({_reason(exc)})"))
            return facts
    if short:
        facts.problems.append(("truncated", f"header declares {facts.seconds:.3f} s but "
                                            "decoding stops well before the end"))
        return facts
    if decode:
        facts.peak = peak
        if not finite:
            facts.problems.append(("nan", "contains NaN or infinite samples"))
        elif peak <= 10 ** (silence_db / 20):
            level = (f"peak {20 * math.log10(peak):.1f} dBFS is below {silence_db:g} dBFS"
                     if peak > 0 else "every sample is zero")
            facts.problems.append(("silent", level))
    return facts


def _reason(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1].strip() or type(exc).__name__


def probe_files(paths: Sequence[str], decode: bool = False, silence_db: float = -60.0,
                workers: int = 4, progress: bool = False) -> dict[str, AudioFacts]:
    """``probe_audio`` for each distinct path, in threads: they overlap the waits on a
    network file system; on local files the Python around libsndfile holds the GIL, so
    ``probe_cache`` splits large sets over processes instead."""
    unique = list(dict.fromkeys(paths))
    pool = ThreadPoolExecutor(max(1, workers))
    try:
        facts = pool.map(lambda p: probe_audio(p, decode, silence_db), unique, chunksize=16)
        facts = tqdm(facts, total=len(unique), unit="file", desc="checking audio",
                     disable=None if progress else True, leave=False)
        return dict(zip(unique, facts, strict=True))
    finally:
        # A stop request raised here waits for the files being opened, not for the rest.
        pool.shutdown(cancel_futures=True)


def find_unreadable(utterances: Sequence[Utterance], workers: int = 8,
                    decode: bool = False, min_seconds: float = 0.0,
                    manifest: str = "",
                    facts: Mapping[str, AudioFacts] | None = None) -> list[Problem]:
    """Utterances training could not load (missing, unreadable, cut, offset past the end),
    and, with ``min_seconds``, those shorter than the features take.

    Headers only unless ``decode``; each problem's ``index`` is the utterance's position.
    With ``manifest`` (its name), also warns where the audio lasts other than the
    manifest says: batches, ``data.max_duration`` and the transcript-length check go by
    the manifest, so durations computed at the wrong sample rate would skew them all.
    ``facts``: the files already probed (``probe_cache.shared_probe``), else probed here.
    """
    if facts is None:
        facts = probe_files([u.audio_filepath for u in utterances], decode=decode,
                            workers=workers)
    problems, disagreements = [], []
    for index, utterance in enumerate(utterances):
        found = facts[utterance.audio_filepath]
        for kind, message in (found.problems + segment_problems(utterance, found)
                              + _length_problems(utterance, found, min_seconds)):
            if kind in UNREADABLE:
                problems.append(Problem(kind, message, utterance.audio_filepath, index=index))
                break
        else:
            disagreement = duration_disagreement(utterance, found.seconds)
            if disagreement and found.frames:
                disagreements.append(f"{utterance.audio_filepath}: {disagreement}")
    if manifest and disagreements:
        shown = "\n  ".join(disagreements[:3])
        log.warning("%s: %d of %d utterance(s) last other than the manifest says, which the "
                    "batches, data.max_duration and the transcript-length check go by "
                    "(deepspeech data check %s lists them all):\n  %s", manifest,
                    len(disagreements), len(utterances), manifest, shown)
    return problems


def duration_disagreement(utterance: Utterance, seconds: float) -> str | None:
    """How a whole-file utterance's manifest duration misses the audio's, if it does."""
    tolerance = max(DURATION_TOLERANCE[0], DURATION_TOLERANCE[1] * seconds)
    if utterance.offset is None and abs(utterance.duration - seconds) > tolerance:
        return f"manifest says {utterance.duration:.3f} s, the audio lasts {seconds:.3f} s"
    return None


def without_unreadable(corpus: Corpus, bad_input: str = "error", workers: int = 8,
                       decode: bool = False, min_seconds: float = 0.0,
                       facts: Mapping[str, AudioFacts] | None = None) -> Corpus:
    """``corpus`` minus unloadable utterances; ``bad_input="error"`` raises a full report.

    Headers only by default (seconds per 10,000 files); ``decode`` also finds NaN
    samples, at the cost of decoding the whole corpus once. ``min_seconds``, ``facts``: see
    ``find_unreadable``.
    """
    return settle(corpus, find_unreadable(corpus.utterances, workers, decode=decode,
                                          min_seconds=min_seconds, manifest=corpus.manifest,
                                          facts=facts), bad_input)


def segment_problems(utterance: Utterance, facts: AudioFacts) -> list[tuple[str, str]]:
    """An ``offset`` utterance whose segment starts or ends past the end of its audio."""
    if utterance.offset is None or not facts.frames:
        return []
    seconds, fraction = DURATION_TOLERANCE
    if utterance.offset >= facts.seconds:
        return [("offset", f"offset {utterance.offset:.3f} s is past the end "
                           f"({facts.seconds:.3f} s)")]
    end = utterance.offset + utterance.duration
    if end - facts.seconds > max(seconds, fraction * utterance.duration):
        return [("offset", f"segment {utterance.offset:.3f}-{end:.3f} s runs past the end "
                           f"({facts.seconds:.3f} s)")]
    return []


def _length_problems(utterance: Utterance, facts: AudioFacts,
                     min_seconds: float) -> list[tuple[str, str]]:
    if not min_seconds or not facts.frames:
        return []
    seconds = utterance.duration if utterance.offset is not None else facts.seconds
    if seconds >= min_seconds:
        return []
    return [("too_short", f"{1000 * seconds:g} ms of audio, shorter than the "
                          f"{1000 * min_seconds:g} ms the features take")]

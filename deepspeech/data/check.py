"""Find every problem in a manifest before training does, without changing it.

``check_manifest`` reads the manifest line by line (a malformed line is reported
and the scan goes on), opens each distinct audio file once, in threads, and
reports by kind: malformed lines, duplicates, missing / empty / unreadable /
truncated / zero-length audio, offsets past the end, NaN samples, silence,
manifest durations that disagree with the audio, empty transcripts, characters
outside the vocabulary, and audio too short for its transcript under CTC.

Headers (``soundfile.info``, a parse of the WAV/SPHERE header and one read at the
end of the file) are enough for everything but NaN samples and silence, which
need every sample decoded; ``quick`` skips that pass. ``write_clean`` writes a copy
beside the manifest without the lines that have problems.

``find_unreadable`` / ``without_unreadable`` are the header pass alone, for the
trainer: run once before the first step, they turn "crash in a DataLoader worker
at hour 10" into a report up front, or a skip under ``data.bad_input: skip``. The
trainer hands them facts probed across ranks and kept between runs
(``deepspeech.data.probe_cache``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from deepspeech.data.audio import cut_off, falls_short
from deepspeech.data.corpus import Corpus, Problem, settle, transcript_problems
from deepspeech.data.manifest import Utterance, parse_line
from deepspeech.data.text import TextNormalizer, Vocabulary, build_vocabulary
from deepspeech.errors import ManifestError
from deepspeech.files import atomic_write

log = logging.getLogger(__name__)

# Report headings, in the order the report lists them.
KINDS = {
    "empty_manifest": "empty manifest",
    "malformed": "malformed manifest lines",
    "duplicate": "duplicate entries",
    "missing": "missing audio files",
    "empty_file": "empty audio files (0 bytes)",
    "unreadable": "unreadable audio",
    "truncated": "truncated audio",
    "no_samples": "audio without samples",
    "offset": "offset or segment past the end of the audio",
    "nan": "NaN or infinite samples",
    "silent": "silent audio",
    "duration": "manifest duration differs from the audio",
    "empty_text": "empty transcripts",
    "vocabulary": "characters outside the vocabulary",
    "ctc": "audio too short for its transcript (CTC)",
}
# Kinds that make a file unusable for training (the rest are warnings about content).
UNREADABLE = ("missing", "empty_file", "unreadable", "truncated", "no_samples", "offset", "nan",
              "too_short")
DURATION_TOLERANCE = (0.1, 0.05)   # seconds, fraction: the larger of the two is allowed
DEFAULT_FRAME_SECONDS = 0.02       # 10 ms hops, time stride 2: Deep Speech 2's output rate
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
    try:
        status = os.stat(path)
    except OSError:
        status = None
    if status is not None and stat.S_ISDIR(status.st_mode):
        facts.problems.append(("unreadable", "a folder, not an audio file"))
        return facts
    if status is None or not stat.S_ISREG(status.st_mode):
        facts.problems.append(("missing", "audio file missing"))
        return facts
    if status.st_size == 0:
        facts.problems.append(("empty_file", "file is empty (0 bytes)"))
        return facts
    try:
        # One open for the header and the read at the end: at a few hundred thousand
        # files the pre-flight is bound by these opens.
        handle = sf.SoundFile(path)
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
        except (sf.LibsndfileError, RuntimeError) as exc:
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
    with ThreadPoolExecutor(max(1, workers)) as pool:
        facts = pool.map(lambda p: probe_audio(p, decode, silence_db), unique, chunksize=16)
        facts = tqdm(facts, total=len(unique), unit="file", desc="checking audio",
                     disable=None if progress else True, leave=False)
        return dict(zip(unique, facts, strict=True))


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
        for kind, message in (found.problems + _segment_problems(utterance, found)
                              + _length_problems(utterance, found, min_seconds)):
            if kind in UNREADABLE:
                problems.append(Problem(kind, message, utterance.audio_filepath, index=index))
                break
        else:
            disagreement = _duration_disagreement(utterance, found.seconds)
            if disagreement and found.frames:
                disagreements.append(f"{utterance.audio_filepath}: {disagreement}")
    if manifest and disagreements:
        shown = "\n  ".join(disagreements[:3])
        log.warning("%s: %d of %d utterance(s) last other than the manifest says, which the "
                    "batches, data.max_duration and the transcript-length check go by "
                    "(deepspeech data check %s lists them all):\n  %s", manifest,
                    len(disagreements), len(utterances), manifest, shown)
    return problems


def _duration_disagreement(utterance: Utterance, seconds: float) -> str | None:
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


def _segment_problems(utterance: Utterance, facts: AudioFacts) -> list[tuple[str, str]]:
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


def default_output_frames(duration: float) -> int:
    """Output frames of a model with a 20 ms output frame (no config to ask)."""
    return int(duration / DEFAULT_FRAME_SECONDS)


@dataclass
class CheckReport:
    """Everything ``check_manifest`` found in one manifest."""

    manifest: str
    lines: int = 0
    utterances: int = 0
    audio_seconds: float = 0.0
    decoded: bool = True
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Lines whose manifest duration disagrees with the audio: the audio's, in seconds.
    audio_durations: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def counts(self) -> dict[str, int]:
        counts = Counter(p.kind for p in self.problems)
        return {kind: counts[kind] for kind in KINDS if counts[kind]}

    def to_dict(self) -> dict:
        return {"manifest": self.manifest, "lines": self.lines, "utterances": self.utterances,
                "audio_hours": round(self.audio_seconds / 3600, 6), "decoded": self.decoded,
                "ok": self.ok, "counts": self.counts(),
                "problems": [{k: v for k, v in asdict(p).items() if k != "index"}
                             for p in self.problems],
                "notes": self.notes}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def format(self) -> str:
        mode = "headers + full decode" if self.decoded else "headers only: --quick"
        lines = [f"{self.manifest}: {self.lines} lines, {self.utterances} utterances, "
                 f"{self.audio_seconds / 3600:.3f} h of audio checked ({mode})"]
        base = Path(self.manifest).resolve().parent
        for kind, count in self.counts().items():
            lines.append(f"\n{KINDS[kind]} ({count})")
            for p in sorted((p for p in self.problems if p.kind == kind),
                            key=lambda p: p.line or 0):
                audio = f" {_shown(p.audio, base)}:" if p.audio else ""
                where = f"{self.manifest}:{p.line}:" if p.line else f"{self.manifest}:"
                lines.append(f"  {where}{audio} {p.message}")
        if self.notes:
            lines.append("\nnotes")
            lines.extend(f"  {note}" for note in self.notes)
        if self.ok:
            lines.append("\nno problems found")
        else:
            summary = ", ".join(f"{kind} {count}" for kind, count in self.counts().items())
            on_lines = len({p.line for p in self.problems if p.line})
            lines.append(f"\n{len(self.problems)} problem(s)"
                         f"{f' on {on_lines} line(s)' if on_lines else ''}: {summary}")
        return "\n".join(lines)


def write_clean(report: CheckReport) -> tuple[Path, int]:
    """``NAME.clean.jsonl`` beside the checked manifest ``NAME.jsonl`` (so that relative
    audio paths still resolve): its lines without problems, a duration that disagrees with
    the audio replaced by the audio's. Returns the path and the number of lines written.

    Every other problem leaves its line out, silent audio and repeats included: a
    transcript over silence, or an utterance counted twice, is no training data either.
    """
    source = Path(report.manifest)
    target = source.with_name(f"{source.name.removesuffix('.jsonl')}.clean.jsonl")
    dropped = {p.line for p in report.problems if p.kind != "duration"}
    kept = 0
    with atomic_write(target) as handle:
        for number, raw in enumerate(source.read_bytes().splitlines(), start=1):
            if number in dropped or not raw.strip():
                continue
            if number in report.audio_durations:
                entry = json.loads(raw)
                entry["duration"] = round(report.audio_durations[number], 6)
                raw = json.dumps(entry, ensure_ascii=False).encode("utf-8")
            handle.write(raw + b"\n")
            kept += 1
    return target, kept


def _shown(path: str, base: Path) -> str:
    audio = Path(path)
    return str(audio.relative_to(base)) if audio.is_relative_to(base) else path


def check_manifest(
    path: str | os.PathLike,
    vocabulary: Vocabulary | str = "english",
    normalizer: TextNormalizer | None = None,
    sample_rate: int = 16000,
    output_frames: Callable[[float], int] | None = None,
    quick: bool = False,
    workers: int = 4,
    silence_db: float = -60.0,
    probe: Callable[..., Mapping[str, AudioFacts]] = probe_files,
) -> CheckReport:
    """Every problem of a manifest, grouped by kind; nothing is modified.

    ``vocabulary``: a ``Vocabulary`` or a ``data.vocabulary`` setting (``"build"``: from
    the manifest's own transcripts);
    ``output_frames(seconds)`` is the model's output frame count (default: 20 ms
    frames); ``quick`` reads headers only (no NaN or silence check);
    ``probe`` opens the audio files, called as `probe_files` is (the command line passes
    the probe cache's, ``probe_cache.shared_probe``, so a second check opens nothing).
    """
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: manifest not found")
    normalizer = normalizer or TextNormalizer()
    report = CheckReport(str(path), decoded=not quick)
    base = path.resolve().parent
    entries: list[tuple[int, Utterance]] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            report.lines = number
            try:
                line = raw.decode("utf-8")
                if line.strip():
                    entries.append((number, parse_line(line, "", base)))
            except UnicodeDecodeError as exc:
                report.problems.append(Problem("malformed", f"not valid UTF-8 ({exc.reason} "
                                                            f"at byte {exc.start})", line=number))
            except ManifestError as exc:
                report.problems.append(Problem("malformed", str(exc).lstrip(": "), line=number))
    report.utterances = len(entries)
    if not entries and not report.problems:
        # Training refuses it ("manifest is empty"); a report of no problems would not.
        what = "0 bytes" if not path.stat().st_size else f"{report.lines} blank line(s)"
        report.problems.append(Problem("empty_manifest", f"no utterances ({what})"))

    first_seen: dict[tuple[str, float | None], int] = {}
    for number, utterance in entries:
        key = (os.path.normpath(utterance.audio_filepath), utterance.offset)
        if key in first_seen:
            what = "audio" if utterance.offset is None else "audio and offset"
            report.problems.append(Problem("duplicate", f"same {what} as line {first_seen[key]}",
                                           utterance.audio_filepath, number))
        else:
            first_seen[key] = number

    texts = {number: normalizer(u.text) for number, u in entries}
    if isinstance(vocabulary, str):
        setting = vocabulary
        vocabulary = build_vocabulary(setting, [t for t in texts.values() if t] or [" "])
        if setting == "build":
            report.notes.append(f"vocabulary built from this manifest: "
                                f"{''.join(vocabulary.characters)!r}")
    if output_frames is None:
        output_frames = default_output_frames
        report.notes.append("CTC check assumes a 20 ms output frame (10 ms hop, time stride 2); "
                            "give --config for the model's real stride")

    facts = probe([u.audio_filepath for _, u in entries], decode=not quick,
                  silence_db=silence_db, workers=workers, progress=True)
    for number, utterance in entries:
        found = facts[utterance.audio_filepath]
        audio = utterance.audio_filepath
        found_problems = found.problems + _segment_problems(utterance, found)
        for kind, message in found_problems:
            report.problems.append(Problem(kind, message, audio, number))
        # Durations and CTC lengths only mean something for audio that loads.
        seconds = None
        if not any(kind in UNREADABLE for kind, _ in found_problems):
            seconds = (found.seconds if utterance.offset is None
                       else min(utterance.duration, found.seconds - utterance.offset))
            report.audio_seconds += seconds
            disagreement = _duration_disagreement(utterance, seconds)
            if disagreement:
                report.problems.append(Problem("duration", disagreement, audio, number))
                report.audio_durations[number] = seconds
        report.problems += [Problem(kind, message, audio, number) for kind, message in
                            transcript_problems(utterance.text, texts[number], vocabulary,
                                                seconds, output_frames)]

    rates = Counter(f.sample_rate for f in facts.values() if f.sample_rate)
    for rate, count in sorted(rates.items()):
        if rate != sample_rate:
            upsampled = f" (upsampled: nothing above {rate // 2} Hz)" if rate < sample_rate else ""
            report.notes.append(f"{count} file(s) at {rate} Hz are resampled to {sample_rate} Hz"
                                f"{upsampled}")
    multi = sum(1 for f in facts.values() if f.channels > 1)
    if multi:
        report.notes.append(f"{multi} file(s) have more than one channel: mixed down to mono")
    return report

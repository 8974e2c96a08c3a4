"""``deepspeech data check``: every problem of a manifest, before training meets it.

``check_manifest`` reads the manifest line by line (a malformed line is reported
and the scan goes on), opens each distinct audio file once, through the probe cache
(``deepspeech.data.probe_cache``: a second check opens only the files that changed,
and a ``quick`` one shares the headers training read), and reports by kind:
malformed lines, duplicates, missing / empty / unreadable / truncated / zero-length
audio, offsets past the end, NaN samples, silence, manifest durations that disagree
with the audio, empty transcripts, characters outside the vocabulary, and audio too
short for its transcript under CTC.

Headers (``deepspeech.data.probe``, the same probe as training's) are enough for
everything but NaN samples and silence, which need every sample decoded; ``quick``
skips that pass, and the checksums of shards (``deepspeech.data.shards``), which a full
check hashes once per shard. ``write_clean`` writes a copy beside the manifest without the lines
that have problems.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from deepspeech.data.corpus import Problem, transcript_problems
from deepspeech.data.manifest import Utterance, parse_line
from deepspeech.data.probe import UNREADABLE, duration_disagreement, segment_problems
from deepspeech.data.probe_cache import shared_probe
from deepspeech.data.shards import checksum_problems, stored_file
from deepspeech.data.text import TextNormalizer, Vocabulary, build_vocabulary
from deepspeech.errors import ManifestError
from deepspeech.files import atomic_write

# Report headings, in the order the report lists them.
KINDS = {
    "empty_manifest": "empty manifest",
    "malformed": "malformed manifest lines",
    "duplicate": "duplicate entries",
    "missing": "missing audio files",
    "empty_file": "empty audio files (0 bytes)",
    "unreadable": "unreadable audio",
    "truncated": "truncated audio",
    "checksum": "shards that fail their checksum",
    "no_samples": "audio without samples",
    "offset": "offset or segment past the end of the audio",
    "nan": "NaN or infinite samples",
    "silent": "silent audio",
    "duration": "manifest duration differs from the audio",
    "empty_text": "empty transcripts",
    "vocabulary": "characters outside the vocabulary",
    "ctc": "audio too short for its transcript (CTC)",
}
DEFAULT_FRAME_SECONDS = 0.02       # 10 ms hops, time stride 2: Deep Speech 2's output rate


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
    use_cache: bool = True,
) -> CheckReport:
    """Every problem of a manifest, grouped by kind; nothing is modified.

    ``vocabulary``: a ``Vocabulary`` or a ``data.vocabulary`` setting (``"build"``: from
    the manifest's own transcripts);
    ``output_frames(seconds)`` is the model's output frame count (default: 20 ms
    frames); ``quick`` reads headers only (no NaN or silence check);
    ``use_cache``: take unchanged files' facts from the probe cache and keep the new ones
    there (a ``quick`` check shares training's), else open every file.
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

    facts = shared_probe([u.audio_filepath for _, u in entries], str(path), decode=not quick,
                         workers=workers, silence_db=silence_db, use_cache=use_cache,
                         progress=True)
    # Shards (deepspeech.data.shards) are hashed whole, once each: not in a quick check.
    corrupt, shard_notes = ({}, []) if quick else checksum_problems(facts)
    report.notes += shard_notes
    for number, utterance in entries:
        found = facts[utterance.audio_filepath]
        audio = utterance.audio_filepath
        found_problems = found.problems + segment_problems(utterance, found)
        if stored_file(audio) in corrupt:
            found_problems.insert(0, ("checksum", corrupt[stored_file(audio)]))
        for kind, message in found_problems:
            report.problems.append(Problem(kind, message, audio, number))
        # Durations and CTC lengths only mean something for audio that loads.
        seconds = None
        if not any(kind in UNREADABLE for kind, _ in found_problems):
            seconds = (found.seconds if utterance.offset is None
                       else min(utterance.duration, found.seconds - utterance.offset))
            report.audio_seconds += seconds
            disagreement = duration_disagreement(utterance, seconds)
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

"""JSON Lines manifests: one utterance per line, the format every preparer writes.

``{"audio_filepath": str, "text": str, "duration": float}`` plus optional
``"offset"`` (seconds) and ``"speaker"``. This is also NeMo's format, so users can
bring their own as it comes: other fields (NeMo's ``"lang"``, ``"pred_text"``...) ride
along in ``Utterance.extra`` and are written back, with one log note per manifest
naming them; a field that looks like a misspelt one of ours (``"durration"``) is an
error that names the field it probably meant. Relative audio paths are resolved
against the manifest's folder so that a corpus folder can be moved or copied as a
whole.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepspeech.errors import ManifestError
from deepspeech.files import atomic_write, not_utf8
from deepspeech.jsonl import parse_object

REQUIRED_FIELDS = ("audio_filepath", "text", "duration")
OPTIONAL_FIELDS = ("offset", "speaker")
# How alike (difflib's ratio, case ignored) an unknown field must be to a field of ours to
# be taken for a misspelling of it. A missing required field is an error anyway, so the
# guess only words its message (0.8 catches txt, durration, audio_filpath). For an absent
# optional one it makes an error of a field that would otherwise ride along: 0.85 catches
# ofset and speker but lets speaker_id, a field of its own in some corpora, through.
NEAR_MISS_REQUIRED = 0.8
NEAR_MISS_OPTIONAL = 0.85

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Utterance:
    """One manifest line: where the audio is, what is said, how long it lasts."""

    audio_filepath: str
    text: str
    duration: float
    offset: float | None = None
    speaker: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """The line's other fields (NeMo's ``lang``...), unused here and written back as read."""

    def to_json(self) -> str:
        record: dict[str, object] = {
            "audio_filepath": self.audio_filepath,
            "text": self.text,
            "duration": round(self.duration, 6),
        }
        if self.offset is not None:
            record["offset"] = self.offset
        if self.speaker is not None:
            record["speaker"] = self.speaker
        record.update((key, value) for key, value in self.extra.items() if key not in record)
        return json.dumps(record, ensure_ascii=False)


def _near_misses(unknown: list[str], record: dict) -> dict[str, str]:
    """Unknown field -> the absent field of ours it probably misspells."""
    guesses = {}
    for fields, cutoff in ((REQUIRED_FIELDS, NEAR_MISS_REQUIRED),
                           (OPTIONAL_FIELDS, NEAR_MISS_OPTIONAL)):
        absent = {name.lower(): name for name in fields if name not in record}
        for name in unknown:
            match = difflib.get_close_matches(name.lower(), absent, n=1, cutoff=cutoff)
            if match and name not in guesses:
                guesses[name] = absent[match[0]]
    return guesses


def parse_line(line: str, where: str, base: Path) -> Utterance:
    """One manifest line; ``where`` names it in errors, ``base`` resolves relative paths."""
    record = parse_object(line, where, ManifestError)
    unknown = [key for key in record if key not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
    guesses = _near_misses(unknown, record) if unknown else {}
    missing = [key for key in REQUIRED_FIELDS if key not in record]
    if guesses:
        meant = "; ".join(f"unknown field {name!r}, probably meant {guess!r}"
                          for name, guess in guesses.items())
        also = f"; missing field(s) {', '.join(missing)}" if missing else ""
        raise ManifestError(f"{where}: {meant}{also}")
    if missing:
        raise ManifestError(f"{where}: missing field(s) {', '.join(missing)}")
    path, text, duration = record["audio_filepath"], record["text"], record["duration"]
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{where}: audio_filepath must be a non-empty string")
    if not isinstance(text, str):
        raise ManifestError(f"{where}: text must be a string, got {type(text).__name__}")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)):
        raise ManifestError(f"{where}: duration must be a number, got {duration!r}")
    if not math.isfinite(duration) or duration <= 0:
        raise ManifestError(f"{where}: duration must be positive and finite, got {duration!r}")
    offset = record.get("offset")
    if offset is not None and (
        isinstance(offset, bool) or not isinstance(offset, (int, float)) or offset < 0
    ):
        raise ManifestError(f"{where}: offset must be a non-negative number, got {offset!r}")
    speaker = record.get("speaker")
    if speaker is not None and not isinstance(speaker, (str, int)):
        raise ManifestError(f"{where}: speaker must be a string, got {speaker!r}")
    resolved = path if os.path.isabs(path) else str(base / path)
    return Utterance(
        audio_filepath=resolved,
        text=text,
        duration=float(duration),
        offset=None if offset is None else float(offset),
        speaker=None if speaker is None else str(speaker),
        extra={key: record[key] for key in unknown},
    )


def iter_manifest(path: str | os.PathLike) -> Iterator[tuple[int, Utterance]]:
    """Yield ``(line_number, utterance)`` pairs, streaming; blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: manifest not found")
    base = path.resolve().parent
    unknown: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    utterance = parse_line(line, f"{path} line {number}", base)
                    for key in utterance.extra:
                        unknown[key] = unknown.get(key, 0) + 1
                    yield number, utterance
        except UnicodeDecodeError:
            raise not_utf8(path, ManifestError) from None
    if unknown:  # once per manifest, not once per line
        log.info("%s: field(s) not used here, carried along: %s", path,
                 ", ".join(f"{key} ({count} lines)" for key, count in unknown.items()))


def read_manifest(path: str | os.PathLike) -> list[Utterance]:
    """Read a whole manifest; raises ``ManifestError`` naming the first bad line."""
    utterances = [utterance for _, utterance in iter_manifest(path)]
    if not utterances:
        raise ManifestError(f"{path}: manifest is empty")
    return utterances


def write_manifest(
    path: str | os.PathLike, utterances: Iterable[Utterance], relative: bool = True
) -> int:
    """Write atomically (temp file + rename); paths under the manifest's folder become relative.

    Returns the number of lines written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.resolve().parent
    count = 0
    with atomic_write(path, "w", encoding="utf-8") as handle:
        for utterance in utterances:
            audio = Path(utterance.audio_filepath)
            if relative and audio.is_absolute() and audio.is_relative_to(base):
                audio = audio.relative_to(base)
            record = dataclasses.replace(utterance, audio_filepath=str(audio))
            handle.write(record.to_json() + "\n")
            count += 1
    return count


@dataclass(frozen=True)
class ManifestStats:
    """Summary of a manifest for ``deepspeech data stats``."""

    utterances: int
    hours: float
    min_duration: float
    max_duration: float
    mean_duration: float
    speakers: int
    characters: Counter
    duration_histogram: list[tuple[float, float, int]]

    def format(self, bins_width: int = 40) -> str:
        lines = [
            f"utterances: {self.utterances}",
            f"hours:      {self.hours:.3f}",
            f"duration:   min {self.min_duration:.2f} s, mean {self.mean_duration:.2f} s, "
            f"max {self.max_duration:.2f} s",
            f"speakers:   {self.speakers}",
            f"characters: {len(self.characters)} distinct: "
            + "".join(sorted(self.characters)).replace(" ", "␣"),
            "duration histogram (s):",
        ]
        peak = max((count for _, _, count in self.duration_histogram), default=1) or 1
        for low, high, count in self.duration_histogram:
            bar = "#" * round(bins_width * count / peak)
            lines.append(f"  {low:6.2f}-{high:6.2f} {count:7d} {bar}")
        return "\n".join(lines)


def manifest_stats(utterances: Iterable[Utterance], bins: int = 10) -> ManifestStats:
    """Hours, utterances, duration histogram and character set."""
    durations: list[float] = []
    speakers: set[str] = set()
    characters: Counter = Counter()
    for utterance in utterances:
        durations.append(utterance.duration)
        if utterance.speaker is not None:
            speakers.add(utterance.speaker)
        characters.update(utterance.text)
    if not durations:
        raise ManifestError("no utterances to summarize")
    low, high = min(durations), max(durations)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for duration in durations:
        counts[min(int((duration - low) / width), bins - 1)] += 1
    histogram = [(low + i * width, low + (i + 1) * width, counts[i]) for i in range(bins)]
    return ManifestStats(
        utterances=len(durations),
        hours=sum(durations) / 3600.0,
        min_duration=low,
        max_duration=high,
        mean_duration=sum(durations) / len(durations),
        speakers=len(speakers),
        characters=characters,
        duration_histogram=histogram,
    )

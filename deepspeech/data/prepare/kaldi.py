"""Kaldi data directories: ``wav.scp``, ``text``, ``utt2spk`` and ``segments``.

The plain-text format in which Kaldi, ESPnet and lhotse exchange corpora: one item
a line, an id, white space, then its value. ``wav.scp`` maps recording ids to audio
files (relative paths are resolved against the working folder, as Kaldi does, or
against ``root``); ``text`` maps utterance ids to transcripts; ``utt2spk`` to speakers.
With ``segments`` (``utt rec start end``) an utterance is a stretch of a recording:
start and end become the manifest's ``offset`` and ``duration`` (an end of -1 runs to
the end of the recording, as in Kaldi). Without it utterance and recording ids are
the same. Other files (``spk2utt``, ``feats.scp`` ...) are not read.

A directory is one split, written as ``<name of the directory>.jsonl``. A directory
someone made is fixed rather than thinned: every problem (an id in one file and not
the other, a duplicate id, a malformed line, a missing or unreadable file, a segment
past the end of its recording) is named by file and line, all in one error, and
nothing is written. Commands in ``wav.scp`` (``sox a.sph -t wav - |``) and archive
offsets (``feats.ark:1234``) are refused by line: write the audio out as files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from deepspeech.data.manifest import Utterance
from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    durations,
    link_source,
    raise_problems,
    write_splits,
)
from deepspeech.errors import AudioError, DeepSpeechError
from deepspeech.files import read_utf8

# Kaldi's extract-segments trims a segment that overshoots its recording by less than
# this (its --max-overshoot default) and rejects the rest: a directory it accepts, we do.
MAX_OVERSHOOT = 0.5
_ARCHIVE_OFFSET = re.compile(r".+:\d+(\[[^\]]*\])?")  # foo.ark:1234, foo.ark:1234[0:99]


@dataclass(frozen=True)
class Entry:
    """One line of a Kaldi table file; ``value`` is None when the line was unusable."""

    line: int
    value: str | None


def read_table(path: Path, what: str, problems: list[str]) -> dict[str, Entry]:
    """``{id: Entry}`` of a table file; duplicates and lines without a value to ``problems``.

    ``what`` names the value in messages ("transcript"). A bad line still holds its id,
    so that its partners in other files are not reported once more as orphans.
    """
    table: dict[str, Entry] = {}
    # split("\n"), not splitlines(): line numbers as an editor counts them, even with
    # U+2028 or a form feed inside a transcript.
    for number, line in enumerate(read_utf8(path, DeepSpeechError).split("\n"), 1):
        fields = line.split(maxsplit=1)
        if not fields:
            continue
        key, value = fields[0], " ".join(fields[1].split()) if len(fields) > 1 else ""
        if key in table:
            problems.append(f"{path} line {number}: {key} again (first at line "
                            f"{table[key].line})")
            continue
        if not value:
            problems.append(f"{path} line {number}: {key} has no {what}")
        table[key] = Entry(number, value or None)
    return table


def read_kaldi_dir(data_dir: str | os.PathLike, output: str | os.PathLike,
                   root: str | os.PathLike | None = None, workers: int = 8) -> list[Utterance]:
    """The utterances of one data directory, durations from the audio headers.

    Audio paths in the result are absolute, or under ``output``'s ``source`` link to
    ``root`` (made only when ``wav.scp`` holds relative paths), so that the manifest
    written into ``output`` refers to them relatively. Raises one ``DeepSpeechError``
    listing every problem.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DeepSpeechError(f"{data_dir}: Kaldi data directory not found")
    for name in ("wav.scp", "text"):
        if not (data_dir / name).is_file():
            raise DeepSpeechError(f"{data_dir}: not a Kaldi data directory ({name} missing)")
    base = Path(root) if root is not None else Path.cwd()
    problems: list[str] = []
    wav_scp, text_file = data_dir / "wav.scp", data_dir / "text"
    recordings = read_table(wav_scp, "audio path", problems)
    texts = read_table(text_file, "transcript", problems)
    speakers = (read_table(data_dir / "utt2spk", "speaker", problems)
                if (data_dir / "utt2spk").is_file() else None)
    seconds = _recording_seconds(wav_scp, recordings, base, problems, workers)
    segments_file = data_dir / "segments"
    if segments_file.is_file():
        segments = read_table(segments_file, "recording, start and end", problems)
        spans = _spans(segments_file, segments, recordings, seconds, problems)
        _match(text_file, texts, segments_file, segments, "segment", problems)
    else:
        spans = {key: (key, None, seconds.get(key)) for key in recordings}
        _match(text_file, texts, wav_scp, recordings, "audio", problems)
    if speakers is not None:
        _match(text_file, texts, data_dir / "utt2spk", speakers, "speaker", problems)
        problems += [f"{data_dir / 'utt2spk'} line {entry.line}: {key}: {entry.value!r} is not "
                     "one speaker id" for key, entry in speakers.items()
                     if entry.value is not None and len(entry.value.split()) > 1]
    raise_problems(str(data_dir), problems)

    source = None  # the link to root, made when a path first needs it
    utterances = []
    for key, entry in texts.items():
        recording, offset, duration = spans[key]
        audio = recordings[recording].value
        if not os.path.isabs(audio):
            relative = Path(os.path.normpath(audio))
            if relative.parts[0] == "..":  # out of root, so not through the link: absolute
                audio = str((base / relative).resolve())
            else:
                source = source or link_source(base, output)
                audio = str(source / relative)
        speaker = speakers[key].value if speakers is not None else None
        utterances.append(Utterance(audio, entry.value, duration, offset=offset,
                                    speaker=speaker))
    return utterances


def _recording_seconds(wav_scp: Path, recordings: dict[str, Entry], base: Path,
                       problems: list[str], workers: int) -> dict[str, float]:
    """Seconds per usable recording, from its header; commands, offsets, bad files named."""
    files = {}
    for key, entry in recordings.items():
        if entry.value is None:
            continue
        where = f"{wav_scp} line {entry.line}: {key}"
        if entry.value.endswith("|"):
            problems.append(f"{where}: a command ({entry.value!r}), not an audio file; run it "
                            "to write each recording to a file and list those paths instead")
        elif _ARCHIVE_OFFSET.fullmatch(entry.value):
            problems.append(f"{where}: an archive offset ({entry.value!r}), not an audio file; "
                            "write the recordings out as files (Kaldi's wav-copy) and list "
                            "those paths instead")
        elif not (base / entry.value).is_file():  # soundfile would say "System error"
            relative = ("" if os.path.isabs(entry.value) else
                        f" (relative to {base.resolve()}; --root sets that folder)")
            problems.append(f"{where}: {base / entry.value}: audio file missing{relative}")
        else:
            files[key] = base / entry.value
    found = {}
    for key, result in zip(files, durations(list(files.values()), workers), strict=True):
        if isinstance(result, AudioError):
            problems.append(f"{wav_scp} line {recordings[key].line}: {key}: {result}")
        else:
            found[key] = result
    return found


def _spans(path: Path, segments: dict[str, Entry], recordings: dict[str, Entry],
           seconds: dict[str, float], problems: list[str]
           ) -> dict[str, tuple[str, float, float]]:
    """``{utterance: (recording, offset, duration)}`` of the usable lines of ``segments``;
    the rest named in ``problems``."""
    spans = {}
    for key, entry in segments.items():
        if entry.value is None:
            continue
        where = f"{path} line {entry.line}: {key}"
        try:
            recording, first, last = entry.value.split()  # too many or too few: ValueError
            start, end = float(first), float(last)
        except ValueError:
            problems.append(f"{where}: expected '<segment> <recording> <start> <end>' "
                            "(seconds), got " + repr(f"{key} {entry.value}"))
            continue
        if recording not in recordings:
            problems.append(f"{where}: recording {recording} is not in {path.parent / 'wav.scp'}")
            continue
        if start < 0 or not (start < end or end == -1):
            problems.append(f"{where}: start {start:g} s and end {end:g} s do not make a "
                            "segment (0 <= start < end, or end -1 for the rest)")
            continue
        total = seconds.get(recording)
        if total is None:  # the recording's own problem is reported already
            continue
        end = total if end == -1 or total < end <= total + MAX_OVERSHOOT else end
        if end > total or start >= total:
            problems.append(f"{where}: {start:g}-{end:g} s runs past the end of recording "
                            f"{recording} ({total:.3f} s, wav.scp line "
                            f"{recordings[recording].line})")
            continue
        spans[key] = (recording, start, end - start)
    return spans


def _match(text_file: Path, texts: dict[str, Entry], other_file: Path,
           other: dict[str, Entry], what: str, problems: list[str]) -> None:
    """Every utterance in ``text`` has its ``what`` in ``other_file``, and nothing more."""
    for key, entry in texts.items():
        if key not in other:
            problems.append(f"{text_file} line {entry.line}: {key} has no {what} "
                            f"(not in {other_file.name})")
    for key, entry in other.items():
        if key not in texts:
            problems.append(f"{other_file} line {entry.line}: {key} has no transcript (not in "
                            f"{text_file.name})")


def prepare_kaldi(root: str | os.PathLike | None, output: str | os.PathLike,
                  dir: str | None = None, split: str | None = None,
                  workers: int = 8) -> PreparedCorpus:
    """``<split>.jsonl`` from one data directory; ``root`` resolves relative audio paths."""
    if dir is None:
        raise DeepSpeechError("kaldi: give the data directory with --dir DATA_DIR")
    name = split or Path(dir).resolve().name
    if not name or "/" in name or name.startswith("."):
        raise DeepSpeechError(f"kaldi: {name!r} cannot name a manifest; give --split NAME")
    utterances = read_kaldi_dir(dir, output, root, workers)
    return write_splits("kaldi", output, {name: utterances})


PREPARER = Preparer(
    "kaldi", prepare_kaldi, None,  # nothing to download: the directory is yours
    help="a Kaldi data directory (wav.scp, text, utt2spk, segments), as Kaldi, ESPnet and "
         "lhotse write them",
    root_help="folder that relative paths in wav.scp are resolved against (default: the "
              "working folder, as in Kaldi)",
    options=(
        Option("--dir", str, None, "the data directory (wav.scp, text ...)"),
        Option("--split", str, None, "manifest name (default: the directory's name)"),
    ),
    root_optional=True)

"""Your own recordings: ``a.wav`` + ``a.txt`` pairs in a folder tree.

Any audio format soundfile reads (WAV, FLAC, OGG, MP3, SPHERE, AIFF ...) next to
a UTF-8 ``.txt`` of the same name holding its transcript. Files in a
sub-folder get that sub-folder's name as their speaker (``root/alice/a.wav`` ->
``alice``). Without split fractions everything goes to ``all.jsonl``; with them,
``train``/``dev``/``test`` are cut by speaker when there are speakers, else by file,
deterministically.
"""

from __future__ import annotations

import os
from pathlib import Path

from deepspeech.arguments import non_negative_float
from deepspeech.data.audio import AUDIO_SUFFIXES
from deepspeech.data.prepare.common import (
    Option,
    PreparedCorpus,
    Preparer,
    link_source,
    report_problems,
    split_speakers,
    with_durations,
    write_splits,
)
from deepspeech.errors import DeepSpeechError
from deepspeech.files import files_under, read_utf8


def prepare_folder(root: str | os.PathLike, output: str | os.PathLike, dev: float = 0.0,
                   test: float = 0.0, seed: int = 0, workers: int = 8) -> PreparedCorpus:
    """Manifests from audio + transcript pairs; ``dev``/``test`` are fractions (or counts)."""
    root = Path(root)
    if not root.is_dir():
        raise DeepSpeechError(f"{root}: folder not found")
    source = link_source(root, output)
    problems, entries = [], []
    for stem, found in _files_by_stem(root).items():
        audio, texts = found["audio"], found["text"]
        if not texts:
            problems += [f"{path}: no transcript ({path.stem}.txt)" for path in audio]
            continue
        if not audio:
            problems.append(f"{texts[0]}: no audio file of the same name")
            continue
        if len(audio) + len(texts) > 2:
            names = ", ".join(path.name for path in (*audio, *texts))
            problems.append(f"{stem}: one utterance, several files ({names}); keep one of each")
            continue
        relative = audio[0].relative_to(root)
        speaker = relative.parts[0] if len(relative.parts) > 1 else None
        try:
            text = " ".join(read_utf8(texts[0], DeepSpeechError).split())
        except DeepSpeechError as exc:
            problems.append(str(exc))
            continue
        if not text:
            problems.append(f"{texts[0]}: empty transcript")
            continue
        entries.append((str(source / relative), text, speaker))
    utterances = with_durations(entries, problems, workers)
    if not dev and not test:
        splits = {"all": utterances, "train": [], "dev": [], "test": []}
    else:
        # By speaker when every file has one and there are enough; else by file.
        by_speaker = all(u.speaker for u in utterances) and \
            len({u.speaker for u in utterances}) >= 3
        key = (lambda u: u.speaker) if by_speaker else (lambda u: u.audio_filepath)
        groups = split_speakers({key(u) for u in utterances}, dev=dev, test=test, seed=seed)
        where = {member: name for name, members in groups.items() for member in members}
        splits = {name: [u for u in utterances if where[key(u)] == name] for name in groups}
        splits["all"] = []
    report_problems("folder", problems)
    return write_splits("folder", output, splits, left_out=len(problems))


def _files_by_stem(root: Path) -> dict[Path, dict[str, list[Path]]]:
    """Audio and transcripts under ``root`` grouped by path without suffix. Suffixes in any
    case: recorders write ``ZOOM0001.WAV``."""
    found: dict[Path, dict[str, list[Path]]] = {}
    for path in sorted(files_under(root)):
        suffix = path.suffix.lower()
        kind = "text" if suffix == ".txt" else "audio" if suffix in AUDIO_SUFFIXES else None
        if kind is not None:
            found.setdefault(path.with_suffix(""), {"audio": [], "text": []})[kind].append(path)
    return found


PREPARER = Preparer(
    "folder", prepare_folder, None,  # nothing to download: the folder is yours
    help="your own audio + .txt transcript pairs (any format soundfile reads)",
    root_help="the folder to scan (recursively; sub-folder = speaker)",
    options=(
        Option("--dev", non_negative_float, 0.0,
               "dev share: fraction (or count) of speakers, else of files"),
        Option("--test", non_negative_float, 0.0, "test share, likewise"),
        Option("--seed", int, 0, "fixes the split"),
    ))

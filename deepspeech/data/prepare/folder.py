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

from deepspeech.data.prepare.common import (
    PreparedCorpus,
    link_source,
    report_problems,
    split_speakers,
    with_durations,
    write_splits,
)
from deepspeech.errors import DeepSpeechError
from deepspeech.files import read_utf8

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".sph", ".nist", ".aiff",
                  ".aif", ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64")


def download_folder(target_dir: str | os.PathLike) -> Path:
    """Nothing to download: the folder is yours."""
    return Path(target_dir)


def prepare_folder(root: str | os.PathLike, output: str | os.PathLike, dev: float = 0.0,
                   test: float = 0.0, seed: int = 0, workers: int = 8) -> PreparedCorpus:
    """Manifests from audio + transcript pairs; ``dev``/``test`` are fractions (or counts)."""
    root = Path(root)
    if not root.is_dir():
        raise DeepSpeechError(f"{root}: folder not found")
    source = link_source(root, output)
    problems, entries, paired = [], [], set()
    for transcript in sorted(root.rglob("*.txt")):
        audio = next((transcript.with_suffix(s) for s in AUDIO_SUFFIXES
                      if transcript.with_suffix(s).is_file()), None)
        if audio is None:
            problems.append(f"{transcript}: no audio file of the same name")
            continue
        relative = audio.relative_to(root)
        paired.add(relative)
        speaker = relative.parts[0] if len(relative.parts) > 1 else None
        try:
            text = " ".join(read_utf8(transcript, DeepSpeechError).split())
        except DeepSpeechError as exc:
            problems.append(str(exc))
            continue
        if not text:
            problems.append(f"{transcript}: empty transcript")
            continue
        entries.append((str(source / relative), text, speaker))
    for audio in sorted(root.rglob("*")):
        if audio.suffix.lower() in AUDIO_SUFFIXES and audio.relative_to(root) not in paired:
            problems.append(f"{audio}: no transcript ({audio.with_suffix('.txt').name})")
    utterances = with_durations(entries, problems, workers)
    if not dev and not test:
        splits = {"all": utterances}
    else:
        # By speaker when every file has one and there are enough; else by file.
        by_speaker = all(u.speaker for u in utterances) and \
            len({u.speaker for u in utterances}) >= 3
        key = (lambda u: u.speaker) if by_speaker else (lambda u: u.audio_filepath)
        groups = split_speakers({key(u) for u in utterances}, dev=dev, test=test, seed=seed)
        where = {member: name for name, members in groups.items() for member in members}
        splits = {name: [u for u in utterances if where[key(u)] == name] for name in groups}
    report_problems("folder", problems)
    return write_splits("folder", output, splits, left_out=len(problems))

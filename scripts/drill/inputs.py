"""The fault drill's broken inputs: audio files and manifest lines, each a named kind.

Each kind of broken audio writes a file into a folder and returns its path; the error
must name the file. The "clean" kinds (another rate, stereo) must train, score or
transcribe without error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf

from deepspeech.data.synth.tones import RATE, manifest_line, spoken, truncate

BAD_LINE = 5  # the broken utterance's line in each manifest the drill writes


def yes_no(rate: int = RATE) -> np.ndarray:
    """The tones of "yes no", with the same noise every time."""
    return spoken(["yes", "no"], np.random.default_rng(0), rate)


def write_audio(path: Path, rate: int = RATE, channels: int = 1,
                subtype: str = "PCM_16") -> float:
    """A two-word tone at ``rate``; returns its duration."""
    audio = yes_no(rate)
    sf.write(path, np.stack([audio] * channels, axis=1) if channels > 1 else audio, rate,
             subtype=subtype)
    return len(audio) / rate


def missing(folder: Path) -> Path:
    return folder / "missing.wav"


def empty(folder: Path) -> Path:
    (folder / "empty.wav").write_bytes(b"")
    return folder / "empty.wav"


def text_as_wav(folder: Path) -> Path:
    (folder / "notes.wav").write_text("this is not audio\n")
    return folder / "notes.wav"


def cut_wav(folder: Path) -> Path:
    write_audio(folder / "cut.wav")
    truncate(folder / "cut.wav")
    return folder / "cut.wav"


def cut_flac(folder: Path) -> Path:
    write_audio(folder / "cut.flac")
    truncate(folder / "cut.flac")
    return folder / "cut.flac"


def nan_samples(folder: Path) -> Path:
    audio = yes_no()
    audio[100:200] = np.nan
    sf.write(folder / "nan.wav", audio, RATE, subtype="FLOAT")
    return folder / "nan.wav"


def rate_8k(folder: Path) -> Path:
    write_audio(folder / "phone.wav", rate=8000)
    return folder / "phone.wav"


def stereo(folder: Path) -> Path:
    write_audio(folder / "stereo.wav", channels=2)
    return folder / "stereo.wav"


def a_folder(folder: Path) -> Path:
    (folder / "clips.wav").mkdir()
    return folder / "clips.wav"


AUDIO_KINDS: dict[str, tuple[Callable[[Path], Path], bool]] = {
    "missing file": (missing, False), "empty file": (empty, False),
    "text file as .wav": (text_as_wav, False), "WAV cut off": (cut_wav, False),
    "FLAC cut off": (cut_flac, False), "NaN samples": (nan_samples, False),
    "8 kHz audio": (rate_8k, True), "stereo": (stereo, True),
    "folder as audio": (a_folder, False),
}


# Broken manifest lines: the line itself (the good audio beside it to point at).
LINE_KINDS: dict[str, Callable[[Path], str]] = {
    "out-of-vocabulary chars": lambda good: manifest_line(good, "héllo wörld ☃"),
    "invalid JSON line": lambda good: '{"audio_filepath": "a.wav", "text": ',
    "missing \"text\"": lambda good: json.dumps({"audio_filepath": str(good),
                                                 "duration": 0.6}),
    "negative duration": lambda good: manifest_line(good, duration=-1.0),
    "offset past the end": lambda good: manifest_line(good, duration=0.6, offset=100.0),
}


def broken_manifest(folder: Path, source: Path, kind: str) -> tuple[Path, str]:
    """A copy of ``source`` with line BAD_LINE broken as ``kind``; (manifest, must-name)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = source.read_text().splitlines()
    manifest = folder / "bad.jsonl"
    line_named = rf"bad\.jsonl(:| line ){BAD_LINE}\b"
    if kind == "empty manifest":
        manifest.write_bytes(b"")
        return manifest, r"bad\.jsonl"
    if kind == "non-UTF-8 manifest":
        lines[BAD_LINE - 1] = lines[BAD_LINE - 1].replace('"text": "', '"text": "caf\udce9 ')
        manifest.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
        return manifest, line_named
    if kind in LINE_KINDS:
        good = folder / "good.flac"  # its own file, so that naming it names the line
        write_audio(good)
        lines[BAD_LINE - 1] = LINE_KINDS[kind](good)
        named = rf"{line_named}|good\.flac"
    else:
        make, _ = AUDIO_KINDS[kind]
        path = make(folder)
        duration = sf.info(path).duration if path.is_file() and kind in (
            "8 kHz audio", "stereo", "NaN samples", "WAV cut off") else 0.6
        lines[BAD_LINE - 1] = manifest_line(path, duration=duration)
        named = re.escape(path.name)
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, named


def is_clean(kind: str) -> bool:
    return kind in AUDIO_KINDS and AUDIO_KINDS[kind][1]

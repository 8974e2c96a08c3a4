"""A deterministic tone corpus: audio that tests and drills make in milliseconds.

Not speech: each word of a small vocabulary is a sine at its own frequency, so a
model of a few thousand weights learns it within a few steps, with no download and no
synthesizer. The same seed gives the same bytes on every machine, which the tests'
bitwise weight comparisons build on: a change to any number here changes every weight
trained on this corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = ("yes", "no", "up", "down", "left", "right", "go", "stop")
RATE = 16000
WORD_SECONDS = 0.25
GAP_SECONDS = 0.05
NOISE = 0.01  # amplitude of the white noise over a tone (its standard deviation)


def _sine(seconds: float, frequency: float, rate: int, amplitude: float) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return amplitude * np.sin(2 * np.pi * frequency * t)


def tone(seconds: float, frequency: float = 220.0, rate: int = RATE, amplitude: float = 0.3,
         seed: int | None = None) -> np.ndarray:
    """A float32 sine; with ``seed``, white noise over it, as a recording has."""
    audio = _sine(seconds, frequency, rate, amplitude)
    if seed is not None:
        audio = audio + NOISE * np.random.default_rng(seed).standard_normal(len(audio))
    return audio.astype(np.float32)


def spoken(words: list[str], rng: np.random.Generator, rate: int = RATE) -> np.ndarray:
    """'Speech' of ``words``: one distinct tone per word, short gaps between, noise from
    ``rng`` over all of it."""
    pieces = []
    for word in words:
        pieces.append(_sine(WORD_SECONDS, 300 + 120 * WORDS.index(word), rate, 0.4))
        pieces.append(np.zeros(int(rate * GAP_SECONDS)))
    audio = np.concatenate(pieces) + NOISE * rng.standard_normal(sum(map(len, pieces)))
    return audio.astype(np.float32)


def manifest_line(audio: str | Path, text: str = "yes no", duration: float = 0.6,
                  **extra: object) -> str:
    """One manifest line as given, unchecked: tests write broken ones on purpose."""
    return json.dumps({"audio_filepath": str(audio), "text": text, "duration": duration,
                       **extra})


def truncate(path: Path, keep: float = 0.5) -> None:
    """Keep the first ``keep`` of a file's bytes, as a copy interrupted midway leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def write_tone_corpus(folder: Path, count: int, seed: int = 0, rate: int = RATE,
                      name: str = "train", absolute: bool = False) -> Path:
    """``count`` FLAC utterances of 2-3 words, three speakers, and their manifest
    ``folder/NAME.jsonl`` (audio paths relative to it unless ``absolute``); its path."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(count):
        words = list(rng.choice(WORDS, size=int(rng.integers(2, 4))))
        audio = spoken(words, rng, rate)
        path = folder / f"{name}{index:03d}.flac"
        sf.write(path, audio, rate)
        lines.append(manifest_line(path if absolute else path.name, " ".join(words),
                                   len(audio) / rate, speaker=f"s{index % 3}"))
    manifest = folder / f"{name}.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest

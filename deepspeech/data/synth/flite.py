"""flite (CMU's small C synthesizer, Debian package ``flite``), run as a program.

Debian's flite 2.2 has its voices built in: ``kal`` (an 8 kHz diphone voice),
``kal16`` (the same speaker at 16 kHz), and the clustergen (statistical) voices
``awb``, ``rms`` and ``slt``; ``awb_time`` speaks only clock times and is left
out. One process per utterance costs a few milliseconds and keeps utterances
independent; the output is deterministic. Prosody: ``duration_stretch``.
"""

from __future__ import annotations

import shutil
import subprocess

from deepspeech.data.synth.engine import Engine, Params, Voice, speak_to_wav

VOICES = (
    Voice("awb", "awb"), Voice("kal", "kal"), Voice("kal16", "kal"), Voice("rms", "rms"),
    Voice("slt", "slt"),
)


class Flite(Engine):
    """flite's built-in English voices."""

    name = "flite"
    install = "apt-get install flite"

    def missing(self) -> str | None:
        program = shutil.which("flite")
        if program is None:
            return "no flite program on PATH"
        listed = subprocess.run([program, "-lv"], capture_output=True, text=True).stdout.split()
        absent = [voice.name for voice in VOICES if voice.name not in listed]
        return f"flite lacks the voices {', '.join(absent)}" if absent else None

    def voices(self) -> tuple[Voice, ...]:
        return VOICES

    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        return speak_to_wav(["flite", "-voice", voice, "--setf",
                             f"duration_stretch={params['stretch']}", "-t", text, "-o", "{wav}"])

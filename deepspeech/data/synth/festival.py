"""festival (Edinburgh's synthesizer, Debian packages), run as ``text2wave``.

Three voices come from Debian: ``kal`` and ``ked`` (16 kHz diphone voices,
``festvox-kallpc16k``, ``festvox-kdlpc16k``) and ``slt`` (an HTS statistical
voice, ``festvox-us-slt-hts``, the same speaker as flite's ``slt``). A fresh
``text2wave`` per utterance (about 0.4 s, mostly start-up); the output is
deterministic. Prosody: the duration stretch, which the HTS voice ignores in
``Duration_Stretch`` and takes as its engine's speed (``-r``, the inverse).
"""

from __future__ import annotations

import shutil
import subprocess

from deepspeech.data.synth.engine import Engine, Params, Voice, speak_to_wav

VOICES = (Voice("kal", "kal"), Voice("ked", "ked"), Voice("slt", "slt"))
_FESTIVAL_NAMES = {"kal": "kal_diphone", "ked": "ked_diphone", "slt": "cmu_us_slt_arctic_hts"}


def _prosody(voice: str, stretch: float) -> str:
    if voice == "slt":
        speed = round(1 / stretch, 4)
        return f'(set! hts_engine_params (append hts_engine_params (list (list "-r" {speed}))))'
    return f"(Parameter.set 'Duration_Stretch {stretch})"


class Festival(Engine):
    """festival's Debian English voices."""

    name = "festival"
    install = "apt-get install festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts"

    def missing(self) -> str | None:
        if shutil.which("text2wave") is None or shutil.which("festival") is None:
            return "no text2wave program on PATH"
        listed = subprocess.run(["festival", "--batch", "(print (voice.list))"],
                                capture_output=True, text=True).stdout.strip("()\n ").split()
        absent = [name for name in _FESTIVAL_NAMES.values() if name not in listed]
        return f"festival lacks the voices {', '.join(absent)}" if absent else None

    def voices(self) -> tuple[Voice, ...]:
        return VOICES

    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        return speak_to_wav(
            ["text2wave", "-eval", f"(voice_{_FESTIVAL_NAMES[voice]})",
             "-eval", _prosody(voice, float(params["stretch"])), "-o", "{wav}"],
            text_input=text + "\n",
        )

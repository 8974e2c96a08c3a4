"""A small ctypes binding to libespeak-ng, as shipped by the ``espeakng-loader`` wheel.

espeak-ng is a formant synthesizer: robotic, but fast (over a thousand times real
time on one core), deterministic once its noise generator is seeded, and
installable from PyPI, which makes it the source of our offline corpus. The
library keeps global state, so there is one engine per process
(:func:`get_engine`); it is not thread-safe.

We run it synchronously (``AUDIO_OUTPUT_SYNCHRONOUS``): ``espeak_Synth`` returns
when the whole text is spoken, and the synth callback receives the int16 samples
in blocks. ctypes would free the callback trampoline with its Python object, so
the engine keeps a reference to it for as long as the library may call it.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from deepspeech.errors import DeepSpeechError

if TYPE_CHECKING:
    import numpy as np

SAMPLE_RATE = 22_050

# speak_lib.h constants
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_INITIALIZE_DONT_EXIT = 0x8000
_RATE, _VOLUME, _PITCH, _RANGE, _WORDGAP = 1, 2, 3, 4, 7
_EE_OK = 0


class SynthesisError(DeepSpeechError):
    """espeak-ng is missing, failed to start or could not speak a text."""


class _Event(ctypes.Structure):
    # espeak_EVENT; the callback only needs to accept the pointer
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


def _loader_paths() -> tuple[str, str]:
    try:
        import espeakng_loader
    except ImportError:
        raise SynthesisError(
            "espeakng-loader is not installed: pip install 'espeakng-loader>=0.2.4,<0.3'"
        ) from None
    return espeakng_loader.get_library_path(), espeakng_loader.get_data_path()


def data_path() -> Path:
    """The ``espeak-ng-data`` folder of the installed wheel (voices, dictionaries)."""
    return Path(_loader_paths()[1])


class Engine:
    """The process's espeak-ng instance: pick a voice, set prosody, speak to int16 samples."""

    def __init__(self) -> None:
        library, data = _loader_paths()
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise SynthesisError(f"cannot load espeak-ng from {library}: {exc}") from None
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
            ctypes.c_uint, ctypes.POINTER(ctypes.c_uint), ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synchronize.restype = ctypes.c_int
        lib.espeak_TextToPhonemes.argtypes = [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int
        ]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_ng_SetRandSeed.restype = ctypes.c_int

        rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data.encode(), _INITIALIZE_DONT_EXIT
        )
        if rate != SAMPLE_RATE:
            raise SynthesisError(
                f"espeak-ng failed to initialize with data {data} (returned {rate})"
            )
        self._blocks: list[bytes] = []
        # Kept on self: the library holds only the raw function pointer.
        self._callback = _CALLBACK(self._collect)
        lib.espeak_SetSynthCallback(self._callback)
        self._lock = threading.Lock()

    def _collect(self, wav, count, events) -> int:
        if count > 0 and wav:
            self._blocks.append(ctypes.string_at(wav, count * 2))
        return 0  # 0: go on synthesizing

    def phonemes(self, text: str, voice: str) -> str:
        """espeak's phoneme mnemonics for ``text``, clause by clause (to check pronunciations)."""
        with self._lock:
            if self._lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
                raise SynthesisError(f"espeak-ng has no voice {voice!r}")
            buffer = ctypes.create_string_buffer(text.encode("utf-8"))
            pointer = ctypes.c_void_p(ctypes.addressof(buffer))
            clauses = []
            while pointer.value:  # the library advances the pointer; NULL at the end
                clause = self._lib.espeak_TextToPhonemes(ctypes.byref(pointer), _CHARS_UTF8, 0)
                clauses.append((clause or b"").decode("utf-8", "replace").strip())
        return " ".join(clause for clause in clauses if clause)

    def synthesize(self, text: str, voice: str, **prosody: int) -> np.ndarray:
        """Speak ``text`` with ``voice`` (e.g. ``en-us+m3``); int16 samples at 22,050 Hz.

        Keyword arguments as for :meth:`synthesize_bytes`.
        """
        import numpy as np

        return np.frombuffer(self.synthesize_bytes(text, voice, **prosody), dtype=np.int16)

    def synthesize_bytes(
        self,
        text: str,
        voice: str,
        rate: int = 175,
        pitch: int = 50,
        pitch_range: int = 50,
        word_gap: int = 0,
        seed: int = 0,
    ) -> bytes:
        """Speak ``text`` with ``voice``; native-endian int16 samples at 22,050 Hz, as bytes.

        ``rate`` is in words per minute (80-450), ``pitch`` and ``pitch_range`` are
        0-100 (50 is the voice's own), ``word_gap`` adds pauses of 10 ms units
        between words. ``seed`` seeds the synthesizer's noise generator (used by
        the Klatt voices and for breath), which otherwise carries over from one
        utterance to the next.
        """
        lib = self._lib
        with self._lock:
            if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
                raise SynthesisError(f"espeak-ng has no voice {voice!r}")
            for parameter, value in (
                (_RATE, rate), (_VOLUME, 100), (_PITCH, pitch), (_RANGE, pitch_range),
                (_WORDGAP, word_gap),
            ):
                lib.espeak_SetParameter(parameter, int(value), 0)
            lib.espeak_ng_SetRandSeed(int(seed) & 0x7FFFFFFF)
            data = text.encode("utf-8") + b"\0"
            self._blocks = []
            status = lib.espeak_Synth(
                data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE, None, None
            )
            lib.espeak_Synchronize()
            blocks, self._blocks = self._blocks, []
        if status != _EE_OK:
            raise SynthesisError(f"espeak-ng could not speak {text!r} with {voice!r}")
        return b"".join(blocks)


_ENGINE: Engine | None = None


def get_engine() -> Engine:
    """The process-wide engine, started on first use."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = Engine()
    return _ENGINE

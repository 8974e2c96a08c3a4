"""The offline default corpus: English (or Mandarin) sentences spoken by espeak-ng.

``synthesize_corpus`` (in ``synthesize.py``) is the entry point behind
``deepspeech data synth``. The package is split by concern: ``engines`` (the
interface every speech engine implements, and espeak-ng's), ``espeak`` (ctypes
binding), ``flite``/``festival``/``piper`` (the other engines), ``worker`` and
``batches`` (batches spoken in fresh processes), ``voices`` (voices and their
split), ``sentences``/``lexicon``/``numbers`` (English text), ``mandarin``
(Chinese text), ``noise`` (background noise). Beside it, ``tones``: the
deterministic tone corpus that tests and the fault drill train on in seconds.
Importing this package is cheap: worker processes import neither torch nor,
for espeak-ng, numpy.
"""

from __future__ import annotations

from typing import Any

__all__ = ["synthesize_corpus"]


def __getattr__(name: str) -> Any:
    # Lazy, so that spawned synthesis workers do not import torch through synthesize.py.
    if name == "synthesize_corpus":
        from deepspeech.data.synth.synthesize import synthesize_corpus

        return synthesize_corpus
    raise AttributeError(name)

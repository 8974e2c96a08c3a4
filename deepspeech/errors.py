"""Exceptions that the command line turns into one readable line instead of a traceback.

Every error a user can fix by changing a file or a flag is a ``DeepSpeechError``;
the message names the file, line or key at fault and what to do about it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class DeepSpeechError(Exception):
    """An error caused by user input (config, manifest, audio, checkpoint)."""


class ConfigError(DeepSpeechError):
    """The YAML config or a command-line override is invalid."""


class ManifestError(DeepSpeechError):
    """A manifest line is malformed or points at unusable audio."""


class AudioError(DeepSpeechError):
    """An audio file is missing, unreadable, empty or otherwise unusable."""


class VocabularyError(DeepSpeechError):
    """A transcript holds characters the vocabulary cannot encode."""


class CheckpointError(DeepSpeechError):
    """A checkpoint file is missing, truncated or from an incompatible run."""


class ReportError(DeepSpeechError):
    """A per-utterance evaluation report is unreadable or scores other utterances."""


@contextlib.contextmanager
def naming_audio_file(path: str | os.PathLike) -> Iterator[None]:
    """Put ``path`` in front of an ``AudioError`` raised inside: the feature code that
    raises it sees samples, not the file they came from."""
    try:
        yield
    except AudioError as exc:
        raise AudioError(f"{path}: {exc}") from None

"""Exceptions that the command line turns into one readable line instead of a traceback.

Every error a user can fix by changing a file or a flag is a ``DeepSpeechError``;
the message names the file, line or key at fault and what to do about it.
"""

from __future__ import annotations

import contextlib
import os
import traceback
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


class DataWorkerError(DeepSpeechError):
    """A data-loader worker process ended without a Python error: killed by a signal."""


@contextlib.contextmanager
def naming_audio_file(path: str | os.PathLike) -> Iterator[None]:
    """Put ``path`` in front of an ``AudioError`` raised inside: the feature code that
    raises it sees samples, not the file they came from."""
    try:
        yield
    except AudioError as exc:
        raise AudioError(f"{path}: {exc}") from None


def data_worker_died(exc: BaseException) -> bool:
    """Whether ``exc`` is how torch tells that a data-loader worker process vanished.

    Its watchdog raises a bare RuntimeError; a worker killed while it hands over a
    batch breaks the connection under the loader's receiving code instead.
    """
    if isinstance(exc, RuntimeError):
        return str(exc).startswith("DataLoader worker (pid")
    if isinstance(exc, (ConnectionError, EOFError)):
        frames = traceback.extract_tb(exc.__traceback__)
        return any(f"torch{os.sep}utils{os.sep}data" in frame.filename for frame in frames)
    return False


@contextlib.contextmanager
def naming_dead_data_workers(last_checkpoint: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn the traceback of a killed data-loader worker into advice.

    The killer is most often the kernel's out-of-memory killer, and what torch raises
    (from wherever the main process was, often inside backward) says neither that nor
    where training can continue from.
    """
    try:
        yield
    except (RuntimeError, ConnectionError, EOFError) as exc:
        if not data_worker_died(exc):
            raise
        what = (str(exc).strip().rstrip(".") if isinstance(exc, RuntimeError)
                else f"a data-loader worker vanished while handing over a batch ({exc!r})")
        resume = (f"; continue from the last checkpoint with train.resume={last_checkpoint}"
                  if last_checkpoint is not None and os.path.exists(last_checkpoint) else "")
        raise DataWorkerError(
            f"{what} (most often the out-of-memory killer: use fewer data workers, smaller "
            f"batches or shorter utterances){resume}") from None

"""Exceptions that the command line turns into one readable line instead of a traceback.

Every error a user can fix by changing a file or a flag is a ``DeepSpeechError``;
the message names the file, line or key at fault and what to do about it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
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


class ClientError(DeepSpeechError):
    """A request or live stream that ``deepspeech serve`` refuses: ``status`` is the HTTP
    status it means (a WebSocket closes with ``4000 + status``), the message says why and
    names the flag that sets the limit."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ResourceError(DeepSpeechError):
    """The machine ran out of memory or disk, or killed a data-loader worker (for want of
    memory, most often)."""


def own_message(exc: DeepSpeechError) -> str:
    """The error's message without what a data loader worker wraps around it.

    An error raised in a worker process reaches the main process as the same type with
    the worker's traceback as its message ("Caught AudioError in DataLoader worker
    process 0. Original Traceback ..."), which ends with the error's own line.
    """
    text = str(exc)
    own = f"{type(exc).__module__}.{type(exc).__name__}: "
    if text.startswith(f"Caught {type(exc).__name__} ") and own in text:
        return text[text.rindex(own) + len(own):].rstrip()
    return text


@contextlib.contextmanager
def naming_audio_file(path: str | os.PathLike) -> Iterator[None]:
    """Put ``path`` in front of an ``AudioError`` raised inside: the feature code that
    raises it sees samples, not the file they came from."""
    try:
        yield
    except AudioError as exc:
        raise AudioError(f"{path}: {exc}") from None


def _data_worker_died(exc: BaseException) -> bool:
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


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed: Python's, torch's CPU or CUDA one."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text
                                              or "CUDA out of memory" in text)


def allocation_failure(exc: BaseException) -> str:
    """The first line of an out-of-memory error, as a person wants to read it."""
    # torch's CPU message starts with the C++ check that failed: not for people.
    told = re.sub(r"^\[enforce fail at [^\]]*\] err == 0\. ", "", str(exc).strip())
    return told.splitlines()[0] if told else type(exc).__name__


@contextlib.contextmanager
def naming_resource_failures(advice: str = "",
                             last_checkpoint: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn running out of memory, or a data-loader worker killed for it, into one line
    with ``advice`` (what to lower) and where training can continue from; a full disk
    likewise, with its own advice.

    What torch raises is a traceback from wherever the main process was, often inside
    backward, that says neither.
    """
    try:
        yield
    except (MemoryError, RuntimeError, OSError, EOFError) as exc:
        if _data_worker_died(exc):
            what = (str(exc).strip().rstrip(".") if isinstance(exc, RuntimeError)
                    else f"a data-loader worker vanished while handing over a batch ({exc!r})")
            what += " (most often the out-of-memory killer)"
        elif out_of_memory(exc):
            what = f"out of memory ({allocation_failure(exc)})"
        elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # Files are written whole or not at all (deepspeech.files.atomic_write).
            what = (f"no space left{' for ' + str(exc.filename) if exc.filename else ''} "
                    f"({exc.strerror})")
            advice = "free some or write elsewhere; what was written before is intact"
        else:
            raise
        resume = (f"; continue from the last checkpoint with train.resume={last_checkpoint}"
                  if last_checkpoint is not None and os.path.exists(last_checkpoint) else "")
        raise ResourceError(f"{what}{': ' + advice if advice else ''}{resume}") from None

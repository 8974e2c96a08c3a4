"""Atomic file writes, text reads whose decoding errors name the line, reads of regular
files only, the files under a folder, and the folder the project caches in.

What was already written is never lost to a crash or a kill.

Data goes to a temporary file in the target's folder, is flushed and fsynced,
gets ordinary permissions (``mkstemp`` creates files private to their owner),
then is renamed over the target; the folder is fsynced so that the rename itself
survives a power cut. A failure at any point leaves the previous file intact.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ordinary_permissions(path: str | os.PathLike) -> None:
    """Give ``path`` the permissions a plain ``open`` or ``mkdir`` would have: ``mkstemp``,
    ``mkdtemp`` and some writers create files private to their owner."""
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb",
                 encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file for writing; on success it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        ordinary_permissions(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            # write() and fsync() do not say which file they failed on
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def unfinished_writes(path: str | os.PathLike) -> list[Path]:
    """The temporary files that ``atomic_write`` of ``path`` left behind when its process
    was killed before the rename (a kill -9 mid-checkpoint leaves one of full size)."""
    path = Path(path)
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))


def _raise(error: OSError) -> None:
    raise error


def open_regular(path: str | os.PathLike, *, follow_links: bool = True) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; anything else raises
    ``ValueError``. Files a user or a package hands over may be hostile: opening a FIFO
    would wait for a writer (hence O_NONBLOCK) and reading a link to /dev/zero would never
    end. Without ``follow_links`` a link is refused too (the OS's ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    descriptor = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ValueError("not a regular file (a FIFO, a device or a folder)")
        return open(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_utf8(path: str | os.PathLike, error: type[Exception]) -> str:
    """The whole file as text; a byte that is not UTF-8 raises ``error`` naming its line."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path, error) from None


def not_utf8(path: str | os.PathLike, error: type[Exception]) -> Exception:
    """``error`` naming the line of the first byte of ``path`` that is not UTF-8.

    For readers that stream text: Python's own message gives only an offset into the
    decoding block, which may begin lines after the row being read."""
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return error(f"{path} line {line}: not UTF-8 text ({exc.reason})")
    return error(f"{path}: not UTF-8 text")


def files_under(folder: str | os.PathLike) -> Iterator[Path]:
    """Every file under ``folder``, through linked folders too (a corpus is often a link to
    where it lies), each real folder once: a link loop ends, and a folder reached twice is
    listed under the path the walk, in name order, meets first. A folder that cannot be
    listed raises its ``OSError`` (naming it) rather than being passed over in silence."""
    seen = set()
    for parent, folders, files in os.walk(folder, followlinks=True, onerror=_raise):
        real = os.path.realpath(parent)
        if real in seen:
            folders.clear()
            continue
        seen.add(real)
        folders.sort()
        for name in sorted(files):
            path = Path(parent, name)
            if path.is_file():
                yield path


CACHE_DIR_VARIABLE = "DEEPSPEECH_CACHE_DIR"


def cache_dir() -> Path:
    """``$DEEPSPEECH_CACHE_DIR``, else ``$XDG_CACHE_HOME/deepspeech/probes``, else
    ``~/.cache/deepspeech/probes``: where runs keep the audio probes they share (torch-free,
    so that ``deepspeech doctor`` can tell its free space whatever else is broken)."""
    if os.environ.get(CACHE_DIR_VARIABLE):
        return Path(os.environ[CACHE_DIR_VARIABLE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "deepspeech" / "probes"

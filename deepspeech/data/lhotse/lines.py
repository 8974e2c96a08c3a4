"""lhotse's manifest files: JSON Lines, gzipped when the name ends in ``.gz``.

Read one object a line, each error naming the file and line; written deterministically
(a gzip header without a time stamp), so the same manifest exports to the same bytes.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from deepspeech.errors import DeepSpeechError
from deepspeech.files import atomic_write
from deepspeech.jsonl import parse_object


def _open_text(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def read_lines(path: str | os.PathLike) -> Iterator[tuple[str, dict]]:
    """``(where, object)`` for each non-blank line; ``where`` is ``"FILE line N"``."""
    path = Path(path)
    if not path.is_file():
        raise DeepSpeechError(f"{path}: lhotse manifest not found")
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{path} line {number}"
                yield where, parse_object(line, where, DeepSpeechError)
    except UnicodeDecodeError as exc:
        raise DeepSpeechError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except (OSError, EOFError) as exc:  # a cut-off or corrupt .gz
        raise DeepSpeechError(f"{path}: cannot read: {exc}") from None


def write_lines(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Write ``records`` as gzipped JSON Lines, atomically; returns how many."""
    count = 0
    with atomic_write(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                       filename="") as handle:
        for record in records:
            handle.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            count += 1
    return count

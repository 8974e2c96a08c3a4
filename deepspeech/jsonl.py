"""JSON Lines files (manifests, lhotse's manifests, evaluation reports, training metrics)
read with every error naming its file and line."""

from __future__ import annotations

import json
import logging
import os

from deepspeech.errors import DeepSpeechError
from deepspeech.files import read_utf8

log = logging.getLogger(__name__)


def parse_object(line: str, where: str, error: type[DeepSpeechError]) -> dict:
    """One line that must hold a JSON object; ``where`` ("FILE line N") starts each error."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise error(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def read_objects(path: str | os.PathLike, error: type[DeepSpeechError], what: str,
                 drop_cut_end: bool = False) -> list[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line; ``what`` names a line in errors.

    ``drop_cut_end``: a file that a process appends to ends in a partial line when that
    process is killed mid-write; the line is dropped with a warning instead of failing.
    """
    try:
        lines = read_utf8(path, error).splitlines()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc}") from None
    objects = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if drop_cut_end and number == len(lines):
                log.warning("%s:%d: dropped a cut-off last line (its writer stopped while "
                            "writing it)", path, number)
                break
            raise error(f"{path}:{number}: not {what} ({exc.msg})") from None
        if not isinstance(value, dict):
            raise error(f"{path}:{number}: not {what} (a JSON object)")
        objects.append((number, value))
    return objects

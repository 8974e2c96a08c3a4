"""Text corpora for language models: plain text or a JSON Lines manifest, normalized.

A corpus is either a plain text file with one sentence per line (optionally
gzip-compressed, ``.gz``) or a manifest (``.jsonl``/``.json``) whose ``"text"``
field is used; other manifest fields are ignored, so the training manifest itself
serves as a corpus. Every sentence goes through the same ``TextNormalizer`` as the
training transcripts: an LM that spells words differently from the acoustic model
is a silent source of errors.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from deepspeech.data.text import TextNormalizer
from deepspeech.errors import DeepSpeechError

MANIFEST_SUFFIXES = (".jsonl", ".json")
# Flashlight's word separator token: a character LM spells the space with it, so
# that its tokens are the decoder's tokens (see deepspeech.decoding.beam).
CHAR_SEPARATOR = "|"


class LanguageModelError(DeepSpeechError):
    """A corpus or an n-gram language model file is unusable."""


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def is_manifest(path: str | Path) -> bool:
    """True for a JSON Lines manifest (by suffix, before an optional ``.gz``)."""
    path = Path(path)
    suffixes = path.suffixes[-2:] if path.suffix == ".gz" else path.suffixes[-1:]
    return bool(suffixes) and suffixes[0] in MANIFEST_SUFFIXES


def iter_raw_text(path: str | Path) -> Iterator[str]:
    """Raw sentences of a corpus file, before normalization; errors name file and line."""
    path = Path(path)
    if not path.is_file():
        raise LanguageModelError(f"{path}: corpus file not found")
    manifest = is_manifest(path)
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                if not manifest:
                    yield line
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise LanguageModelError(
                        f"{path} line {number}: not valid JSON ({exc.msg}); a manifest needs "
                        "one JSON object per line, a plain corpus a .txt name"
                    ) from None
                text = record.get("text") if isinstance(record, dict) else None
                if not isinstance(text, str):
                    raise LanguageModelError(f"{path} line {number}: no string \"text\" field")
                yield text
    except UnicodeDecodeError as exc:
        raise LanguageModelError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except (OSError, EOFError) as exc:
        raise LanguageModelError(f"{path}: cannot read: {exc}") from None


def iter_sentences(
    path: str | Path,
    normalizer: TextNormalizer | None = None,
    units: str = "word",
) -> Iterator[list[str]]:
    """Normalized sentences as token lists: words, or characters with ``|`` for the space."""
    if units not in ("word", "char"):
        raise ValueError(f"units must be 'word' or 'char', got {units!r}")
    normalize = normalizer or TextNormalizer()
    for raw in iter_raw_text(path):
        text = normalize(raw)
        if not text:
            continue
        if units == "word":
            yield text.split(" ")
        else:
            yield [CHAR_SEPARATOR if ch == " " else ch for ch in text]

"""Text: normalization rules and the character vocabulary for CTC.

Index 0 is the CTC blank; characters follow. English uses letters, space and
apostrophe (Deep Speech 2); other languages build their character set from the
training transcripts. A character outside the vocabulary is an error that names
where it was found; it is never dropped silently, since a silently shortened
transcript teaches the model to delete.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from deepspeech.config import DataConfig
from deepspeech.errors import ConfigError, VocabularyError

BLANK = "<blank>"
ENGLISH_CHARACTERS = " 'abcdefghijklmnopqrstuvwxyz"

class _PunctuationTable(dict):
    """``str.translate`` table: punctuation (category P*, except ``keep``) -> space.

    Filled lazily, one entry per distinct character, so that normalizing a large
    corpus runs at C speed.
    """

    def __init__(self, keep: str) -> None:
        super().__init__()
        self.keep = keep

    def __missing__(self, code: int) -> int:
        ch = chr(code)
        punctuation = unicodedata.category(ch).startswith("P") and ch not in self.keep
        self[code] = 32 if punctuation else code
        return self[code]


TYPESET_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})


@functools.lru_cache(maxsize=16)
def _punctuation_table(keep: str) -> _PunctuationTable:
    return _PunctuationTable(keep)


@dataclass(frozen=True)
class TextNormalizer:
    """The normalization rules from ``data:`` in the config, applied to every transcript.

    Punctuation carries no sound: it becomes a space (so "e-mail" reads "e mail"),
    except the apostrophe, which is in the English vocabulary ("don't"). Typeset text
    writes the apostrophe as U+2019 (or U+02BC), which would otherwise split "don’t"
    into "don t": where the apostrophe is kept, those are apostrophes too.
    """

    lowercase: bool = True
    strip_punctuation: bool = True
    keep: str = "'"

    def __call__(self, text: str) -> str:
        text = unicodedata.normalize("NFC", text)
        if self.lowercase:
            text = text.lower()
        if self.strip_punctuation:
            if "'" in self.keep:
                text = text.translate(TYPESET_APOSTROPHES)
            text = text.translate(_punctuation_table(self.keep))
        return " ".join(text.split())


class Vocabulary:
    """Characters <-> indices, with the CTC blank at index 0."""

    def __init__(self, characters: Sequence[str]) -> None:
        if len(set(characters)) != len(characters):
            raise VocabularyError("vocabulary has duplicate characters")
        if any(len(ch) != 1 for ch in characters):
            raise VocabularyError("vocabulary entries must be single characters")
        self.characters = list(characters)
        self._index = {ch: i + 1 for i, ch in enumerate(self.characters)}

    blank = 0

    def __len__(self) -> int:
        """Number of output classes, blank included."""
        return len(self.characters) + 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other.characters == self.characters

    def __repr__(self) -> str:
        return f"Vocabulary({''.join(self.characters)!r})"

    @classmethod
    def english(cls) -> Vocabulary:
        return cls(list(ENGLISH_CHARACTERS))

    @classmethod
    def from_transcripts(cls, texts: Iterable[str]) -> Vocabulary:
        """Every character of the (already normalized) transcripts, space first, then sorted."""
        counts = Counter()
        for text in texts:
            counts.update(text)
        characters = sorted(counts)
        if " " in characters:
            characters.remove(" ")
            characters.insert(0, " ")
        if not characters:
            raise VocabularyError("cannot build a vocabulary from empty transcripts")
        return cls(characters)

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of ``text`` outside the vocabulary, in order of appearance."""
        seen: list[str] = []
        for ch in text:
            if ch not in self._index and ch not in seen:
                seen.append(ch)
        return seen

    def encode(self, text: str, where: str = "transcript") -> list[int]:
        """Indices of the characters; ``where`` names the file and line for the error."""
        try:
            return [self._index[ch] for ch in text]
        except KeyError:
            bad = ", ".join(repr(ch) for ch in self.unknown(text))
            raise VocabularyError(
                f"{where}: character(s) outside the vocabulary: {bad} in {text!r}"
            ) from None

    def decode(self, indices: Iterable[int]) -> str:
        """Characters for indices; blanks are skipped (no CTC collapsing here)."""
        return "".join(self.characters[i - 1] for i in indices if i != self.blank)

    def to_list(self) -> list[str]:
        return list(self.characters)


def build_normalizer(config: DataConfig) -> TextNormalizer:
    """Transcript normalization rules from ``data:``."""
    return TextNormalizer(lowercase=config.lowercase, strip_punctuation=config.strip_punctuation)


def build_vocabulary(setting: str, normalized_texts: Iterable[str]) -> Vocabulary:
    """``data.vocabulary``'s choice: English letters (``english``), the transcripts'
    characters (``build``), or a file of characters (any other value)."""
    if setting == "english":
        return Vocabulary.english()
    if setting == "build":
        return Vocabulary.from_transcripts(normalized_texts)
    path = Path(setting)
    if not path.is_file():
        raise ConfigError(
            f"data.vocabulary: expected 'english', 'build' or a vocabulary file; "
            f"file not found: {path}"
        )
    # One character per line; a line holding a single space is the space.
    characters = [line[0] for line in path.read_text(encoding="utf-8").split("\n") if line]
    if not characters:
        raise VocabularyError(f"{path}: vocabulary file is empty")
    return Vocabulary(characters)

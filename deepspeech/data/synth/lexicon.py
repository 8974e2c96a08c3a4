"""The English word list (``words.txt``) and the spelling rules for its inflected forms.

``words.txt`` is package data: one entry per line under ``[section]`` headers,
more common words first. The second column on a line is an irregular form
(plural for nouns, past tense for verbs); everything else follows the rules
below, which cover the regular cases of the list (they are not a general
English morphology).
"""

from __future__ import annotations

import bisect
import functools
import random
import re
from dataclasses import dataclass
from importlib import resources

WORD_CHARACTERS = re.compile(r"[a-z' ]+")
_VOWELS = "aeiou"


def plural(noun: str) -> str:
    """box -> boxes, city -> cities, day -> days, book -> books (last word of a phrase)."""
    head, _, last = noun.rpartition(" ")
    if last.endswith(("s", "x", "z", "ch", "sh")):
        last += "es"
    elif last.endswith("y") and last[-2:-1] not in _VOWELS:
        last = last[:-1] + "ies"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def past(verb: str) -> str:
    """bake -> baked, cry -> cried, play -> played, walk -> walked."""
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2:-1] not in _VOWELS:
        return verb[:-1] + "ied"
    return verb + "ed"


def third_person(verb: str) -> str:
    """go -> goes, fix -> fixes, carry -> carries, have -> has, read -> reads."""
    if verb == "have":
        return "has"
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in _VOWELS:
        return verb[:-1] + "ies"
    return verb + "s"


def article(phrase: str) -> str:
    """"a" or "an" by the sound of the first word (a university, an hour, an egg)."""
    word = phrase.split(" ", 1)[0]
    if word.startswith(("uni", "use", "usu", "eu", "one", "once")):
        return "a"
    if word.startswith(("hour", "honest", "honor", "heir")):
        return "an"
    return "an" if word[:1] in _VOWELS else "a"


@dataclass(frozen=True)
class Entry:
    """A list entry: the base form and its irregular form, if the line gives one."""

    word: str
    form: str | None = None


class WeightedList:
    """Draws entries with Zipf-like weights: the k-th entry has weight 1 / (k + offset)."""

    def __init__(self, entries: list[Entry], offset: float) -> None:
        if not entries:
            raise ValueError("empty word list section")
        self.entries = entries
        total, self._cumulative = 0.0, []
        for rank in range(len(entries)):
            total += 1.0 / (rank + 1 + offset)
            self._cumulative.append(total)

    def __len__(self) -> int:
        return len(self.entries)

    def draw(self, rng: random.Random) -> Entry:
        point = rng.random() * self._cumulative[-1]
        index = bisect.bisect_right(self._cumulative, point)
        return self.entries[min(index, len(self.entries) - 1)]


def parse_word_list(text: str, where: str = "words.txt") -> dict[str, list[Entry]]:
    """Sections of entries in file order; a repeated word within a section keeps its first place."""
    sections: dict[str, list[Entry]] = {}
    seen: dict[str, set[str]] = {}
    section = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            sections.setdefault(section, [])
            seen.setdefault(section, set())
            continue
        if section is None or not WORD_CHARACTERS.fullmatch(line):
            raise ValueError(f"{where} line {number}: bad entry {raw!r}")
        # Phrases ("living room") have no irregular column; two-word entries in the
        # inflected sections are "base form".
        if section in ("noun", "person", "animal", "food", "vt", "vi") and " " in line:
            word, form = line.split(" ", 1)
        else:
            word, form = line, None
        if word not in seen[section]:
            seen[section].add(word)
            sections[section].append(Entry(word, form))
    return sections


@functools.cache
def load_sections(package: str = __package__, name: str = "words.txt") -> dict[str, WeightedList]:
    """The packaged word list, one weighted list per section."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    offsets = {"name": 40.0, "room": 3.0, "device": 3.0, "color": 3.0}
    return {
        section: WeightedList(entries, offsets.get(section, 12.0))
        for section, entries in parse_word_list(text, name).items()
    }


def vocabulary_size() -> int:
    """Distinct words in the list, inflected forms included."""
    words: set[str] = set()
    for weighted in load_sections().values():
        for entry in weighted.entries:
            words.update(entry.word.split())
            if entry.form:
                words.update(entry.form.split())
    return len(words)

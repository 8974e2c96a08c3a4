"""Error rates by group of utterances: by speaker, or by any field of the manifest's lines
(``gender``, ``age_group``) or combination of fields (``age_group+gender``).

A corpus rate can hide that a model hears children, or one gender, much worse; a row per
group shows it. Every utterance must have the fields grouped by: one left out would skew
its group unseen.

Kept apart from ``deepspeech.evaluation.evaluate`` (and free of torch) so that the command
line can check a ``--group-by`` before it loads a model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from deepspeech.errors import ManifestError

if TYPE_CHECKING:
    from deepspeech.data.table import UtteranceTable

FIELD_JOINER = "+"
"""Joins manifest fields into one grouping (``age_group+gender``) and their values into
the name of each of its groups (``child+f``)."""


class ScoredUtterance(Protocol):
    """What grouping needs of ``evaluate.UtteranceResult`` (which imports this module)."""

    word_errors: int
    reference_words: int
    char_errors: int
    reference_chars: int
    speaker: str | None
    extra: dict[str, Any]

    @property
    def key(self) -> str:
        """The utterance's identity, for errors."""


def group_rows(items: Iterable[ScoredUtterance], grouping: str) -> dict[str, dict]:
    """Utterances, words, WER and CER of the ``items`` sharing each value of ``grouping``
    (a field, or several joined by ``FIELD_JOINER``: one row per combination), sorted by
    value."""
    groups: dict[str, tuple[list[tuple[int, Any]], list[ScoredUtterance]]] = {}
    for item in items:
        values = _field_values(grouping, item.speaker, item.extra)
        if (missing := _missing_field(grouping, values)) is not None:
            raise ManifestError(f"{item.key}: its manifest line has no value for field "
                                f"{missing!r} to group by")
        name = FIELD_JOINER.join(_value_name(value) for value in values)
        groups.setdefault(name, ([_value_order(value) for value in values], []))[1].append(item)
    rows = {}
    for name, (_, members) in sorted(groups.items(), key=lambda group: group[1][0]):
        errors = sum(item.word_errors for item in members)
        words = sum(item.reference_words for item in members)
        chars = sum(item.reference_chars for item in members)
        rows[name] = {"utterances": len(members), "word_errors": errors, "words": words,
                      "wer": errors / max(words, 1),
                      "cer": sum(item.char_errors for item in members) / max(chars, 1)}
    return rows


def check_group_fields(utterances: UtteranceTable, groupings: Sequence[str],
                       manifest: str) -> None:
    """Refuse groupings (``group_rows``) that a line of ``manifest`` lacks a field of,
    naming the first such line: a misspelt field should fail before the decoding, not
    after it."""
    for grouping in groupings:
        lacking = []
        for line, utterance in zip(utterances.lines, utterances, strict=True):
            values = _field_values(grouping, utterance.speaker, utterance.extra)
            if (missing := _missing_field(grouping, values)) is not None:
                lacking.append((int(line), utterance, missing))
        if lacking:
            line, utterance, missing = lacking[0]
            others = ([] if utterance.speaker is None else ["speaker"]) + list(utterance.extra)
            more = f" ({len(lacking)} lines lack one)" if len(lacking) > 1 else ""
            raise ManifestError(
                f"{manifest} line {line}: no value for field {missing!r} to group by{more}; "
                f"the line has {', '.join(others) or 'no field'} beside audio_filepath, text "
                "and duration")


def _field_values(grouping: str, speaker: str | None, extra: Mapping[str, Any]) -> list[Any]:
    """The values of the fields that ``grouping`` joins, None where a line has none:
    ``speaker`` is a manifest field of its own, the others ride in ``extra``."""
    return [speaker if name == "speaker" else extra.get(name)
            for name in grouping.split(FIELD_JOINER)]


def _missing_field(grouping: str, values: Sequence[Any]) -> str | None:
    """The first field of ``grouping`` without a value, None where all have one."""
    return next((name for name, value in zip(grouping.split(FIELD_JOINER), values, strict=True)
                 if value is None), None)


def _value_order(value: Any) -> tuple[int, Any]:
    """Numbers by size (age 9 before age 11), before the others by their text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 0, value
    return 1, _value_name(value)


def _value_name(value: Any) -> str:
    """A string as it is, any other value as JSON writes it."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

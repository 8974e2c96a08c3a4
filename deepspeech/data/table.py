"""Utterances and their labels kept as a few arrays, not as one Python object each.

A thousand hours is a few hundred thousand utterances. As objects (an ``Utterance``,
its strings, a list of label ints) each costs a few kilobytes, and every DataLoader
worker forked from the trainer ends up copying them: reading an object writes its
reference count, so each page it touches is copied (copy-on-write) and over an epoch
every worker holds its own copy of the corpus. Here a column is a numpy array, or a
byte blob with the end of each entry; reading one touches no reference count, so the
forked workers share the pages, and a row costs what its bytes cost (docs/BENCHMARKS.md,
"Memory per utterance"). Rows come back as ``Utterance`` objects, made when asked for.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Self, TypeVar, overload

import numpy as np
import torch

from deepspeech.data.manifest import Utterance, iter_manifest

Row = TypeVar("Row")


class _Rows(Sequence[Row]):
    """A sequence whose slices are of its own kind (``take``), not lists of rows."""

    def row(self, index: int) -> Row:
        raise NotImplementedError

    def take(self, indices: Sequence[int]) -> Self:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> Self: ...
    def __getitem__(self, index: int | slice) -> Row | Self:
        if isinstance(index, slice):
            return self.take(range(len(self))[index])
        return self.row(index)


class StringColumn(_Rows[str]):
    """Strings as one UTF-8 blob and the end offset of each."""

    def __init__(self, blob: bytes, ends: np.ndarray) -> None:
        self.blob = blob
        self.ends = ends

    @classmethod
    def of(cls, strings: Iterable[str]) -> StringColumn:
        blob, ends = bytearray(), array("q")
        for value in strings:
            blob += value.encode("utf-8")
            ends.append(len(blob))
        return cls(bytes(blob), _numpy(ends, np.int64))

    def __len__(self) -> int:
        return len(self.ends)

    def row(self, index: int) -> str:
        start, end = _span(self.ends, index)
        return self.blob[start:end].decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        start = 0
        for end in self.ends.tolist():
            yield self.blob[start:end].decode("utf-8")
            start = end

    def take(self, indices: Sequence[int]) -> StringColumn:
        """The strings at ``indices``, in that order (repeats allowed)."""
        starts = np.concatenate(([0], self.ends[:-1])).tolist()
        ends = self.ends.tolist()
        parts = [self.blob[starts[i]:ends[i]] for i in indices]
        lengths = np.fromiter((len(part) for part in parts), dtype=np.int64, count=len(parts))
        return StringColumn(b"".join(parts), np.cumsum(lengths))

    @staticmethod
    def concat(columns: Sequence[StringColumn]) -> StringColumn:
        return StringColumn(b"".join(c.blob for c in columns),
                            _joined_ends([(c.ends, len(c.blob)) for c in columns]))


class UtteranceTable(_Rows[Utterance]):
    """A manifest's utterances as columns, with the manifest line each came from."""

    def __init__(self, paths: StringColumn, texts: StringColumn, durations: np.ndarray,
                 offsets: np.ndarray, speakers: np.ndarray, speaker_names: list[str],
                 extras: StringColumn, lines: np.ndarray) -> None:
        self.paths = paths
        self.texts = texts
        self.durations = durations
        """Seconds, float64, as the manifest says."""
        self.offsets = offsets
        """Seconds into the file, NaN where the line has none (the whole file)."""
        self.speakers = speakers
        """Index into ``speaker_names``, -1 where the line names none."""
        self.speaker_names = speaker_names
        self.extras = extras
        """The line's other fields as JSON, empty where there are none."""
        self.lines = lines
        """The manifest line of each utterance (1-based), for reports."""

    @classmethod
    def of(cls, utterances: Iterable[Utterance],
           lines: Iterable[int] | None = None) -> UtteranceTable:
        """A table of ``utterances``; ``lines`` numbers them, else 1, 2, 3..."""
        builder = _TableBuilder()
        numbered = zip(lines, utterances, strict=True) if lines is not None else \
            enumerate(utterances, start=1)
        for line, utterance in numbered:
            builder.add(line, utterance)
        return builder.build()

    @classmethod
    def read(cls, manifest: str) -> UtteranceTable:
        """Every line of ``manifest``, parsed and checked once (``iter_manifest``)."""
        builder = _TableBuilder()
        for line, utterance in iter_manifest(manifest):
            builder.add(line, utterance)
        return builder.build()

    def __len__(self) -> int:
        return len(self.durations)

    def row(self, index: int) -> Utterance:
        offset = float(self.offsets[index])
        speaker = int(self.speakers[index])
        extra = self.extras[index]
        return Utterance(self.paths[index], self.texts[index], float(self.durations[index]),
                         None if offset != offset else offset,
                         self.speaker_names[speaker] if speaker >= 0 else None,
                         json.loads(extra) if extra else {})

    def __iter__(self) -> Iterator[Utterance]:
        for index in range(len(self)):
            yield self[index]

    def take(self, indices: Sequence[int]) -> UtteranceTable:
        """The rows at ``indices``, in that order (repeats allowed)."""
        chosen = np.asarray(indices, dtype=np.int64)
        return UtteranceTable(self.paths.take(indices), self.texts.take(indices),
                              self.durations[chosen], self.offsets[chosen],
                              self.speakers[chosen], self.speaker_names,
                              self.extras.take(indices), self.lines[chosen])

    @staticmethod
    def concat(tables: Sequence[UtteranceTable]) -> UtteranceTable:
        """The rows of ``tables`` one after the other (speakers renumbered)."""
        names: dict[str, int] = {}
        speakers = []
        for table in tables:
            codes = np.array([names.setdefault(name, len(names))
                              for name in table.speaker_names] + [-1], dtype=np.int32)
            speakers.append(codes[table.speakers])
        return UtteranceTable(
            StringColumn.concat([t.paths for t in tables]),
            StringColumn.concat([t.texts for t in tables]),
            np.concatenate([t.durations for t in tables]),
            np.concatenate([t.offsets for t in tables]),
            np.concatenate(speakers), list(names),
            StringColumn.concat([t.extras for t in tables]),
            np.concatenate([t.lines for t in tables]))


class _TableBuilder:
    """Grows the columns one manifest line at a time, without a list of objects between."""

    def __init__(self) -> None:
        self.paths, self.texts, self.extras = bytearray(), bytearray(), bytearray()
        self.path_ends, self.text_ends, self.extra_ends = array("q"), array("q"), array("q")
        self.durations, self.offsets = array("d"), array("d")
        self.speakers, self.lines = array("i"), array("q")
        self.speaker_codes: dict[str, int] = {}

    def add(self, line: int, utterance: Utterance) -> None:
        self.paths += utterance.audio_filepath.encode("utf-8")
        self.path_ends.append(len(self.paths))
        self.texts += utterance.text.encode("utf-8")
        self.text_ends.append(len(self.texts))
        if utterance.extra:
            self.extras += json.dumps(utterance.extra, ensure_ascii=False).encode("utf-8")
        self.extra_ends.append(len(self.extras))
        self.durations.append(utterance.duration)
        self.offsets.append(float("nan") if utterance.offset is None else utterance.offset)
        self.speakers.append(-1 if utterance.speaker is None else
                             self.speaker_codes.setdefault(utterance.speaker,
                                                           len(self.speaker_codes)))
        self.lines.append(line)

    def build(self) -> UtteranceTable:
        def column(blob: bytearray, ends: array) -> StringColumn:
            return StringColumn(bytes(blob), _numpy(ends, np.int64))

        return UtteranceTable(column(self.paths, self.path_ends),
                              column(self.texts, self.text_ends),
                              _numpy(self.durations, np.float64), _numpy(self.offsets, np.float64),
                              _numpy(self.speakers, np.int32), list(self.speaker_codes),
                              column(self.extras, self.extra_ends), _numpy(self.lines, np.int64))


def _span(ends: np.ndarray, index: int) -> tuple[int, int]:
    """Where entry ``index`` (negative counts from the end) lies in a column of ``ends``."""
    index = range(len(ends))[index]
    return (int(ends[index - 1]) if index else 0), int(ends[index])


def _joined_ends(parts: Sequence[tuple[np.ndarray, int]]) -> np.ndarray:
    """The ``ends`` of columns laid back to back, given each column's ``(ends, length)``:
    every column's ends shifted by the lengths of those before it."""
    ends, base = [], 0
    for column_ends, length in parts:
        ends.append(column_ends + base)
        base += length
    return np.concatenate(ends) if ends else np.zeros(0, np.int64)


def _numpy(values: array, dtype: Any) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype).copy() if len(values) else np.zeros(0, dtype)


class LabelTable(_Rows[list[int]]):
    """Encoded transcripts as one flat int16 array and the end of each."""

    def __init__(self, flat: np.ndarray, ends: np.ndarray) -> None:
        self.flat = flat
        self.ends = ends

    @classmethod
    def of(cls, labels: Iterable[Sequence[int]]) -> LabelTable:
        builder = LabelTableBuilder()
        for label in labels:
            builder.add(label)
        return builder.build()

    def __len__(self) -> int:
        return len(self.ends)

    def row(self, index: int) -> list[int]:
        start, end = _span(self.ends, index)
        return self.flat[start:end].tolist()

    def tensor(self, index: int) -> torch.Tensor:
        """The labels at ``index`` as the int32 tensor CTC takes."""
        start, end = _span(self.ends, index)
        return torch.from_numpy(self.flat[start:end].astype(np.int32))

    def take(self, indices: Sequence[int]) -> LabelTable:
        """The labels at ``indices``, in that order (repeats allowed)."""
        chosen = np.asarray(indices, dtype=np.int64)
        starts = np.concatenate(([0], self.ends[:-1]))[chosen]
        lengths = self.ends[chosen] - starts
        ends = np.cumsum(lengths)
        # Each output position's source position: its row's start plus its place in the row.
        within = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - lengths, lengths)
        return LabelTable(self.flat[np.repeat(starts, lengths) + within], ends)

    @staticmethod
    def concat(tables: Sequence[LabelTable]) -> LabelTable:
        return LabelTable(np.concatenate([t.flat for t in tables]),
                          _joined_ends([(t.ends, len(t.flat)) for t in tables]))


class LabelTableBuilder:
    """Grows a ``LabelTable`` one transcript at a time, so that encoding a corpus never
    holds every transcript as a list of Python ints (8 bytes a label, plus the list)."""

    def __init__(self) -> None:
        self.flat, self.ends = array("h"), array("q")

    def add(self, label: Sequence[int]) -> None:
        self.flat.extend(label)
        self.ends.append(len(self.flat))

    def build(self) -> LabelTable:
        return LabelTable(_numpy(self.flat, np.int16), _numpy(self.ends, np.int64))

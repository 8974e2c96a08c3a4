"""Utterances and labels as columns: what goes in comes back, and a row costs its bytes."""

from __future__ import annotations

import json
import pickle

import numpy as np
import torch

from deepspeech.data.manifest import Utterance
from deepspeech.data.table import LabelTable, StringColumn, UtteranceTable

UTTERANCES = [
    Utterance("/a/one.wav", "hello", 1.25),
    Utterance("/a/twö.flac", "ünïcode ok", 2.5, offset=0.75, speaker="s1"),
    Utterance("/a/three.wav", "", 0.5, speaker="s2", extra={"lang": "en", "score": 0.5}),
    Utterance("/a/four.wav", "again", 3.0, offset=0.0, speaker="s1"),
]


def test_rows_come_back_as_the_utterances_that_went_in_with_their_lines():
    table = UtteranceTable.of(UTTERANCES, lines=[3, 5, 8, 13])
    assert list(table) == UTTERANCES
    assert table[-1] == UTTERANCES[-1] and table[1].offset == 0.75 and table[0].offset is None
    assert table.lines.tolist() == [3, 5, 8, 13]
    assert list(table.paths) == [u.audio_filepath for u in UTTERANCES]
    assert table.durations.dtype == np.float64


def test_take_keeps_order_and_repeats_and_slices_are_tables():
    table = UtteranceTable.of(UTTERANCES)
    taken = table.take([3, 1, 1, 0])
    assert list(taken) == [UTTERANCES[i] for i in (3, 1, 1, 0)]
    assert taken.lines.tolist() == [4, 2, 2, 1]
    assert list(table[1::2]) == UTTERANCES[1::2]
    assert len(table.take([])) == 0 and list(table.take([])) == []


def test_concat_renumbers_speakers_across_tables():
    first, second = UtteranceTable.of(UTTERANCES[:2]), UtteranceTable.of(UTTERANCES[2:])
    joined = UtteranceTable.concat([second, first])
    assert list(joined) == UTTERANCES[2:] + UTTERANCES[:2]
    assert sorted(joined.speaker_names) == ["s1", "s2"]


def test_reading_a_manifest_parses_each_line_once_and_numbers_it(tmp_path):
    manifest = tmp_path / "m.jsonl"
    lines = [json.dumps({"audio_filepath": "x.wav", "text": "a b", "duration": 1.5}), "",
             json.dumps({"audio_filepath": "/abs/y.wav", "text": "c", "duration": 2.0,
                         "lang": "de"})]
    manifest.write_text("\n".join(lines) + "\n")
    table = UtteranceTable.read(str(manifest))
    assert table.lines.tolist() == [1, 3]
    assert table[0].audio_filepath == str(tmp_path / "x.wav")
    assert table[1].extra == {"lang": "de"}


def test_labels_round_trip_take_and_concat():
    labels = [[1, 2, 3], [], [27], [5, 5]]
    table = LabelTable.of(labels)
    assert list(table) == labels
    assert list(table.take([3, 1, 0, 0])) == [[5, 5], [], [1, 2, 3], [1, 2, 3]]
    assert list(table.take([])) == []
    assert list(LabelTable.concat([table[2:], table[:1]])) == [[27], [5, 5], [1, 2, 3]]
    assert table.tensor(0).dtype == torch.int32 and table.tensor(0).tolist() == [1, 2, 3]


def test_a_row_costs_its_bytes_and_pickles_as_a_few_arrays():
    count = 10_000
    utterances = [Utterance(f"/corpus/speaker{i % 50}/utt{i:07d}.flac", "some words said " * 3,
                            1.0 + i % 7, speaker=f"s{i % 50}") for i in range(count)]
    table = UtteranceTable.of(utterances)
    labels = LabelTable.of([[1 + j % 27 for j in range(48)]] * count)
    stored = (len(table.paths.blob) + len(table.texts.blob) + len(table.extras.blob)
              + sum(a.nbytes for a in (table.paths.ends, table.texts.ends, table.extras.ends,
                                       table.durations, table.offsets, table.speakers,
                                       table.lines, labels.flat, labels.ends)))
    # 37 + 48 bytes of strings, 48 labels of 2 bytes, 8 columns of at most 8 bytes
    assert stored / count <= 37 + 48 + 96 + 8 * 8
    assert len(pickle.dumps((table, labels))) < 1.05 * stored + 10_000


def test_string_column_of_nothing():
    empty = StringColumn.of([])
    assert len(empty) == 0 and list(empty) == [] and len(StringColumn.concat([empty])) == 0

"""Manifests: reading, writing, validation errors with line numbers, stats."""

from __future__ import annotations

import json

import pytest

from deepspeech.data.manifest import Utterance, manifest_stats, read_manifest, write_manifest
from deepspeech.errors import ManifestError


def test_round_trip_keeps_fields_and_makes_paths_relative(tmp_path):
    audio = tmp_path / "clips" / "a.wav"
    utterances = [Utterance(str(audio), "hello there", 1.5, offset=0.25, speaker="spk1"),
                  Utterance("/elsewhere/b.flac", "ni hao", 2.0)]
    path = tmp_path / "m.jsonl"
    assert write_manifest(path, utterances) == 2
    first = json.loads(path.read_text().splitlines()[0])
    assert first["audio_filepath"] == "clips/a.wav"
    assert read_manifest(path) == utterances


def test_relative_paths_resolve_against_the_manifest_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "m.jsonl"
    path.write_text('{"audio_filepath": "x.wav", "text": "a", "duration": 1}\n')
    assert read_manifest(path)[0].audio_filepath == str(tmp_path / "sub" / "x.wav")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ('["a"]', "line 2: expected a JSON object"),
        ('{"audio_filepath": "a.wav", "text": "x"}', "line 2: missing field(s) duration"),
        ('{"audio_filepath": "a.wav", "text": "x", "duration": -1}', "duration must be positive"),
        ('{"audio_filepath": "a.wav", "text": "x", "duration": "long"}', "duration must be a number"),
        ('{"audio_filepath": "a.wav", "text": 5, "duration": 1}', "text must be a string"),
        ('{"audio_filepath": "a.wav", "text": "x", "duration": 1, "lang": "en"}', "unknown field(s) lang"),
        ('{"audio_filepath": "a.wav", "text": "x", "duration": 1, "offset": -2}', "offset must be"),
    ],
)
def test_bad_lines_are_named(tmp_path, line, message):
    path = tmp_path / "m.jsonl"
    path.write_text('{"audio_filepath": "ok.wav", "text": "fine", "duration": 1}\n' + line + "\n")
    with pytest.raises(ManifestError) as error:
        read_manifest(path)
    assert f"{path} " in str(error.value)
    assert message in str(error.value)


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"audio_filepath": "ok.wav", "text": "fine", "duration": 1}\n'
                     b'{"audio_filepath": "a.wav", "text": "caf\xe9", "duration": 1}\n')
    with pytest.raises(ManifestError, match=r"m.jsonl line 2: not UTF-8 text \(invalid "
                                            r"continuation byte\)"):
        read_manifest(path)


def test_empty_and_missing_manifests(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ManifestError, match="manifest is empty"):
        read_manifest(empty)
    with pytest.raises(ManifestError, match="manifest not found"):
        read_manifest(tmp_path / "none.jsonl")


def test_stats_count_hours_speakers_and_characters():
    utterances = [Utterance(f"{i}.wav", "ab c", 1.0 + i, speaker=f"s{i % 2}") for i in range(4)]
    stats = manifest_stats(utterances, bins=3)
    assert stats.utterances == 4
    assert stats.hours == pytest.approx(10 / 3600)
    assert stats.speakers == 2
    assert set(stats.characters) == {"a", "b", "c", " "}
    assert sum(count for _, _, count in stats.duration_histogram) == 4
    assert "utterances: 4" in stats.format()

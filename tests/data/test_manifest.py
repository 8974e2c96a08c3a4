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
        ('{"audio_filepath": "a.wav", "txt": "x", "duration": 1}',
         "line 2: unknown field 'txt', probably meant 'text'; missing field(s) text"),
        ('{"audio_filpath": "a.wav", "text": "x", "duration": 1}',
         "unknown field 'audio_filpath', probably meant 'audio_filepath'; missing field(s) "
         "audio_filepath"),
        ('{"audio_filepath": "a.wav", "text": "x", "durration": 1}',
         "unknown field 'durration', probably meant 'duration'; missing field(s) duration"),
        ('{"audio_filepath": "a.wav", "Text": "x", "duration": 1}', "probably meant 'text'"),
        ('{"audio_filepath": "a.wav", "text": "x", "duration": 1, "ofset": 2}',
         "line 2: unknown field 'ofset', probably meant 'offset'"),
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


def test_nemo_fields_ride_along_with_one_note_per_manifest(tmp_path, caplog):
    path = tmp_path / "nemo.jsonl"
    lines = [{"audio_filepath": f"{i}.wav", "text": "hello", "duration": 1.5, "lang": "en",
              "pred_text": "hallo", "speaker_id": 7} for i in range(3)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level("INFO", logger="deepspeech.data.manifest"):
        utterances = read_manifest(path)
    assert [u.extra for u in utterances] == [{"lang": "en", "pred_text": "hallo",
                                              "speaker_id": 7}] * 3
    notes = [record.getMessage() for record in caplog.records]
    assert notes == [f"{path}: field(s) not used here, carried along: lang (3 lines), "
                     "pred_text (3 lines), speaker_id (3 lines)"]
    # Written back as read (with paths relative to the new manifest's folder).
    copy = tmp_path / "copy.jsonl"
    write_manifest(copy, utterances)
    assert [json.loads(line) for line in copy.read_text().splitlines()] == lines
    assert read_manifest(copy) == utterances
    assert len({*utterances}) == 3  # still hashable, extras or not


def test_a_missing_required_field_without_a_near_miss_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"audio_filepath": "a.wav", "text": "x", "lang": "en"}\n')
    with pytest.raises(ManifestError, match=r"m.jsonl line 1: missing field\(s\) duration$"):
        read_manifest(path)

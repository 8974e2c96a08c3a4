"""Bad input found before step one: every unusable utterance, transcript or audio, named
by manifest line in one pass; skipped ones leave the run to train on the rest."""

from __future__ import annotations

import json

import pytest

from deepspeech.config import load_config
from deepspeech.errors import ManifestError
from deepspeech.training.data import PROBLEMS_FILE
from deepspeech.training.trainer import train


def broken_copy(manifest, folder):
    """The manifest with line 2's transcript outside the vocabulary, line 5's audio gone
    and line 9's audio not audio."""
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    for entry in entries:
        entry["audio_filepath"] = str(manifest.parent / entry["audio_filepath"])
    entries[1]["text"] = "price €5"
    entries[4]["audio_filepath"] = str(folder / "gone.wav")
    (folder / "junk.wav").write_bytes(b"RIFF but not really")
    entries[8]["audio_filepath"] = str(folder / "junk.wav")
    copy = folder / "broken.jsonl"
    copy.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return copy


def test_every_unusable_utterance_is_named_by_line_in_one_pass(tiny_corpus, tiny_overrides,
                                                               tmp_path):
    manifest = broken_copy(tiny_corpus["train"], tmp_path)
    run = tmp_path / "run"
    overrides = [*tiny_overrides(tiny_corpus, run), f"data.train_manifest={manifest}",
                 "data.val_manifest=", "train.max_steps=1"]
    with pytest.raises(ManifestError) as error:
        train(load_config(None, overrides))
    message = str(error.value)
    assert f"{manifest}: 3 unusable utterance(s)" in message
    for line, what in ((2, "outside the vocabulary"), (5, "audio file missing"),
                       (9, "not readable as audio")):
        assert f"{manifest} line {line} (" in message and what in message
    report = (run / PROBLEMS_FILE).read_text().splitlines()
    assert [entry.split(" (")[0] for entry in report] == \
        [f"{manifest} line {line}" for line in (2, 5, 9)]
    assert not (run / "last.pt").exists()

    result = train(load_config(None, [*overrides, "data.bad_input=skip"]))
    assert result.steps == 1
    assert len((run / PROBLEMS_FILE).read_text().splitlines()) == 3

    clean = [*tiny_overrides(tiny_corpus, run), "data.val_manifest=", "train.max_steps=1"]
    train(load_config(None, clean), overwrite=True)
    assert not (run / PROBLEMS_FILE).exists()  # the earlier run's report is not this one's

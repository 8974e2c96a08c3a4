"""Validation data that is also training data is named before training starts."""

from __future__ import annotations

import logging

from deepspeech.data.corpus import Corpus, warn_if_held_out_in_training
from deepspeech.data.manifest import Utterance


def corpus(name: str, *utterances: Utterance) -> Corpus:
    return Corpus(name, list(utterances), [[1]] * len(utterances))


def test_shared_audio_is_counted_and_named(tmp_path, caplog):
    a, b = str(tmp_path / "a.wav"), str(tmp_path / "b.wav")
    training = corpus("train.jsonl", Utterance(a, "x", 1.0), Utterance(b, "y", 1.0),
                      Utterance(b, "z", 1.0, offset=4.0))
    held_out = corpus("dev.jsonl",
                      Utterance(str(tmp_path / "sub" / ".." / "a.wav"), "x", 1.0),
                      Utterance(b, "y", 1.0, offset=2.0),  # another segment of b
                      Utterance(str(tmp_path / "c.wav"), "w", 1.0))
    with caplog.at_level(logging.WARNING, "deepspeech.data.corpus"):
        warn_if_held_out_in_training(training, held_out)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("dev.jsonl: 1 of its 3 utterances are also training data")
    assert "a.wav" in message and "memorization" in message


def test_disjoint_data_says_nothing(tmp_path, caplog):
    training = corpus("train.jsonl", Utterance(str(tmp_path / "a.wav"), "x", 1.0))
    held_out = corpus("dev.jsonl", Utterance(str(tmp_path / "a.wav"), "x", 1.0, offset=3.0),
                      Utterance(str(tmp_path / "b.wav"), "y", 1.0))
    with caplog.at_level(logging.WARNING, "deepspeech.data.corpus"):
        warn_if_held_out_in_training(training, held_out)
    assert caplog.records == []

"""Training tells a person when it waits for its data."""

from __future__ import annotations

import logging
import time

import pytest

from deepspeech.config import load_config
from deepspeech.data.dataset import SpeechDataset
from deepspeech.training.metrics import data_starvation
from deepspeech.training.trainer import train


def test_waiting_more_than_a_fifth_of_the_time_is_reported():
    assert data_starvation(waited=1.0, elapsed=10.0, num_workers=1) is None
    assert data_starvation(waited=2.0, elapsed=10.0, num_workers=1) is None
    message = data_starvation(waited=6.0, elapsed=10.0, num_workers=2)
    assert message is not None and message.startswith("60% of the training time")
    assert "data.num_workers=2" in message
    assert data_starvation(waited=0.0, elapsed=0.0, num_workers=1) is None


@pytest.mark.slow
def test_a_slow_data_pipeline_is_named_at_the_end_of_each_epoch(
        tiny_corpus, tiny_overrides, tmp_path, monkeypatch, caplog):
    load = SpeechDataset.__getitem__

    def slow_load(self, item):
        time.sleep(0.05)
        return load(self, item)

    monkeypatch.setattr(SpeechDataset, "__getitem__", slow_load)
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), "train.epochs=1"])
    with caplog.at_level(logging.WARNING, logger="deepspeech.training.trainer"):
        train(config)
    warnings = [r.getMessage() for r in caplog.records if "waiting for batches" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("epoch 1: ")
    assert "data.num_workers=0" in warnings[0]

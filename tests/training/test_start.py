"""Where a run starts: a resume with nothing left to train ends cleanly, untouched."""

from __future__ import annotations

import logging

import pytest

from deepspeech.config import load_config
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.trainer import train


@pytest.mark.slow
def test_a_resume_with_nothing_left_ends_at_once_and_writes_nothing(
        tiny_corpus, tiny_overrides, tmp_path, caplog):
    overrides = [*tiny_overrides(tiny_corpus, tmp_path / "run"), "train.max_steps=3"]
    first = train(load_config(None, overrides))
    last = tmp_path / "run" / "last.pt"
    written = last.stat().st_mtime_ns
    caplog.set_level(logging.WARNING, logger="deepspeech.training.start")
    again = train(load_config(None, [*overrides, f"train.resume={last}"]))
    assert (again.steps, again.epochs, again.best_wer, again.output_dir) == (
        3, 0, first.best_wer, tmp_path / "run")
    assert f"{last} has trained 3 steps (0 epochs), all that this run's train.max_steps=3 " \
           "allows: nothing is left to train; raise train.max_steps to train on" in caplog.text
    assert last.stat().st_mtime_ns == written
    longer = train(load_config(None, [*overrides[:-1], "train.max_steps=5",
                                      f"train.resume={last}"]))
    assert longer.steps == 5 and load_checkpoint(last).state.step == 5

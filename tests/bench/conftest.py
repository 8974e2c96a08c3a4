"""Shared by the benchmark tests: a checkpoint of a tiny random model (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inference.conftest import _random_recognizer, _save_random_checkpoint

TINY_MODEL = ["model.conv.channels=[4]", "model.conv.kernels=[[11,5]]",
              "model.conv.strides=[[2,2]]", "model.rnn.layers=1", "model.rnn.hidden=16"]


@pytest.fixture
def tiny_checkpoint(tmp_path) -> Path:
    """A checkpoint that every ``--checkpoint`` command loads, in ``tmp_path``."""
    return _save_random_checkpoint(_random_recognizer(TINY_MODEL), tmp_path / "tiny.pt")

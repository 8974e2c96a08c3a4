"""Checkpoints: atomic writes, weights-only loading, clear errors on damage."""

from __future__ import annotations

import json
import os

import pytest
import torch

from deepspeech.errors import CheckpointError
from deepspeech.training import checkpoint as checkpoint_module
from deepspeech.training.checkpoint import (
    load_checkpoint,
    record_tuned_decoding,
    save_checkpoint,
    tuned_decoding,
)


def state(value: float) -> dict:
    return {"config": {}, "vocabulary": ["a"], "model": {"w": torch.full((3,), value)}}


def test_round_trip(tmp_path):
    save_checkpoint(state(1.0), tmp_path / "c.pt")
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(loaded["model"]["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["c.pt"]


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(state(1.0), path)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(state(2.0), path)
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_truncated_and_foreign_files_give_clear_errors(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(state(1.0), path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"c\.pt: not a readable checkpoint"):
        load_checkpoint(path)
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a deepspeech checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "none.pt")
    (tmp_path / "train.jsonl").write_text('{"audio_filepath": "a.wav"}\n')
    with pytest.raises(CheckpointError, match="train.jsonl: not a readable checkpoint: torch.save "
                                              "writes a zip archive, this file starts with"):
        load_checkpoint(tmp_path / "train.jsonl")


def test_pickled_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"format": "deepspeech-checkpoint", "evil": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "evil.pt")


def test_tuned_decoding_goes_into_the_card_of_the_same_model_only(tmp_path):
    path = tmp_path / "model_card.json"
    card = {"config_digest": "abc", "step": 300, "decode": {"mode": "greedy"}}
    beam = {"mode": "beam", "lm_weight": 1.5}
    assert not record_tuned_decoding(card, beam, {"wer": 0.2}, path)  # no card yet
    path.write_text(json.dumps(card))
    assert not record_tuned_decoding({**card, "step": 400}, beam, {"wer": 0.2}, path)
    assert json.loads(path.read_text()) == card
    assert record_tuned_decoding(card, beam, {"wer": 0.2}, path)
    assert json.loads(path.read_text()) == {**card, "decode": beam,
                                            "decode_tuned_on": {"wer": 0.2}}
    assert tuned_decoding(card, path) == {"decode_tuned": beam, "decode_tuned_on": {"wer": 0.2}}
    assert tuned_decoding({**card, "step": 400}, path) == {}  # a card of another checkpoint
    path.write_text("{not json")
    assert not record_tuned_decoding(card, beam, {"wer": 0.2}, path)
    assert tuned_decoding(card, path) == {}
    assert tuned_decoding(card, tmp_path / "none.json") == {}

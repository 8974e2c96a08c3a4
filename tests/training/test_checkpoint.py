"""Checkpoints: atomic writes, weights-only loading, clear errors on damage."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.errors import CheckpointError
from deepspeech.training import checkpoint as checkpoint_module
from deepspeech.training.checkpoint import (
    Checkpoint,
    load_checkpoint,
    record_tuned_decoding,
    save_checkpoint,
    tuned_decoding,
)
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.resume import check_resumable
from deepspeech.training.trainer import train


def state(value: float) -> Checkpoint:
    return Checkpoint(config={}, vocabulary=["a"], model={"w": torch.full((3,), value)})


def test_round_trip(tmp_path):
    save_checkpoint(state(1.0), tmp_path / "c.pt")
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(loaded.model["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["c.pt"]


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(state(1.0), path)

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(state(2.0), path)
    assert torch.equal(load_checkpoint(path).model["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_truncated_and_foreign_files_give_clear_errors(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(state(1.0), path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"c\.pt: not a readable checkpoint \(truncated "
                                              r"or corrupt\?\): RuntimeError: "):
        load_checkpoint(path)
    save_checkpoint(state(1.0), path)
    path.write_bytes(path.read_bytes()[:-200])  # the zip's directory at the end is cut
    with pytest.raises(CheckpointError, match=r"truncated or corrupt\?") as error:
        load_checkpoint(path)
    assert "weights_only" not in str(error.value) and "holds code" not in str(error.value)
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a deepspeech checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "none.pt")
    (tmp_path / "train.jsonl").write_text('{"audio_filepath": "a.wav"}\n')
    with pytest.raises(CheckpointError, match="train.jsonl: not a readable checkpoint: torch.save "
                                              "writes a zip archive, this file starts with"):
        load_checkpoint(tmp_path / "train.jsonl")


class Evil:
    """What ``torch.save`` pickles as a call: loading it unguarded would run the call."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


class Plain:
    """An ordinary object: pickled as its class, which weights-only loading refuses too."""

    def __init__(self) -> None:
        self.steps = 3


@pytest.mark.parametrize("make, named", [(Evil, "posix.mkdir"),
                                         (lambda marker: Plain(), "test_checkpoint.Plain")])
def test_pickled_code_is_refused_as_code_without_torchs_advice(tmp_path, make, named):
    marker = tmp_path / "ran"
    torch.save({"format": "deepspeech-checkpoint", "evil": make(marker)}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(tmp_path / "evil.pt")
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'evil.pt'}: holds code (objects other than tensors "
                              "and plain data, such as ")
    assert named in message
    assert message.endswith(") and will not be loaded: a checkpoint is never a way to run code")
    assert "truncated" not in message and "weights_only" not in message
    assert "safe_globals" not in message and not marker.exists()


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


OLD_CHECKPOINT = Path(__file__).parent / "data" / "last_written_by_d0b1991.pt"
"""``last.pt`` of a 2-step run of the tiny corpus (``tiny_overrides``, ``optim.ema_decay=0.9``,
``train.max_steps=2``) written by the code before the typed checkpoint (commit d0b1991)."""


def test_a_checkpoint_written_before_the_typed_one_reads_and_writes_back_unchanged():
    payload = torch.load(OLD_CHECKPOINT, weights_only=True)
    checkpoint = Checkpoint.from_dict(payload)
    assert checkpoint.state.step == 2 and checkpoint.state.validation["utterances"] == 12
    assert checkpoint.training_model is not None and len(checkpoint.rng) == 1
    again = checkpoint.to_dict()
    assert list(again) == list(payload)
    assert _same(again, payload)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_a_checkpoint_of_weights_only_is_refused_as_a_resume(tmp_path):
    save_checkpoint(Checkpoint(config=load_config(None).to_dict(), vocabulary=["a"], model={}),
                    tmp_path / "w.pt")
    config = load_config(None, [f"train.resume={tmp_path / 'w.pt'}"])
    with pytest.raises(CheckpointError, match=r"w\.pt: holds weights only .* train\.init_from"):
        check_resumable(load_checkpoint(tmp_path / "w.pt"), config)


@pytest.mark.slow
def test_a_checkpoint_written_before_the_typed_one_resumes_evaluates_and_fine_tunes(
        tiny_corpus, tiny_overrides, tmp_path, capsys):
    old = tmp_path / "old" / "last.pt"
    old.parent.mkdir()
    shutil.copy(OLD_CHECKPOINT, old)
    resumed = train(load_config(None, [*tiny_overrides(tiny_corpus, old.parent),
                                       "optim.ema_decay=0.9", "train.max_steps=3",
                                       f"train.resume={old}"]))
    assert resumed.steps == 3
    weights = load_checkpoint(old).model
    assert state_dict_digest(weights) != state_dict_digest(
        torch.load(OLD_CHECKPOINT, weights_only=True)["model"])

    assert main(["evaluate", "--checkpoint", str(OLD_CHECKPOINT),
                 "--manifest", str(tiny_corpus["val"])]) == 0
    assert "WER" in capsys.readouterr().out

    tuned = train(load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "ft"),
                                     "train.max_steps=1", f"train.init_from={OLD_CHECKPOINT}"]))
    assert tuned.steps == 1

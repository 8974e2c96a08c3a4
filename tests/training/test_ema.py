"""The moving average of the weights: its arithmetic, and what training does with it."""

from __future__ import annotations

import pytest
import torch

from deepspeech.config import load_config
from deepspeech.errors import CheckpointError
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.ema import WeightAverage
from deepspeech.training.trainer import train


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(1)).double()
    with torch.no_grad():
        model[0].weight.fill_(0.0)
    return model


def test_the_average_follows_the_capped_decay():
    model = _model()
    average = WeightAverage(model, decay=0.2)
    expected = 0.0
    for updates, value in enumerate([1.0, 2.0, 4.0, 8.0], start=1):
        with torch.no_grad():
            model[0].weight.fill_(value)
        average.update(model, updates)
        decay = min(0.2, updates / (9 + updates))  # 0.1, 2/11, then the cap
        expected = decay * expected + (1 - decay) * value
        assert average.model[0].weight[0, 0].item() == pytest.approx(expected, rel=1e-15)
    assert model[0].weight[0, 0].item() == 8.0  # the trained weights are left alone


def test_integer_buffers_are_copied_and_the_copy_needs_no_gradients():
    model = _model().train()
    average = WeightAverage(model, decay=0.9)
    model(torch.ones(4, 2, dtype=torch.float64))
    average.update(model, 1)
    assert average.model[1].num_batches_tracked.item() == 1
    assert not any(p.requires_grad for p in average.model.parameters())
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.1])
def test_a_decay_outside_the_open_interval_is_refused(decay):
    with pytest.raises(ValueError, match="decay must be in"):
        WeightAverage(_model(), decay)


@pytest.mark.slow
def test_training_validates_and_keeps_the_average(tiny_corpus, tiny_overrides, tmp_path):
    config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path), "optim.ema_decay=0.9"])
    train(config)
    last = load_checkpoint(tmp_path / "last.pt")
    averaged, trained = last.model, last.training_model
    assert state_dict_digest(averaged) != state_dict_digest(trained)
    assert averaged.keys() == trained.keys()
    best = load_checkpoint(tmp_path / "best.pt")
    assert best.state.validation["wer"] == best.state.best_wer

    changed = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "again"),
                                 f"train.resume={tmp_path / 'last.pt'}", "optim.ema_decay=0.5"])
    with pytest.raises(CheckpointError, match="optim.ema_decay was 0.9 in the checkpoint"):
        train(changed)

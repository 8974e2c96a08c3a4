"""train.init_from: start from another run's weights; a new vocabulary gets a new output."""

from __future__ import annotations

import logging

import pytest
import torch

from deepspeech.config import Config, load_config
from deepspeech.data.text import Vocabulary
from deepspeech.errors import CheckpointError
from deepspeech.features import FeatureStats
from deepspeech.model import DeepSpeech2
from deepspeech.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from deepspeech.training.init_from import init_from_checkpoint, pretrained_feature_stats
from deepspeech.training.trainer import train

SMALL = ["model.conv.channels=[4]", "model.conv.kernels=[[11,5]]", "model.conv.strides=[[2,2]]",
         "model.rnn.layers=1", "model.rnn.hidden=16"]


def saved_model(path, config: Config, vocabulary: Vocabulary) -> DeepSpeech2:
    torch.manual_seed(1)
    model = DeepSpeech2(config.model, 161, len(vocabulary))
    save_checkpoint(Checkpoint(config=config.to_dict(), vocabulary=vocabulary.to_list(),
                               model=model.state_dict()), path)
    return model


def test_same_vocabulary_loads_every_weight(tmp_path):
    config = load_config(None, SMALL)
    source = saved_model(tmp_path / "a.pt", config, Vocabulary.english())
    torch.manual_seed(2)
    model = DeepSpeech2(config.model, 161, len(Vocabulary.english()))
    init_from_checkpoint(model, str(tmp_path / "a.pt"), Vocabulary.english(), config)
    for name, tensor in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_other_vocabulary_reinitializes_only_the_output(tmp_path, caplog):
    config = load_config(None, SMALL)
    source = saved_model(tmp_path / "a.pt", config, Vocabulary.english())
    other = Vocabulary(list(" abc"))
    torch.manual_seed(2)
    model = DeepSpeech2(config.model, 161, len(other))
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with caplog.at_level(logging.WARNING):
        init_from_checkpoint(model, str(tmp_path / "a.pt"), other, config)
    assert "vocabulary differs" in caplog.text
    assert "2 tensor(s) are left re-initialized: output.weight" in caplog.text
    changed = [name for name, tensor in model.state_dict().items()
               if not torch.equal(tensor, fresh[name])]
    kept = [name for name, tensor in model.state_dict().items()
            if torch.equal(tensor, fresh[name]) and not torch.equal(tensor, source.state_dict()[name])]
    assert changed and kept
    assert all(source.state_dict()[name].shape != tensor.shape
               for name, tensor in model.state_dict().items() if name in kept)


def test_another_architecture_is_a_clear_error(tmp_path):
    saved_model(tmp_path / "a.pt", load_config(None, SMALL), Vocabulary.english())
    bigger = load_config(None, [*SMALL, "model.rnn.layers=2"])
    model = DeepSpeech2(bigger.model, 161, len(Vocabulary.english()))
    with pytest.raises(CheckpointError, match=r"a\.pt: weights do not fit this model"):
        init_from_checkpoint(model, str(tmp_path / "a.pt"), Vocabulary.english(), bigger)


def test_a_wider_model_says_in_one_line_how_little_it_kept(tmp_path, caplog):
    saved_model(tmp_path / "a.pt", load_config(None, SMALL), Vocabulary.english())
    wider = load_config(None, [*SMALL, "model.rnn.hidden=32"])
    model = DeepSpeech2(wider.model, 161, len(Vocabulary.english()))
    with caplog.at_level(logging.INFO):
        init_from_checkpoint(model, str(tmp_path / "a.pt"), Vocabulary.english(), wider)
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "are left re-initialized" in warnings[0].getMessage()
    assert "more" in warnings[0].getMessage()
    kept = next(record.getMessage() for record in caplog.records
                if record.getMessage().startswith("initialized from"))
    share = float(kept.split("(")[1].split("%")[0])
    assert 0 < share < 50


def test_a_vocabulary_of_the_same_size_still_gets_a_new_output(tmp_path):
    config = load_config(None, SMALL)
    english = Vocabulary.english()
    source = saved_model(tmp_path / "a.pt", config, english)
    shuffled = Vocabulary([english.to_list()[0], *reversed(english.to_list()[1:])])
    assert len(shuffled) == len(english) and shuffled != english
    torch.manual_seed(2)
    model = DeepSpeech2(config.model, 161, len(shuffled))
    fresh = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    init_from_checkpoint(model, str(tmp_path / "a.pt"), shuffled, config)
    for name, tensor in model.state_dict().items():
        expected = fresh[name] if name.startswith("output.") else source.state_dict()[name]
        assert torch.equal(tensor, expected), name


def test_other_input_features_are_named_but_allowed(tmp_path, caplog):
    saved_model(tmp_path / "a.pt", load_config(None, SMALL), Vocabulary.english())
    other = load_config(None, [*SMALL, "data.sample_rate=8000", "features.normalize=global",
                               "features.spec_augment.freq_masks=0"])
    model = DeepSpeech2(other.model, 161, len(Vocabulary.english()))
    with caplog.at_level(logging.WARNING):
        init_from_checkpoint(model, str(tmp_path / "a.pt"), Vocabulary.english(), other)
    assert ("a.pt was trained on other input: features.normalize 'utterance' there, 'global' "
            "here; data.sample_rate 16000 there, 8000 here") in caplog.text
    assert "spec_augment" not in caplog.text
    caplog.clear()
    same = load_config(None, SMALL)
    init_from_checkpoint(model, str(tmp_path / "a.pt"), Vocabulary.english(), same)
    assert "other input" not in caplog.text


def test_global_statistics_come_along_when_the_input_is_the_same(tmp_path):
    config = load_config(None, [*SMALL, "features.normalize=global"])
    stats = FeatureStats(mean=torch.arange(161.0), std=torch.ones(161))
    save_checkpoint(Checkpoint(config=config.to_dict(), vocabulary=Vocabulary.english().to_list(),
                               model={}, feature_stats=stats.to_dict()), tmp_path / "g.pt")
    kept = pretrained_feature_stats(str(tmp_path / "g.pt"), config)
    assert torch.equal(kept.mean, stats.mean) and torch.equal(kept.std, stats.std)
    # Other input, or weights trained without global statistics: this run computes its own.
    other_rate = load_config(None, [*SMALL, "features.normalize=global", "data.sample_rate=8000"])
    assert pretrained_feature_stats(str(tmp_path / "g.pt"), other_rate) is None
    saved_model(tmp_path / "u.pt", load_config(None, SMALL), Vocabulary.english())
    assert pretrained_feature_stats(str(tmp_path / "u.pt"), config) is None


@pytest.mark.slow
def test_a_fine_tuning_from_global_statistics_keeps_them(tiny_corpus, tiny_overrides, tmp_path):
    first = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "pre"), "train.max_steps=2",
                               "features.normalize=global"])
    train(first)
    # Fine-tuned on other utterances, whose own statistics would differ.
    second = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / "ft"), "train.max_steps=2",
                                "features.normalize=global", f"data.train_manifest={tiny_corpus['val']}",
                                f"train.init_from={tmp_path / 'pre' / 'last.pt'}"])
    train(second)
    before = load_checkpoint(tmp_path / "pre" / "last.pt").feature_stats
    after = load_checkpoint(tmp_path / "ft" / "last.pt").feature_stats
    assert torch.equal(before["mean"], after["mean"]) and torch.equal(before["std"], after["std"])

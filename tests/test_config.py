"""Config: YAML onto dataclasses, overrides, and errors that name the key and the file."""

from __future__ import annotations

import dataclasses
import re

import pytest

from deepspeech.config import (
    Config,
    DecodeConfig,
    load_config,
    load_decode_file,
    load_yaml,
    save_config,
)
from deepspeech.data.text import Vocabulary
from deepspeech.decoding.beam import BeamSearchDecoder, DecoderError
from deepspeech.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_yaml_and_overrides_fill_typed_sections(tmp_path):
    path = write(tmp_path, "model:\n  rnn:\n    hidden: 128\ntrain:\n  epochs: 4\n")
    config = load_config(path, ["train.epochs=3", "model.rnn.kind=lstm", "optim.lr=1e-3"])
    assert config.model.rnn.hidden == 128
    assert config.train.epochs == 3
    assert config.model.rnn.kind == "lstm"
    assert config.optim.lr == pytest.approx(1e-3) and isinstance(config.optim.lr, float)


def test_resolved_config_round_trips(tmp_path):
    config = load_config(None, ["model.conv.channels=[8,16]", "decode.beam=7"])
    save_config(config, tmp_path / "resolved.yaml")
    again = load_config(tmp_path / "resolved.yaml")
    assert again == config
    assert again.digest() == config.digest()
    assert Config.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        ("model:\n  rnn:\n    hiden: 3\n", [], "model.rnn.hiden: unknown key (did you mean 'model.rnn.hidden'?)"),
        ("trian:\n  epochs: 3\n", [], "trian: unknown key (did you mean 'train'?)"),
        ("", ["train.epochs=three"], "train.epochs: expected an integer, got 'three'"),
        ("", ["train.epochs=2.5"], "train.epochs: expected an integer"),
        ("", ["optim.name=adam"], "optim.name: must be one of sgd, adamw; got 'adam'"),
        ("", ["optim.lr=-1"], "optim.lr: must be positive"),
        ("", ["train.sortagrad=maybe"], "train.sortagrad: expected true or false"),
        ("", ["model.rnn.lookahead=4"], "model.rnn.lookahead: a lookahead convolution is for"),
        ("", ["train.micro_batch_size=3"], "train.micro_batch_size: must divide"),
        ("", ["train.batch_seconds=-5"], "train.batch_seconds: must not be negative (0: batches "
                                         "of train.batch_size utterances), got -5"),
        ("", ["train.batch_seconds=.inf"], "train.batch_seconds: expected a finite number"),
        ("", ["train.batch_seconds=60", "train.micro_batch_size=32"],
         "train.micro_batch_size: must not exceed train.batch_size (16), the most utterances a "
         "batch of train.batch_seconds holds; got 32"),
        ("", ["model.conv.kernels=[[3,3]]"], "model.conv.kernels: channels, kernels and strides"),
        ("", ["data.train_manifest=missing.jsonl"], "data.train_manifest: file not found"),
        ("model: 3\n", [], "model: expected a mapping"),
        ("", ["train.epochs.x=1"], "train.epochs: expected an integer, got {'x': 1}"),
        ("", ["optim.lr=fast"], "optim.lr: expected a number, got 'fast'"),
        ("", ["optim.lr=nan"], "optim.lr: expected a finite number, got nan"),
        ("optim:\n  grad_clip: .inf\n", [], "optim.grad_clip: expected a finite number, got inf"),
        ("", ["data.augment.speed=[0.9,inf]"], "data.augment.speed[1]: expected a finite number"),
        ("", ["optim.ema_decay=1"], "optim.ema_decay: must be in [0, 1)"),
        ("", ["data.augment.vtlp=[0.5,1.1]"], "data.augment.vtlp: must lie in [0.7, 1.3]"),
        ("", ["data.augment.vtlp=[1.1,0.9]"], "data.augment.vtlp: must be [low, high]"),
        ("", ["data.augment.trim_probability=1.5"], "data.augment.trim_probability: must be in"),
        ("", ["data.augment.eq_probability=-0.1"], "data.augment.eq_probability: must be in"),
        ("", ["data.augment.eq_db=0"], "data.augment.eq_db: must lie in (0, 30]"),
        ("", ["data.augment.clip_probability=2"], "data.augment.clip_probability: must be in"),
        ("", ["data.augment.clip_db=[0,50]"], "data.augment.clip_db: must lie in [0, 40]"),
        ("", ["data.augment.clip_db=[10,5]"], "data.augment.clip_db: must be [low, high]"),
        ("", ["decode.vtln=[1.1,0.9]"], "decode.vtln: must be [low, high] with low <= high"),
        ("", ["decode.vtln=[0.5,1.1]"], "decode.vtln: must lie in [0.7, 1.3]"),
        ("", ["decode.vtln_step=0"], "decode.vtln_step: must lie in [0.001, 0.6]"),
        ("", ["decode.beam=100000000"], "decode.beam: must lie in [1, 5000], got 100000000"),
        ("", ["decode.beam=0"], "decode.beam: must lie in [1, 5000], got 0"),
        ("decode:\n  lm_weight: 1.0e308\n", [], "decode.lm_weight: must lie in [0, 100]"),
        ("", ["decode.lm_weight=-1"], "decode.lm_weight: must lie in [0, 100], got -1"),
        ("", ["decode.word_bonus=-1e9"], "decode.word_bonus: must lie in [-100, 100]"),
        ("", ["decode.beam_threshold=-5"], "decode.beam_threshold: must be at least 0, got -5"),
        ("", ["decode.beam_threshold=.inf"], "decode.beam_threshold: expected a finite number"),
    ],
)
def test_errors_name_key_and_file(tmp_path, text, overrides, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_config(path, overrides)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_malformed_override():
    with pytest.raises(ConfigError, match="override 'train.epochs' must look like key=value"):
        load_config(None, ["train.epochs"])


def test_broken_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 3\n  seed: [1, 2\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line \d+, column \d+: invalid YAML"):
        load_config(path)


def test_a_key_given_twice_is_an_error_not_a_silent_replacement(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 1\n  output_dir: runs/a\ntrain:\n  seed: 4\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line 4, column 1: invalid YAML: key 'train' "
                                          r"given twice \(first on line 1\)"):
        load_config(path)
    with pytest.raises(ConfigError, match="key 'hidden' given twice"):
        load_config(None, ["model.rnn={hidden: 8, hidden: 16}"])


def test_merge_keys_may_still_be_overridden(tmp_path):
    path = write(tmp_path, "base: &base {epochs: 2, seed: 1}\ntrain:\n  <<: *base\n  seed: 5\n")
    assert load_yaml(path)["train"] == {"epochs": 2, "seed": 5}


def test_a_config_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"train:\n  epochs: 3  # caf\xe9\n")
    with pytest.raises(ConfigError, match=r"c\.yaml line 2: not UTF-8 text"):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", ["quickstart", "ds2", "an4", "fsdd", "english"])
def test_shipped_configs_are_valid(name):
    config = load_config(f"configs/{name}.yaml", check_files=False)
    assert config.train.output_dir


def test_deterministic_mode_needs_fixed_micro_batches():
    with pytest.raises(ConfigError, match="distributed.deterministic: needs train.micro_batch"):
        load_config(None, ["distributed.deterministic=true"])
    assert load_config(None, ["distributed.deterministic=true",
                              "train.micro_batch_size=2"]).distributed.deterministic


def test_batches_by_audio_take_any_micro_batch_size_up_to_the_cap():
    config = load_config(None, ["train.batch_seconds=90", "train.batch_size=64",
                                "train.micro_batch_size=5"])
    assert (config.train.batch_seconds, config.train.micro_batch_size) == (90.0, 5)
    with pytest.raises(ConfigError, match="distributed.deterministic: needs train.micro_batch"):
        load_config(None, ["train.batch_seconds=90", "distributed.deterministic=true"])


def test_a_decode_file_gives_its_decode_section_and_nothing_else(tmp_path):
    path = tmp_path / "decode.yaml"
    path.write_text("# from decode tune\ndecode:\n  mode: beam\n  lm_weight: 1.5\n")
    assert load_decode_file(path) == {"mode": "beam", "lm_weight": 1.5}
    path.write_text("decode: {mode: beam}\ntrain: {epochs: 3}\nmodel: {}\n")
    with pytest.raises(ConfigError, match="decode.yaml: only a decode section is read here, "
                                          "not model, train"):
        load_decode_file(path)
    path.write_text("decode: beam\n")
    with pytest.raises(ConfigError, match="decode.yaml: no decode section"):
        load_decode_file(path)


def test_decode_bounds_accept_what_a_tuning_grid_could_want():
    low = load_config(None, ["decode.beam=1", "decode.lm_weight=0", "decode.word_bonus=-100",
                             "decode.beam_threshold=0"]).decode
    high = load_config(None, ["decode.beam=5000", "decode.lm_weight=100",
                              "decode.word_bonus=100", "decode.beam_threshold=1e6"]).decode
    assert (low.beam, low.lm_weight, low.word_bonus, low.beam_threshold) == (1, 0, -100, 0)
    assert (high.beam, high.lm_weight, high.word_bonus, high.beam_threshold) == (
        5000, 100, 100, 1e6)


def test_the_decoder_holds_settings_made_in_code_to_the_same_bounds():
    # decode tune builds its settings with dataclasses.replace, past the file's checks.
    for change, message in [({"beam": 10**8}, "decode.beam: must lie in [1, 5000]"),
                            ({"lm_weight": 1e308}, "decode.lm_weight: must lie in [0, 100]"),
                            ({"beam_threshold": -5.0}, "decode.beam_threshold: must be at least 0")]:
        config = dataclasses.replace(DecodeConfig(mode="beam"), **change)
        with pytest.raises(DecoderError, match=re.escape(message)):
            BeamSearchDecoder(Vocabulary.english(), config)

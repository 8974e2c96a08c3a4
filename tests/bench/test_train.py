"""deepspeech bench train: figures counted from the model's shapes, in a chosen precision."""

from __future__ import annotations

import json

import pytest

from deepspeech.cli import main

pytestmark = pytest.mark.slow  # measures a matmul peak first

TINY = """
features: {kind: mel, n_mels: 20}
model:
  conv: {channels: [4], kernels: [[11, 5]], strides: [[2, 2]]}
  rnn: {layers: 1, hidden: 16}
train: {precision: bf16}
"""


def test_bench_train_prints_throughput_and_fraction_of_peak(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    status = main(["bench", "train", "--configs", str(config), "--batch-size", "2",
                   "--seconds", "1", "--steps", "2", "--threads", "1", "--precision", "fp32",
                   "--json"])
    assert status == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["precision"] == "fp32" and result["batch_size"] == 2
    assert result["parameters"] > 0 and result["gflop_per_step"] > 0
    assert result["audio_seconds_per_second"] > 0
    assert 0 < result["fraction_of_peak"] < 1


def test_bench_train_applies_overrides_to_the_config(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    arguments = ["bench", "train", "--configs", str(config), "--batch-size", "2", "--seconds",
                 "1", "--steps", "1", "--threads", "1", "--precision", "fp32", "--json"]
    assert main(arguments) == 0
    gru = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*arguments, "--set", "model.rnn.kind=lstm", "model.rnn.hidden=24"]) == 0
    lstm = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert lstm["overrides"][:2] == ["model.rnn.kind=lstm", "model.rnn.hidden=24"]
    # 4 gates of 24 against 3 of 16: more weights and more work per step
    assert lstm["parameters"] > gru["parameters"]
    assert lstm["gflop_per_step"] > gru["gflop_per_step"]
    assert main([*arguments, "--set", "model.rnn.kind=transformer"]) != 0
    assert "(with overrides): model.rnn.kind: must be one of" in capsys.readouterr().err

"""``deepspeech bench rnn``: its options everywhere; the timing itself only on a GPU."""

from __future__ import annotations

import pytest
import torch

from deepspeech.cli import main

TINY = ["bench", "rnn", "--batch-size", "5", "--frames", "7", "--hidden", "40", "--layers", "2",
        "--input-size", "24", "--repeats", "1"]


def test_the_default_length_is_what_ds2_runs_for_ten_seconds():
    from pathlib import Path

    from deepspeech.bench.rnn import DS2_FRAMES_AT_10_S
    from deepspeech.config import load_config
    from deepspeech.model.frames import model_output_frames

    ds2 = Path(__file__).resolve().parents[2] / "configs" / "ds2.yaml"
    config = load_config(str(ds2), [], check_files=False)
    frames = model_output_frames(config, config.data.sample_rate, 29)
    assert frames(10.0) == DS2_FRAMES_AT_10_S
    assert (config.model.rnn.hidden, config.model.rnn.layers) == (1024, 5)


def test_options_are_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "rnn", "--hidden", "0"])
    assert exit_info.value.code == 2
    assert "argument --hidden: must be a positive integer" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the bench runs")
def test_without_a_gpu_it_says_so_in_one_line(capsys):
    assert main(TINY) == 2
    assert capsys.readouterr().err.strip() == (
        "deepspeech bench: error: bench rnn times GPU kernels and needs a CUDA GPU; "
        "none is available")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_persistent_kernel_agrees_with_cudnn_and_repeats_its_bits(capsys):
    assert main(TINY) == 0
    out = capsys.readouterr().out
    assert "persistent bitwise the same on a second run: True" in out
    timed = {" ".join(line.split()[:2]) for line in out.splitlines() if " ms " in line}
    assert timed == {"cudnn eager", "persistent eager", "cudnn graphed", "persistent graphed"}

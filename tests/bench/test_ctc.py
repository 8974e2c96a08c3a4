"""``deepspeech bench ctc``: its options everywhere; the timing itself only on a GPU."""

from __future__ import annotations

import pytest
import torch

from deepspeech.cli import main

pytest.importorskip("triton")  # a dependency of PyTorch's CUDA builds, which the project pins

TINY = ["bench", "ctc", "--batch-size", "4", "--frames", "40", "--labels", "8",
        "--threads", "1", "--repeats", "1"]


def test_options_are_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "ctc", "--frames", "0"])
    assert exit_info.value.code == 2
    assert "argument --frames: must be a positive integer" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the bench runs")
def test_without_a_gpu_it_says_so_in_one_line(capsys):
    assert main(TINY) == 2
    assert capsys.readouterr().err.strip() == (
        "deepspeech bench: error: bench ctc times the GPU kernels and needs a CUDA GPU; "
        "none is available")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_kernels_match_the_cpu_kernel_bit_for_bit_twice(capsys):
    assert main(TINY) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["cpu", "gpu", "pytorch"]
    relative = float(lines[4].split(";")[0].split()[-1])
    assert relative < 1e-5
    assert lines[5].endswith("bitwise the same on a second run: True")

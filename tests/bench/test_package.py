"""``deepspeech bench package``: a package's and its checkpoint's sizes and load times."""

from __future__ import annotations

from deepspeech.bench.package import size_of
from deepspeech.cli import main


def test_sizes_and_load_times_of_both(tiny_checkpoint, tmp_path, capsys):
    package = tmp_path / "package"
    assert main(["export", "--format", "package", "--checkpoint", str(tiny_checkpoint),
                 "-o", str(package)]) == 0
    capsys.readouterr()
    assert main(["bench", "package", str(tiny_checkpoint), str(package), "--repeats", "1"]) == 0
    *loads, ratio = capsys.readouterr().out.splitlines()
    for line, path in zip(loads, (tiny_checkpoint, package), strict=True):
        assert line.startswith(f"{path}: {size_of(path):,} bytes, load median ")
        assert float(line.split()[-2]) > 0  # ms
    assert ratio == f"package / checkpoint size: {size_of(package) / size_of(tiny_checkpoint):.3f}"

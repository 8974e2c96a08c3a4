"""``deepspeech bench memory``: what forked workers copy, and the trainer's peak by size."""

from __future__ import annotations

import re
import sys

import pytest

from deepspeech.cli import main

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps_rollup")


def test_forked_workers_copy_the_objects_and_not_the_columns(capsys):
    assert main(["bench", "memory", "workers", "--utterances", "20000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "20,000 utterances; two forked workers each read every other row"
    copied = {}
    for line in out[1:]:
        name = line.split("  corpus")[0].strip()
        first, second = re.search(r"workers: +([\d,]+) \+ +([\d,]+) B", line).groups()
        copied[name] = int(first.replace(",", "")) + int(second.replace(",", ""))
    assert list(copied) == ["objects (before)", "columns"]
    # Reference counts make each worker copy the objects it reads; columns hold none.
    assert copied["objects (before)"] > 300 and copied["columns"] < copied["objects (before)"] / 4


@pytest.mark.parametrize("sizes", ["0,10", "10,x"])
def test_sizes_are_checked_before_any_run(sizes, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "memory", "train", "--sizes", sizes])
    assert "argument --sizes: must be positive integers separated by commas" in \
        capsys.readouterr().err


@pytest.mark.slow  # two quickstart trainings to step one per size
def test_train_reports_a_peak_cold_and_warm_per_size_and_the_growth(tmp_path, capsys):
    assert main(["bench", "memory", "train", "--sizes", "20,40", "--folder",
                 str(tmp_path)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["utterances", "run", "seconds", "peak", "RSS", "per",
                              "utterance"]
    assert [row.split()[:2] for row in rows] == [["20", "cold"], ["20", "warm"],
                                                 ["40", "cold"], ["40", "warm"]]
    assert all(int(row.split()[3].replace(",", "")) > 100 for row in rows)  # MiB
    assert rows[-1].endswith(" B") and not rows[1].endswith(" B")
    assert (tmp_path / "d40" / "big.jsonl").read_text().count("\n") == 40

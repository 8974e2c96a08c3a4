"""``deepspeech bench resample``: each rate's path, time and peak memory, as text and JSON."""

from __future__ import annotations

import json

from deepspeech.cli import main


def test_odd_and_usual_rates_are_measured_on_their_paths(capsys):
    assert main(["bench", "resample", "--rates", "47999", "44100", "--seconds", "0.3",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["seconds"], report["to"]) == (0.3, 16000)
    assert [(row["rate"], row["path"]) for row in report["rates"]] == [
        (47999, "per-output"), (44100, "polyphase")]
    for row in report["rates"]:
        assert row["file_s"] > 0 and row["stream_s"] > 0
        # 47,999 Hz once took 13 GB; each path now adds tens of MB at most.
        assert 0 <= row["file_mb"] < 200 and 0 <= row["stream_mb"] < 200


def test_the_table_has_a_row_per_rate(capsys):
    assert main(["bench", "resample", "--rates", "8001", "--to", "8000", "--seconds",
                 "0.1"]) == 0
    heading, columns, row = capsys.readouterr().out.splitlines()
    assert heading == "resampling 0.1 s of noise to 8000 Hz, 1 thread (stream: 0.1 s chunks)"
    assert columns.split() == ["rate", "path", "file", "s", "file", "MB", "stream", "s",
                               "stream", "MB"]
    assert row.split()[:2] == ["8001", "per-output"]

"""``deepspeech bench batching``: both plans of a manifest and of the synthetic corpus."""

from __future__ import annotations

import json

import pytest

from deepspeech.bench.batching import synthetic_durations
from deepspeech.cli import main


def _tables(out: str) -> dict[str, list[list[str]]]:
    """Each corpus's heading -> its plan rows, split into words."""
    tables: dict[str, list[list[str]]] = {}
    for block in out.strip().split("\n\n"):
        heading, _, *rows = block.strip().splitlines()
        tables[heading] = [row.split() for row in rows]
    return tables


def test_synthetic_durations_are_repeatable_and_between_1_and_30_s():
    durations = synthetic_durations(500, seed=3)
    assert durations == synthetic_durations(500, seed=3) != synthetic_durations(500, seed=4)
    assert min(durations) >= 1.0 and max(durations) <= 30.0


def test_a_manifest_and_the_synthetic_corpus_are_planned_both_ways(tmp_path, capsys):
    manifest = tmp_path / "m.jsonl"
    durations = [1.0 + (i % 7) for i in range(40)]
    manifest.write_text("".join(json.dumps({"audio_filepath": f"{i}.wav", "text": "a",
                                            "duration": d}) + "\n"
                                for i, d in enumerate(durations)))
    assert main(["bench", "batching", str(manifest), "--batch-size", "4", "--epochs", "2",
                 "--synthetic", "100"]) == 0
    tables = _tables(capsys.readouterr().out)
    assert list(tables) == [
        f"{manifest}: 40 utterances, 0.04 h, 1.00-7.00 s",
        "synthetic, 100 utterances of 1-30 s: 100 utterances, "
        f"{sum(synthetic_durations(100, 0)) / 3600:.2f} h, "
        f"{min(synthetic_durations(100, 0)):.2f}-{max(synthetic_durations(100, 0)):.2f} s"]
    rows = tables[f"{manifest}: 40 utterances, 0.04 h, 1.00-7.00 s"]
    fixed, by_audio = rows[:2], rows[2:]
    assert [row[:3] for row in fixed] == [["batch_size=4", "1", "10"], ["batch_size=4", "2", "10"]]
    limit = float(by_audio[0][0].removeprefix("batch_seconds="))
    assert by_audio[0][1:3] == ["(cap", "32)"]
    for row in by_audio:  # the largest batch's audio stays under the limit the plan was given
        assert float(row[-2]) <= limit
    # the limit was chosen so that a shuffled epoch has at most the fixed plan's steps
    assert int(by_audio[1][4]) <= 10


@pytest.mark.parametrize("argv, flag", [(["--batch-size", "0"], "--batch-size"),
                                        (["--synthetic", "-1"], "--synthetic")])
def test_options_are_refused_by_name(argv, flag, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "batching", *argv])
    assert f"argument {flag}: must be" in capsys.readouterr().err

"""deepspeech plot: curves of one run, and several runs' WER against minutes."""

from __future__ import annotations

import json

import pytest

from deepspeech.cli import main
from deepspeech.errors import DeepSpeechError
from deepspeech.plots import (
    plot_curves,
    plot_wer_against_minutes,
    training_stages,
    wer_against_minutes,
)

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(folder, minutes_per_epoch: float):
    folder.mkdir()
    records = []
    for epoch in range(1, 4):
        records.append({"step": 10 * epoch, "time": 1000.0 + 60 * minutes_per_epoch * epoch,
                        "train/loss": 50.0 / epoch})
        records.append({"step": 10 * epoch, "time": 1001.0 + 60 * minutes_per_epoch * epoch,
                        "val/wer": 0.9 / epoch, "val/cer": 0.5 / epoch, "val/loss": 40.0 / epoch})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_curves_of_one_run(tmp_path):
    run = fake_run(tmp_path / "a", 1.0)
    written = plot_curves(run)
    assert [path.name for path in written] == ["loss.png", "error_rates.png"]
    assert all(path.read_bytes().startswith(PNG) for path in written)


def test_compare_runs_against_minutes(tmp_path, capsys):
    runs = [fake_run(tmp_path / "a", 1.0), fake_run(tmp_path / "b", 2.5)]
    output = tmp_path / "out" / "wer.png"
    assert main(["plot", *map(str, runs), "--compare", str(output)]) == 0
    assert capsys.readouterr().out.strip() == str(output)
    assert output.read_bytes().startswith(PNG)


def test_a_run_without_validations_is_left_out_of_a_comparison(tmp_path, caplog):
    validated = fake_run(tmp_path / "a", 1.0)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.jsonl").write_text(
        json.dumps({"step": 10, "time": 1000.0, "train/loss": 5.0}) + "\n")
    output = plot_wer_against_minutes([validated, tmp_path / "b"], tmp_path / "wer.png")
    assert output.read_bytes().startswith(PNG)
    assert f"no validation WER recorded: {tmp_path / 'b'}" in caplog.text
    with pytest.raises(DeepSpeechError, match="no validation WER recorded in .*b"):
        plot_wer_against_minutes([tmp_path / "b"], tmp_path / "none.png")


def test_a_run_that_logged_nothing_yet_says_so(tmp_path):
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "metrics.jsonl").write_text("")
    with pytest.raises(DeepSpeechError, match="metrics.jsonl: nothing logged yet"):
        plot_curves(tmp_path / "new")


def test_a_folder_without_metrics_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeepSpeechError, match="empty: no metrics.jsonl"):
        plot_wer_against_minutes([tmp_path / "empty"], tmp_path / "x.png")
    with pytest.raises(SystemExit, match="--compare"):
        main(["plot", str(tmp_path / "a"), str(tmp_path / "b")])


def test_a_fine_tuning_run_continues_its_pre_training_clock(tmp_path):
    pre = fake_run(tmp_path / "pre", 1.0)
    fine = fake_run(tmp_path / "fine", 2.0)
    (fine / "config.yaml").write_text(f"train:\n  init_from: {pre / 'last.pt'}\n")
    assert training_stages(fine) == [pre, fine]
    minutes, wers = wer_against_minutes(fine)
    # pre: validations 1/60, 1 + 1/60, 2 + 1/60 minutes after its first record, which
    # it left 2 + 1/60 minutes later; fine's own start 2 minutes per epoch after that
    expected = [1 / 60, 1 + 1 / 60, 2 + 1 / 60]
    expected += [2 + 1 / 60 + offset for offset in (1 / 60, 2 + 1 / 60, 4 + 1 / 60)]
    assert minutes == pytest.approx(expected)
    assert wers == pytest.approx([90.0, 45.0, 30.0] * 2)


def test_a_checkpoint_outside_any_run_starts_the_clock_at_zero(tmp_path):
    fine = fake_run(tmp_path / "fine", 1.0)
    (fine / "config.yaml").write_text(f"train:\n  init_from: {tmp_path / 'elsewhere.pt'}\n")
    assert training_stages(fine) == [fine]
    assert wer_against_minutes(fine)[0][0] == pytest.approx(1 / 60)


def test_a_broken_run_config_is_named(tmp_path):
    fine = fake_run(tmp_path / "fine", 1.0)
    (fine / "config.yaml").write_text("train: [unclosed\n")
    with pytest.raises(DeepSpeechError, match="fine/config.yaml: not valid YAML"):
        training_stages(fine)

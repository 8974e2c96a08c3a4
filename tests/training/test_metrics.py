"""metrics.jsonl: a run killed while writing a line can still be plotted and resumed."""

from __future__ import annotations

import json
import logging

import pytest

from deepspeech.errors import DeepSpeechError
from deepspeech.training.metrics import MetricsLogger, read_metrics


def _write(path, records, tail: str = "") -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + tail)


def test_a_cut_off_last_line_is_dropped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    _write(path, [{"step": 1, "train/loss": 3.0}], tail='{"step": 2, "train/lo')
    with caplog.at_level(logging.WARNING):
        assert read_metrics(path) == [{"step": 1, "train/loss": 3.0}]
    assert "metrics.jsonl:2: dropped a cut-off last line" in caplog.text


@pytest.mark.parametrize("text, message", [
    ('{"step": 1\n{"step": 2}\n', "metrics.jsonl:1: not a metrics record"),
    ('[1, 2]\n{"step": 2}\n', "metrics.jsonl:1: not a metrics record \\(a JSON object\\)"),
])
def test_a_bad_line_before_the_end_is_an_error_naming_it(tmp_path, text, message):
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    with pytest.raises(DeepSpeechError, match=message):
        read_metrics(path)


def test_a_resume_keeps_the_history_up_to_its_step_and_drops_the_cut_line(tmp_path):
    records = [{"step": step, "train/loss": 10.0 / step} for step in (1, 2, 3, 4)]
    _write(tmp_path / "metrics.jsonl", records, tail='{"step": 5, "tra')
    logger = MetricsLogger(tmp_path, resume_step=2)
    logger.log(3, {"train/loss": 1.0})
    logger.close()
    kept = read_metrics(tmp_path / "metrics.jsonl")
    assert [record["step"] for record in kept] == [1, 2, 3]
    assert kept[:2] == records[:2] and kept[2]["train/loss"] == 1.0

"""The bootstrap over utterances: intervals that behave as the sampling theory says."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from deepspeech.errors import ReportError
from deepspeech.evaluation import bootstrap
from deepspeech.evaluation.bootstrap import compare, wer_interval
from deepspeech.evaluation.evaluate import EvalResult, UtteranceResult, read_report
from deepspeech.evaluation.metrics import ErrorCounts


def _bernoulli_errors(count: int, rate: float, seed: int) -> list[int]:
    return (np.random.default_rng(seed).random(count) < rate).astype(int).tolist()


def test_the_interval_matches_the_binomial_spread_of_one_word_utterances():
    errors = _bernoulli_errors(400, 0.1, seed=1)
    wer = sum(errors) / 400
    interval = wer_interval(errors, [1] * 400)
    half_width = 1.96 * math.sqrt(wer * (1 - wer) / 400)
    assert interval.low < wer < interval.high
    assert interval.low == pytest.approx(wer - half_width, abs=0.006)
    assert interval.high == pytest.approx(wer + half_width, abs=0.006)
    assert interval.confidence == 0.95


def test_the_interval_is_reproducible_and_narrows_with_more_utterances():
    errors, words = _bernoulli_errors(50, 0.2, seed=2), [3] * 50
    once = wer_interval(errors, words)
    assert wer_interval(errors, words) == once
    four_times = wer_interval(errors * 4, words * 4)
    assert four_times.high - four_times.low < 0.6 * (once.high - once.low)
    assert wer_interval([0] * 20, [5] * 20) == bootstrap.Interval(0.0, 0.0, 0.95)


def test_the_memory_bound_does_not_change_the_figures(monkeypatch):
    errors, words = _bernoulli_errors(37, 0.3, seed=3), list(range(1, 38))
    whole = wer_interval(errors, words, resamples=500)
    monkeypatch.setattr(bootstrap, "_DRAWS_PER_BLOCK", 37 * 7)  # blocks of 7 resamples
    assert wer_interval(errors, words, resamples=500) == whole


def test_a_system_that_fixes_every_error_is_better_in_every_resample():
    errors_a = _bernoulli_errors(60, 0.3, seed=4)
    words = [2] * 60
    fixed = compare(errors_a, [0] * 60, words)
    assert fixed.probability_b_better == pytest.approx(1.0, abs=1e-3)
    assert fixed.difference.high < 0 and fixed.wer_b == 0.0
    assert fixed.wer_a == pytest.approx(sum(errors_a) / 120)
    same = compare(errors_a, errors_a, words)
    assert same.probability_b_better == 0.0
    assert (same.difference.low, same.difference.high) == (0.0, 0.0)


def test_one_utterance_of_difference_is_not_a_significant_one():
    errors_a = _bernoulli_errors(80, 0.25, seed=5)
    errors_b = list(errors_a)
    errors_b[errors_a.index(1)] = 0
    result = compare(errors_a, errors_b, [4] * 80)
    assert 0.5 < result.probability_b_better < 0.7
    assert result.difference.low < 0 <= result.difference.high


@pytest.mark.parametrize("call, message", [
    (lambda: wer_interval([1, 2], [3]), "one count per utterance"),
    (lambda: wer_interval([], []), "no utterances"),
    (lambda: wer_interval([-1], [3]), "must not be negative"),
    (lambda: wer_interval([1], [3], confidence=1.0), "confidence"),
])
def test_bad_counts_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _result(*items: tuple[str, str, int, int]) -> EvalResult:
    details = [UtteranceResult(path, reference, "x", errors, words, errors, 4 * words)
               for path, reference, errors, words in items]
    total = ErrorCounts(sum(item[2] for item in items), 0, 0, sum(item[3] for item in items))
    return EvalResult(total, total, 0.0, len(details), 1.0, 1.0, details)


def test_a_report_round_trips_and_compares(tmp_path):
    baseline = _result(("a.wav", "one two", 2, 2), ("b.wav", "three", 1, 1))
    report = tmp_path / "baseline.jsonl"
    baseline.write_report(report)
    assert read_report(report) == baseline.details
    better = _result(("b.wav", "three", 0, 1), ("a.wav", "one two", 0, 2))
    comparison = better.compare_with(read_report(report), str(report))
    assert comparison.wer_a == 1.0 and comparison.wer_b == 0.0
    summary = better.summary()
    assert summary["wer_interval"] == {"low": 0.0, "high": 0.0, "confidence": 0.95}


def test_segments_of_one_recording_are_told_apart_by_their_offset(tmp_path):
    def segments(errors: tuple[int, int]) -> EvalResult:
        result = _result(("long.wav", "one", errors[0], 1), ("long.wav", "two", errors[1], 1))
        for item, offset in zip(result.details, (0.0, 12.5), strict=True):
            item.offset = offset
        return result

    report = tmp_path / "segments.jsonl"
    segments((1, 1)).write_report(report)
    assert [item.key for item in read_report(report)] == ["long.wav@0s", "long.wav@12.5s"]
    assert segments((0, 1)).compare_with(read_report(report), str(report)).wer_b == 0.5


@pytest.mark.parametrize("baseline, message", [
    ([("a.wav", "one two", 2, 2)], "does not score b.wav"),
    ([("a.wav", "one two", 2, 2), ("b.wav", "tree", 1, 1)], "another reference for b.wav"),
    ([("a.wav", "one two", 2, 2), ("b.wav", "three", 1, 1), ("c.wav", "four", 0, 1)],
     "scores 1 utterance\\(s\\) not scored here, the first c.wav"),
    ([("a.wav", "one two", 2, 2), ("a.wav", "one two", 2, 2), ("b.wav", "three", 0, 1)],
     "scores a.wav twice"),
])
def test_a_report_of_other_utterances_is_refused(baseline, message):
    here = _result(("a.wav", "one two", 0, 2), ("b.wav", "three", 0, 1))
    with pytest.raises(ReportError, match=f"old.jsonl: {message}"):
        here.compare_with(_result(*baseline).details, "old.jsonl")


def test_a_broken_report_names_its_line(tmp_path):
    good = json.dumps({"audio_filepath": "a.wav", "reference": "one", "hypothesis": "one",
                       "word_errors": 0, "reference_words": 1, "char_errors": 0,
                       "reference_chars": 3})
    cases = {"notjson": f"{good}\n{{oops\n", "missing": f'{good}\n{{"audio_filepath": "b"}}\n',
             "negative": good.replace('"word_errors": 0', '"word_errors": -1') + "\n",
             "empty": "\n"}
    expected = {"notjson": "notjson.jsonl:2: not a report line",
                "missing": "missing.jsonl:2: not a report line .*missing char_errors",
                "negative": "negative.jsonl:1: error and reference counts",
                "empty": "empty.jsonl: the report is empty"}
    for name, text in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(text)
        with pytest.raises(ReportError, match=expected[name]):
            read_report(path)
    with pytest.raises(ReportError, match="absent.jsonl: cannot read"):
        read_report(tmp_path / "absent.jsonl")

"""The confidence metrics on hand-made cases: word correctness, ROC AUC, reliability bins."""

from __future__ import annotations

import pytest

from deepspeech.evaluation.confidence import (
    reliability,
    roc_auc,
    summarize,
    word_correctness,
)


def test_a_word_is_right_when_aligned_to_an_equal_reference_word():
    assert word_correctness("the cat sat", "the cat sat") == [True, True, True]
    assert word_correctness("the cat sat", "the cot sat") == [True, False, True]  # substituted
    assert word_correctness("the cat sat", "the big cat sat") == [True, False, True, True]
    assert word_correctness("the cat sat", "the sat") == [True, True]  # a deletion: no word
    assert word_correctness("", "noise") == [False]
    assert word_correctness("the cat", "") == []


def test_auc_is_one_for_perfect_separation_half_for_ties_and_counts_pairs():
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5], [True, False, True]) == 0.5
    # right {0.9, 0.7} against wrong {0.8, 0.6}: 3 of the 4 pairs are ordered right
    assert roc_auc([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == 0.75
    # a tie between a right and a wrong word counts half: (1 + 0.5) / 2
    assert roc_auc([0.9, 0.4, 0.4], [True, True, False]) == 0.75
    assert roc_auc([0.9, 0.8], [True, True]) is None  # nothing to separate
    with pytest.raises(ValueError, match="labels"):
        roc_auc([0.5], [True, False])


def test_reliability_bins_give_count_mean_confidence_and_fraction_right():
    confidences = [0.05, 0.15, 0.12, 0.95, 1.0, 0.91]
    correct = [False, True, False, True, True, False]
    table = reliability(confidences, correct, bins=10)
    assert [(row.low, row.count) for row in table] == [(0.0, 1), (0.1, 2), (0.9, 3)]
    assert table[1].mean_confidence == pytest.approx(0.135)
    assert table[2].mean_confidence == pytest.approx((0.95 + 1.0 + 0.91) / 3)  # 1 is in the top bin
    assert [row.fraction_correct for row in table] == pytest.approx([0.0, 0.5, 2 / 3])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        reliability([1.5], [True])


def test_the_summary_counts_words_and_weighs_each_bin_s_gap_by_its_words():
    summary = summarize([0.05, 0.15, 0.12, 0.95, 1.0, 0.91],
                        [False, True, False, True, True, False])
    assert (summary.words, summary.wrong) == (6, 3)
    gaps = 1 * 0.05 + 2 * abs(0.135 - 0.5) + 3 * abs(2.86 / 3 - 2 / 3)
    assert summary.calibration_error == pytest.approx(gaps / 6)
    assert summary.auc == pytest.approx(roc_auc([0.05, 0.15, 0.12, 0.95, 1.0, 0.91],
                                                [False, True, False, True, True, False]))
    assert summary.to_dict()["bins"][0] == {"low": 0.0, "high": 0.1, "count": 1,
                                            "mean_confidence": 0.05, "fraction_correct": 0.0}
    empty = summarize([], [])
    assert (empty.words, empty.auc, empty.bins, empty.calibration_error) == (0, None, [], 0.0)

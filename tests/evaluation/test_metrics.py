"""Error counts, substitution pairs and the per-speaker breakdown of an evaluation."""

from __future__ import annotations

import pytest

from deepspeech.evaluation.evaluate import EvalResult, UtteranceResult
from deepspeech.evaluation.metrics import (
    ErrorCounts,
    char_errors,
    word_errors,
    word_substitutions,
)


def test_word_and_char_errors_count_each_edit_over_the_whole_set():
    words = word_errors(["one two three", "four five"], ["one too three", "four five six"])
    assert words == ErrorCounts(substitutions=1, deletions=0, insertions=1, reference_length=5)
    assert words.rate == pytest.approx(2 / 5)
    chars = char_errors(["ab"], ["b"])
    assert chars == ErrorCounts(substitutions=0, deletions=1, insertions=0, reference_length=2)


def test_an_empty_reference_counts_every_hypothesis_word_as_inserted():
    assert word_errors([""], ["a b"]) == ErrorCounts(0, 0, 2, 0)
    assert word_errors([""], ["a b"]).rate == float("inf")


def test_substitutions_pair_words_one_to_one_and_ignore_deletions_and_insertions():
    pairs = word_substitutions(
        ["april thirtieth nineteen x", "three three", "a b c", "", "one two"],
        ["epthe thirtiet sintwoen x", "nine nine", "a x c d", "extra", "one"],
    )
    assert pairs == {("april", "epthe"): 1, ("thirtieth", "thirtiet"): 1,
                     ("nineteen", "sintwoen"): 1, ("three", "nine"): 2, ("b", "x"): 1}


def test_substitutions_need_one_hypothesis_per_reference():
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        word_substitutions(["a"], [])


def _utterance(speaker: str | None, reference: str, hypothesis: str) -> UtteranceResult:
    words = word_errors([reference], [hypothesis])
    chars = char_errors([reference], [hypothesis])
    return UtteranceResult(f"{speaker}-{reference}.wav", reference, hypothesis, words.errors,
                           words.reference_length, chars.errors, chars.reference_length,
                           speaker)


def _result(details: list[UtteranceResult]) -> EvalResult:
    references = [item.reference for item in details]
    hypotheses = [item.hypothesis for item in details]
    return EvalResult(wer=word_errors(references, hypotheses),
                      cer=char_errors(references, hypotheses), loss=0.0,
                      utterances=len(details), audio_seconds=1.0, elapsed_seconds=0.1,
                      details=details)


def test_by_speaker_pools_each_speakers_words_and_puts_the_most_errors_first():
    result = _result([
        _utterance("jackson", "three one", "nine one"),
        _utterance("jackson", "seven two", "five four"),
        _utterance("george", "two four six eight", "two four six eight"),
        _utterance("theo", "six", "sex"),
        _utterance(None, "eight", "ate"),
    ])
    speakers = result.by_speaker()
    # theo's one word is all wrong, but jackson made more of the corpus's errors.
    assert list(speakers) == ["jackson", "theo", "george"]
    jackson_chars = char_errors(["three one", "seven two"], ["nine one", "five four"])
    assert speakers["jackson"] == {"utterances": 2, "word_errors": 3, "words": 4,
                                   "wer": pytest.approx(3 / 4),
                                   "cer": pytest.approx(jackson_chars.rate)}
    assert speakers["theo"]["wer"] == pytest.approx(1.0)
    assert speakers["george"] == {"utterances": 1, "word_errors": 0, "words": 4,
                                  "wer": 0.0, "cer": 0.0}


def test_summary_lists_speakers_and_the_most_frequent_substitutions_first():
    result = _result([
        _utterance("a", "three three two", "nine nine four"),
        _utterance("b", "two", "four"),
        _utterance("b", "seven", "five"),
    ])
    assert result.substitutions(top=2) == [(("three", "nine"), 2), (("two", "four"), 2)]
    summary = result.summary()
    assert summary["substitutions"][:2] == [["three", "nine", 2], ["two", "four", 2]]
    assert list(summary["speakers"]) == ["a", "b"]  # 3 word errors against 2
    assert summary["speakers"]["b"]["wer"] == pytest.approx(1.0)

"""Error counts, substitution pairs and the breakdowns of an evaluation by speaker and by
any other field of the manifest's lines."""

from __future__ import annotations

from typing import Any

import pytest

from deepspeech.data.manifest import Utterance
from deepspeech.data.table import UtteranceTable
from deepspeech.errors import ManifestError
from deepspeech.evaluation.evaluate import EvalResult, UtteranceResult, read_report
from deepspeech.evaluation.groups import check_group_fields
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


def _utterance(speaker: str | None, reference: str, hypothesis: str,
               **extra: Any) -> UtteranceResult:
    words = word_errors([reference], [hypothesis])
    chars = char_errors([reference], [hypothesis])
    return UtteranceResult(f"{speaker}-{reference}.wav", reference, hypothesis, words.errors,
                           words.reference_length, chars.errors, chars.reference_length,
                           speaker, extra=extra)


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


def _speakers_of_all_ages() -> EvalResult:
    """Two children and two adults; the children's words are the wrong ones."""
    return _result([
        _utterance("ann", "three one", "nine one", age=7, age_group="child", gender="f"),
        _utterance("ann", "seven two", "five four", age=7, age_group="child", gender="f"),
        _utterance("bo", "six", "sex", age=11, age_group="child", gender="m"),
        _utterance("cy", "two four six eight", "two four six eight", age=30,
                   age_group="adult", gender="m"),
        _utterance("di", "one two three", "one two tree", age=25, age_group="adult",
                   gender="f"),
    ])


def test_by_group_pools_the_words_of_each_value_sorted_by_value():
    result = _speakers_of_all_ages()
    groups = result.by_group("age_group")
    assert list(groups) == ["adult", "child"]
    assert groups["child"] == {"utterances": 3, "word_errors": 4, "words": 5,
                               "wer": pytest.approx(4 / 5),
                               "cer": pytest.approx(char_errors(
                                   ["three one", "seven two", "six"],
                                   ["nine one", "five four", "sex"]).rate)}
    assert groups["adult"]["wer"] == pytest.approx(1 / 7)
    assert groups["adult"]["cer"] == pytest.approx(1 / 31)  # "three" -> "tree": one deletion
    # Ages as numbers, not as text ("11" < "25" < "30" < "7").
    assert list(result.by_group("age")) == ["7", "11", "25", "30"]
    assert result.by_group("gender")["f"]["wer"] == pytest.approx(4 / 7)
    assert result.by_group("gender")["m"]["wer"] == pytest.approx(1 / 5)


def test_joined_fields_give_one_row_per_combination_and_the_summary_holds_them():
    result = _speakers_of_all_ages()
    combined = result.by_group("age_group+gender")
    assert {value: row["wer"] for value, row in combined.items()} == {
        "adult+f": pytest.approx(1 / 3), "adult+m": 0.0, "child+f": pytest.approx(3 / 4),
        "child+m": pytest.approx(1.0)}
    assert list(result.by_group("speaker").items()) == sorted(result.by_speaker().items())
    summary = result.summary(["gender", "age_group+gender"])
    assert summary["groups"] == {"gender": result.by_group("gender"),
                                 "age_group+gender": combined}
    assert result.summary()["groups"] == {}


def test_a_report_keeps_the_fields_that_groups_are_recomputed_from(tmp_path):
    result = _speakers_of_all_ages()
    result.write_report(tmp_path / "report.jsonl")
    details = read_report(tmp_path / "report.jsonl")
    assert details[2].extra == {"age": 11, "age_group": "child", "gender": "m"}
    again = _result(details)
    for grouping in ("age", "gender", "age_group+gender"):
        assert again.by_group(grouping) == result.by_group(grouping)


def test_grouping_by_a_field_that_an_utterance_lacks_names_it():
    result = _result([_utterance("ann", "one", "one", gender="f"),
                      _utterance("bo", "two", "two", gendr="m")])
    with pytest.raises(ManifestError, match=r"^bo-two.wav: its manifest line has no value "
                                            r"for field 'gender' to group by$"):
        result.by_group("gender")


def test_a_field_missing_from_the_manifest_is_named_by_line_before_decoding():
    lines = [Utterance("a.wav", "one", 1.0, speaker="ann", extra={"age": 7, "gender": "f"}),
             Utterance("b.wav", "two", 1.0, speaker="bo", extra={"age": 30, "gendr": "m"}),
             Utterance("c.wav", "six", 1.0, extra={"age": 9})]
    table = UtteranceTable.of(lines, lines=[1, 3, 4])  # line 2 blank
    check_group_fields(table, ["age"], "test.jsonl")
    check_group_fields(table, [], "test.jsonl")
    with pytest.raises(ManifestError) as error:
        check_group_fields(table, ["age", "age+gender"], "test.jsonl")
    assert str(error.value) == (
        "test.jsonl line 3: no value for field 'gender' to group by (2 lines lack one); "
        "the line has speaker, age, gendr beside audio_filepath, text and duration")
    with pytest.raises(ManifestError, match=r"^test.jsonl line 4: no value for field "
                                            r"'speaker' to group by; the line has age beside"):
        check_group_fields(table, ["speaker"], "test.jsonl")

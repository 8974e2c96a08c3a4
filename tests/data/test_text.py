"""Vocabulary and normalization: blank at 0, round trips, unknown characters reported."""

from __future__ import annotations

import pytest

from deepspeech.data.text import TextNormalizer, Vocabulary
from deepspeech.errors import VocabularyError


def test_english_vocabulary_round_trip():
    vocabulary = Vocabulary.english()
    assert len(vocabulary) == 29  # blank + space + apostrophe + 26 letters
    assert vocabulary.blank == 0
    ids = vocabulary.encode("don't stop")
    assert 0 not in ids
    assert vocabulary.decode(ids) == "don't stop"
    assert vocabulary.decode([0, *ids, 0]) == "don't stop"


def test_unknown_characters_are_reported_with_their_place():
    vocabulary = Vocabulary.english()
    assert vocabulary.unknown("café 9x9") == ["é", "9"]
    with pytest.raises(VocabularyError) as error:
        vocabulary.encode("café 9", where="train.jsonl line 7")
    assert "train.jsonl line 7" in str(error.value)
    assert "'é'" in str(error.value) and "'9'" in str(error.value)


def test_vocabulary_from_mandarin_transcripts():
    vocabulary = Vocabulary.from_transcripts(["你好 世界", "你们好"])
    assert vocabulary.characters[0] == " "
    assert set(vocabulary.characters) == set("你好世界们 ")
    assert vocabulary.decode(vocabulary.encode("世界你好")) == "世界你好"


def test_normalizer_rules():
    normalize = TextNormalizer()
    assert normalize("  Hello, World!  Don't -- e-mail. ") == "hello world don't e mail"
    assert TextNormalizer(lowercase=False)("Hi!") == "Hi"
    assert TextNormalizer(strip_punctuation=False)("Hi, you") == "hi, you"
    assert normalize("你好，世界。") == "你好 世界"


def test_a_typeset_apostrophe_is_an_apostrophe_where_one_is_kept():
    # Common Voice and book text write "don’t" with U+2019; split, it would be "don t".
    assert TextNormalizer()("Don\u2019t say \u2018no\u2019, it\u02bcs fine") == \
        "don't say no' it's fine"
    assert TextNormalizer(keep="")("don\u2019t") == "don t"


def test_invalid_vocabularies():
    with pytest.raises(VocabularyError):
        Vocabulary(["a", "a"])
    with pytest.raises(VocabularyError):
        Vocabulary.from_transcripts([""])

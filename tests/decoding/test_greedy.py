"""Greedy CTC decoding on hand-built frame scores: repeats, blanks, lengths, word timings."""

from __future__ import annotations

import math

import pytest
import torch

from deepspeech.data.text import Vocabulary
from deepspeech.decoding.greedy import greedy_decode, greedy_word_segments

ENGLISH = Vocabulary.english()


def frames(path: str, vocabulary: Vocabulary = ENGLISH) -> torch.Tensor:
    """Log-probs whose best class per frame spells ``path`` ('-' blank, '_' space)."""
    scores = torch.zeros(len(path), len(vocabulary))
    for t, ch in enumerate(path):
        index = 0 if ch == "-" else vocabulary.encode(" " if ch == "_" else ch)[0]
        scores[t, index] = 5.0
    return torch.log_softmax(scores, dim=1)


def test_repeats_collapse_and_blanks_separate_letters():
    assert greedy_decode(frames("hhe-ll-llo")[None], None, ENGLISH) == ["hello"]
    assert greedy_decode(frames("--a-a--")[None], None, ENGLISH) == ["aa"]
    assert greedy_decode(frames("aaaa")[None], None, ENGLISH) == ["a"]
    assert greedy_decode(frames("----")[None], None, ENGLISH) == [""]


def test_spaces_are_collapsed_and_stripped():
    assert greedy_decode(frames("_-a__-_b_")[None], None, ENGLISH) == ["a b"]


def test_batch_respects_lengths():
    batch = torch.stack([frames("ab-cd"), frames("xyz--")])
    assert greedy_decode(batch, torch.tensor([5, 2]), ENGLISH) == ["abcd", "xy"]
    assert greedy_decode(batch, [0, 5], ENGLISH) == ["", "xyz"]
    # Padding beyond the length must not merge with the last real frame's letter.
    assert greedy_decode(frames("aab")[None], [2], ENGLISH) == ["a"]


def test_wrong_shapes_are_rejected():
    with pytest.raises(ValueError, match="classes|batch"):
        greedy_decode(torch.zeros(2, 3, 5), None, ENGLISH)
    with pytest.raises(ValueError, match="lengths"):
        greedy_decode(frames("ab")[None], [1, 2], ENGLISH)


def test_word_segments_give_frame_spans():
    #       0123456789012345
    path = "--hh-i--__-yo-u-"
    segments = greedy_word_segments(frames(path), ENGLISH)
    assert [segment[:3] for segment in segments] == [("hi", 2, 6), ("you", 11, 15)]
    assert segments[1].seconds(0.02) == pytest.approx((0.22, 0.30))
    # Each letter's best frame has posterior e^5 / (e^5 + 28): a word is their product.
    letter = math.exp(5) / (math.exp(5) + len(ENGLISH) - 1)
    assert [s.confidence for s in segments] == pytest.approx([letter ** 2, letter ** 3])
    word, start, end, confidence = segments[0]  # unpacks like a tuple
    assert (word, start, end) == ("hi", 2, 6)


def test_word_segments_respect_length_and_text_matches_decode():
    path = "a-b_c--d_ee"
    segments = greedy_word_segments(frames(path), ENGLISH, length=8)
    assert [s.word for s in segments] == ["ab", "cd"]
    assert " ".join(s.word for s in segments) == greedy_decode(frames(path)[None], [8], ENGLISH)[0]


def test_vocabulary_without_space_gives_one_segment_per_character():
    mandarin = Vocabulary(list("中文好"))
    scores = frames("中-文文好", mandarin)
    assert greedy_decode(scores[None], None, mandarin) == ["中文好"]
    assert [s[:3] for s in greedy_word_segments(scores, mandarin)] == [
        ("中", 0, 1), ("文", 2, 4), ("好", 4, 5)]

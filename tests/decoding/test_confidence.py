"""Confidences on hand-made posteriors: tokens, words, utterances, greedy and beam alike."""

from __future__ import annotations

import math

import pytest
import torch

from deepspeech.data.text import Vocabulary
from deepspeech.decoding.confidence import token_confidences, utterance_confidence
from deepspeech.decoding.greedy import greedy_decode_words, greedy_word_segments

ENGLISH = Vocabulary.english()


def posteriors(*frames: dict[str, float]) -> torch.Tensor:
    """``[frames, classes]`` log-probs from per-frame {char: prob} ('-' blank, '_' space);
    what a frame leaves is spread over the other classes."""
    out = torch.empty(len(frames), len(ENGLISH))
    for t, probs in enumerate(frames):
        rest = (1.0 - sum(probs.values())) / (len(ENGLISH) - len(probs))
        out[t] = math.log(rest)
        for ch, p in probs.items():
            out[t, 0 if ch == "-" else ENGLISH.encode(" " if ch == "_" else ch)[0]] = math.log(p)
    return out


def index(ch: str) -> int:
    return 0 if ch == "-" else ENGLISH.encode(" " if ch == "_" else ch)[0]


def test_a_token_is_scored_by_its_best_frame_before_the_next_token():
    log_probs = posteriors({"a": 0.6}, {"a": 0.9}, {"-": 0.7, "a": 0.25}, {"b": 0.5},
                           {"-": 0.5, "b": 0.45})
    # "a" from frame 0 to 2, "b" from frame 3 to the end
    scores = token_confidences(log_probs, [index("a"), index("b")], [0, 3])
    assert scores == pytest.approx([0.9, 0.5])
    # a length cuts the last token's window: its best frame is then the one it has
    assert token_confidences(log_probs, [index("b")], [3], length=4) == pytest.approx([0.5])
    assert token_confidences(log_probs, [], []) == []
    # logits are normalized first: a tenfold scale is still a probability
    assert token_confidences(log_probs * 10, [index("a")], [1])[0] <= 1.0
    with pytest.raises(ValueError, match="increase"):
        token_confidences(log_probs, [index("a"), index("b")], [3, 3])


def test_a_clearly_spoken_word_is_confident_and_a_mumbled_one_is_not():
    clear, unsure = {"-": 0.95}, {"s": 0.4, "z": 0.35}
    log_probs = posteriors({"c": 0.95}, {"a": 0.9}, clear, {"t": 0.95}, {"_": 0.9},
                           unsure, {"a": 0.9}, {"t": 0.95}, clear)
    cat, sat = greedy_word_segments(log_probs, ENGLISH)
    assert (cat.word, sat.word) == ("cat", "sat")
    assert cat.confidence == pytest.approx(0.95 * 0.9 * 0.95)
    assert sat.confidence == pytest.approx(0.4 * 0.9 * 0.95)  # one unsure letter is enough
    # the utterance: that both words are right
    assert utterance_confidence([cat.confidence, sat.confidence], log_probs, ENGLISH) == \
        pytest.approx(cat.confidence * sat.confidence)
    ((text, words),) = greedy_decode_words(log_probs[None], None, ENGLISH)
    assert text == "cat sat" and words == [cat, sat]


def test_an_empty_transcript_is_as_sure_as_the_silence_is():
    silence = posteriors({"-": 0.99}, {"-": 0.9, "_": 0.09}, {"-": 0.99})
    assert greedy_word_segments(silence, ENGLISH) == []
    assert utterance_confidence([], silence, ENGLISH) == pytest.approx(1 - 0.01 / 27)
    almost = posteriors({"-": 0.99}, {"-": 0.55, "a": 0.4}, {"-": 0.99})
    assert utterance_confidence([], almost, ENGLISH) == pytest.approx(0.6)
    assert utterance_confidence([], almost, ENGLISH, length=1) == pytest.approx(1 - 0.01 / 28)
    assert utterance_confidence([], almost[:0], ENGLISH) == 1.0

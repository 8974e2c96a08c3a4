"""Beam search: agrees with greedy when it should, beats it when alignments or the LM matter."""

from __future__ import annotations

import math

import pytest
import torch

from deepspeech.config import DecodeConfig
from deepspeech.data.text import Vocabulary
from deepspeech.decoding.greedy import greedy_decode, greedy_word_segments

pytest.importorskip("flashlight.lib.text")
from deepspeech.decoding.beam import BeamSearchDecoder, DecoderError  # noqa: E402
from deepspeech.lm import estimate, write_arpa  # noqa: E402

ENGLISH = Vocabulary.english()
CORPUS = ["the cat sat", "a cat ran", "the cat ran", "my cat sat", "the dog sat"] * 4


def scores(*frame_probs: dict[str, float]) -> torch.Tensor:
    """``[frames, classes]`` log-probs from per-frame {char: prob} ('-' blank, '_' space)."""
    out = torch.full((len(frame_probs), len(ENGLISH)), -12.0)
    for t, probs in enumerate(frame_probs):
        for ch, p in probs.items():
            index = 0 if ch == "-" else ENGLISH.encode(" " if ch == "_" else ch)[0]
            out[t, index] = math.log(p)
    return torch.log_softmax(out, dim=1)


def spelled(text: str, **confusion: dict[str, float]) -> torch.Tensor:
    """Frames that clearly spell ``text`` (letter then blank), except confused letters."""
    frames = []
    for i, ch in enumerate(text):
        frames.append(confusion.get(f"at{i}", {"_" if ch == " " else ch: 0.9}))
        frames.append({"-": 0.9})
    return scores(*frames)


@pytest.fixture(scope="module")
def word_lm(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lm") / "words.arpa"
    write_arpa(estimate([s.split() for s in CORPUS], 3), path)
    return str(path)


def beam(**kwargs) -> BeamSearchDecoder:
    return BeamSearchDecoder(ENGLISH, DecodeConfig(mode="beam", **kwargs))


def test_without_lm_equals_greedy_on_peaked_outputs():
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn(6, 60, len(ENGLISH), generator=generator)
    best = torch.randint(0, len(ENGLISH), (6, 60), generator=generator)
    batch.scatter_(2, best[..., None], 12.0)
    log_probs = torch.log_softmax(batch, dim=2)
    lengths = torch.tensor([60, 55, 40, 60, 1, 0])
    decoder = beam(beam=8)
    assert decoder.mode == "lexicon-free"
    assert decoder.decode(log_probs, lengths) == greedy_decode(log_probs, lengths, ENGLISH)


def test_summing_over_alignments_beats_the_best_path():
    # Two frames, P(a) = 0.4 and P(blank) = 0.6 in each: the best path is blank-blank
    # (0.36) but "a" has three alignments: aa, a-, -a (0.16 + 0.24 + 0.24 = 0.64).
    log_probs = scores({"a": 0.4, "-": 0.6}, {"a": 0.4, "-": 0.6})[None]
    assert greedy_decode(log_probs, None, ENGLISH) == [""]
    assert beam().decode(log_probs) == ["a"]


def test_lm_prefers_a_known_word_over_a_slightly_better_non_word(word_lm):
    log_probs = spelled("the cat sat", at4={"c": 0.9}, at5={"o": 0.5, "a": 0.4})[None]
    assert greedy_decode(log_probs, None, ENGLISH) == ["the cot sat"]
    assert beam().decode(log_probs) == ["the cot sat"]
    decoder = beam(lm=word_lm, lm_weight=1.0)
    assert decoder.mode == "lexicon"
    assert decoder.decode(log_probs) == ["the cat sat"]


def test_lm_weight_decides_between_two_known_words(word_lm):
    # "dog" is in the LM, but never after "a" (and never before "ran"), unlike "cat";
    # the acoustics slightly favour "dog".
    log_probs = spelled("a dog ran", at2={"d": 0.5, "c": 0.4}, at3={"o": 0.5, "a": 0.4},
                        at4={"g": 0.5, "t": 0.4})[None]
    decoder = beam(lm=word_lm, lm_weight=0.0)
    assert decoder.decode(log_probs) == ["a dog ran"]
    assert decoder.with_weights(lm_weight=1.0, word_bonus=0.0).decode(log_probs) == ["a cat ran"]


def test_batches_with_padding_decode_like_single_utterances(word_lm):
    decoder = beam(lm=word_lm, lm_weight=0.5, word_bonus=1.0)
    first, second = spelled("the cat sat"), spelled("my cat ran")
    batch = torch.zeros(2, 30, len(ENGLISH))
    batch[0, :len(first)], batch[1, :len(second)] = first, second
    lengths = torch.tensor([len(first), len(second)])
    assert decoder.decode(batch, lengths) == ["the cat sat", "my cat ran"]
    assert decoder.decode(first[None]) == ["the cat sat"]


def test_user_lexicon_limits_the_words(tmp_path):
    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("the t h e |\ncat c a t |\nsat s a t |\n", encoding="utf-8")
    log_probs = spelled("the cot sat", at5={"o": 0.6, "a": 0.3})[None]
    assert beam(lexicon=str(lexicon)).decode(log_probs) == ["the cat sat"]


def test_character_lm_decodes_without_lexicon(tmp_path):
    sentences = [list(s.replace(" ", "|")) for s in CORPUS]
    path = tmp_path / "chars.arpa"
    write_arpa(estimate(sentences, 5), path)
    decoder = beam(lm=str(path), lm_weight=1.0)
    assert decoder.mode == "lexicon-free + character LM"
    log_probs = spelled("the cat sat", at5={"o": 0.5, "a": 0.4})[None]
    assert decoder.decode(log_probs) == ["the cat sat"]


def test_word_segments_agree_with_greedy_on_clear_speech(word_lm):
    log_probs = spelled("my cat ran")  # one frame per letter: ends agree too
    expected = greedy_word_segments(log_probs, ENGLISH)
    assert [(s.start, s.end) for s in expected] == [(0, 3), (6, 11), (14, 19)]
    for decoder in (beam(), beam(lm=word_lm)):
        segments = decoder.word_segments(log_probs)
        assert [s[:3] for s in segments] == [s[:3] for s in expected]
        assert all(s.confidence > 0.99 for s in segments + expected)


def test_a_word_is_as_sure_as_the_share_of_the_beam_that_says_it(word_lm):
    log_probs = spelled("the cat sat", at5={"o": 0.5, "a": 0.4})
    ((text, words),) = beam().decode_words(log_probs[None])
    assert text == "the cot sat" == " ".join(w.word for w in words)
    # Without an LM the beam splits between "cot" and "cat" as the acoustics do.
    assert words[1].confidence == pytest.approx(0.5 / 0.9, abs=1e-3)
    assert words[0].confidence > 0.99 and words[2].confidence > 0.99
    assert [w[:3] for w in words] == [w[:3] for w in greedy_word_segments(log_probs, ENGLISH)]
    # Two lexicon words, every letter 0.5 against 0.4: "dog" holds (5/4)^3 parts of the
    # beam to one part for "cat"; with the LM's weight the beam turns to "cat", surer.
    log_probs = spelled("a dog ran", at2={"d": 0.5, "c": 0.4}, at3={"o": 0.5, "a": 0.4},
                        at4={"g": 0.5, "t": 0.4})
    decoder = beam(lm=word_lm, lm_weight=0.0)
    ((text, words),) = decoder.decode_words(log_probs[None])
    assert text == "a dog ran"
    assert words[1].confidence == pytest.approx(1.25 ** 3 / (1.25 ** 3 + 1), abs=1e-3)
    ((text, words),) = decoder.with_weights(1.0, 0.0).decode_words(log_probs[None])
    assert text == "a cat ran" and 0.85 < words[1].confidence < 1.0
    (_, again), segments = decoder.decode_words(log_probs[None])[0], decoder.word_segments(log_probs)
    assert [s[:3] for s in segments] == [s[:3] for s in again]
    assert [s.confidence for s in segments] == pytest.approx([s.confidence for s in again])


def test_vocabulary_without_space_decodes_characters(tmp_path):
    mandarin = Vocabulary(list("中文好"))
    log_probs = torch.log_softmax(torch.eye(4)[[1, 0, 2, 2, 3]] * 6, dim=1)
    decoder = BeamSearchDecoder(mandarin, DecodeConfig(mode="beam"))
    assert decoder.decode(log_probs[None]) == ["中文好"]
    path = tmp_path / "chars.arpa"
    write_arpa(estimate([list("中文好"), list("好中文")], 3), path)
    with_lm = BeamSearchDecoder(mandarin, DecodeConfig(mode="beam", lm=str(path)))
    assert with_lm.mode == "lexicon-free + character LM"
    assert with_lm.decode(log_probs[None]) == ["中文好"]


def test_unusable_inputs_are_clear_errors(tmp_path, word_lm):
    with pytest.raises(DecoderError, match="missing.arpa: language model file not found"):
        beam(lm=str(tmp_path / "missing.arpa"))
    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("the t h e |\nCat C a t |\n", encoding="utf-8")
    with pytest.raises(DecoderError, match="lexicon.txt line 2: spelling of 'Cat' uses C"):
        beam(lexicon=str(lexicon))
    binary = tmp_path / "lm.bin"
    binary.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\0\0")
    with pytest.raises(DecoderError, match="lm.bin: not an ARPA file.*decode.lexicon"):
        beam(lm=str(binary))
    unigram_only = tmp_path / "broken.arpa"
    unigram_only.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 a\n-1 b\n\n\\end\\\n")
    with pytest.raises(DecoderError, match="broken.arpa: KenLM cannot load this model: This "
                                          "ngram implementation assumes at least a bigram"):
        beam(lm=str(unigram_only))
    too_high = tmp_path / "order7.arpa"  # another tool's model: lm build refuses order 7
    too_high.write_text("\\data\\\nngram 1=2\n" + "".join(f"ngram {n}=0\n" for n in range(2, 8))
                        + "\n\\1-grams:\n-1 a\n-1 b\n\n\\end\\\n")
    with pytest.raises(DecoderError, match=r"order7.arpa: KenLM cannot load this model: This "
                                          r"model has order 7 but KenLM was compiled to support "
                                          r"up to 6\."):
        beam(lm=str(too_high))
    mandarin = Vocabulary(list("中文"))
    with pytest.raises(DecoderError, match="no space"):
        BeamSearchDecoder(mandarin, DecodeConfig(mode="beam", lm=word_lm))

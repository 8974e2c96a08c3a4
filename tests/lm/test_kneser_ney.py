"""Kneser-Ney estimation and ARPA output: hand-computed values, normalization, KenLM."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from deepspeech.lm import BOS, EOS, UNK, ArpaModel, LanguageModelError, estimate, write_arpa
from deepspeech.lm.kneser_ney import FALLBACK_DISCOUNTS, discounts

TINY = [["a", "b"], ["a", "b"], ["b", "a"]]


def synthetic_corpus(seed: int = 0, sentences: int = 400) -> list[list[str]]:
    """Skewed word frequencies and some structure, so every order has singletons and repeats."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(15)]
    corpus = []
    for _ in range(sentences):
        sentence = [rng.choice(words[:rng.randint(2, 15)])]
        for _ in range(rng.randint(0, 7)):
            previous = int(sentence[-1][1:])
            sentence.append(words[(previous + 1) % 15] if rng.random() < 0.4 else rng.choice(words))
        corpus.append(sentence)
    return corpus


def arpa(tmp_path, sentences, order, **kwargs) -> ArpaModel:
    path = tmp_path / f"lm{order}.arpa"
    write_arpa(estimate(sentences, order, **kwargs), path)
    return ArpaModel.load(path)


def test_discounts_follow_chen_and_goodman():
    # n1=4, n2=2, n3=1, n4=1: Y = 4/8; D1 = 1 - 2Y n2/n1, D2 = 2 - 3Y n3/n2, D3 = 3 - 4Y n4/n3
    counts = np.array([1, 1, 1, 1, 2, 2, 3, 4, 7])
    assert discounts(counts, 2) == pytest.approx((0.5, 1.25, 1.0))


def test_discounts_fall_back_when_counts_are_too_sparse():
    assert discounts(np.array([1, 1, 2]), 2) == FALLBACK_DISCOUNTS


def test_bigram_matches_hand_computed_values(tmp_path):
    model = arpa(tmp_path, TINY, 2)
    # Unigrams use continuation counts: a, b and </s> each follow 2 distinct words
    # (total 6); fallback D2 = 1 leaves 1/6 each, and the discounted 3/6 is spread
    # uniformly over the 4 predictable words (a, b, </s>, <unk>).
    assert 10 ** model.probs[0][("a",)] == pytest.approx(1 / 6 + 0.5 / 4)
    assert 10 ** model.probs[0][(UNK,)] == pytest.approx(0.5 / 4)
    assert model.probs[0][(BOS,)] == -99.0
    # After <s>: a twice (D = 1), b once (D = 0.5); gamma = 1.5 / 3.
    p_a = 7 / 24
    assert 10 ** model.probs[1][(BOS, "a")] == pytest.approx((2 - 1) / 3 + 0.5 * p_a)
    assert 10 ** model.probs[1][(BOS, "b")] == pytest.approx((1 - 0.5) / 3 + 0.5 * p_a)
    assert 10 ** model.backoffs[0][(BOS,)] == pytest.approx(0.5)
    # An unseen bigram backs off: bo(a) * p(<unk>).
    assert 10 ** model.log10_prob(UNK, ["a"]) == pytest.approx(0.5 * 0.5 / 4)


def test_trigram_middle_order_uses_continuation_counts(tmp_path):
    model = arpa(tmp_path, TINY, 3)
    # "a b" occurs twice but always after <s>: its adjusted count is 1, like "a </s>".
    p_b_after_a = 0.5 / 2 + 0.5 * 7 / 24
    assert 10 ** model.probs[1][("a", "b")] == pytest.approx(p_b_after_a)
    # The highest order keeps raw counts: "<s> a b" twice, D2 = 1, gamma = 1/2.
    assert 10 ** model.probs[2][(BOS, "a", "b")] == pytest.approx(1 / 2 + 0.5 * p_b_after_a)


def contexts(model: ArpaModel) -> set[tuple[str, ...]]:
    found = {(), ("w3", "w1", "w4")}  # plus an unseen context
    for table in model.probs[:-1]:
        found.update(ngram for ngram in table if ngram[-1] != EOS)
    return found


@pytest.mark.parametrize("prune", [False, True])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_sum_to_one_in_every_context(tmp_path, order, prune):
    model = arpa(tmp_path, synthetic_corpus(), order, prune=prune, vocab_limit=12)
    vocabulary = [w for w in model.vocabulary if w != BOS]
    assert UNK in vocabulary and EOS in vocabulary
    for context in contexts(model):
        total = math.fsum(10 ** model.log10_prob(w, context) for w in vocabulary)
        assert total == pytest.approx(1.0, abs=1e-6), context


def test_pruning_drops_singletons_but_keeps_prefixes_and_suffixes(tmp_path):
    corpus = synthetic_corpus()
    full = estimate(corpus, 4)
    pruned = estimate(corpus, 4, prune=True)
    sizes = [len(t) for t in full.orders], [len(t) for t in pruned.orders]
    assert sizes[0][:2] == sizes[1][:2]
    assert sizes[1][2] < sizes[0][2] and sizes[1][3] < sizes[0][3]
    write_arpa(pruned, tmp_path / "pruned.arpa")
    model = ArpaModel.load(tmp_path / "pruned.arpa")
    for n in (2, 3):
        for ngram in model.probs[n]:
            assert ngram[:-1] in model.probs[n - 1] and ngram[1:] in model.probs[n - 1]


def test_vocab_limit_maps_rare_words_to_unk(tmp_path):
    corpus = [["common", "rare"], ["common", "common", "other"], ["other"]]
    model = arpa(tmp_path, corpus, 2, vocab_limit=2)
    assert sorted(model.vocabulary) == sorted([BOS, EOS, UNK, "common", "other"])
    assert ("common", UNK) in model.probs[1]
    assert model.log10_prob("rare", ["common"]) == model.log10_prob(UNK, ["common"])


def test_arpa_sections_are_sorted_and_counted(tmp_path):
    path = tmp_path / "lm.arpa"
    write_arpa(estimate(synthetic_corpus(), 3), path)
    text = path.read_text()
    header, body = text.split("\n\n", 1)
    counts = [int(line.split("=")[1]) for line in header.splitlines()[1:]]
    sections = body.split("\\end\\")[0].strip().split("\n\n")
    assert len(sections) == 3
    for n, (section, count) in enumerate(zip(sections, counts, strict=True), start=1):
        lines = section.splitlines()
        assert lines[0] == f"\\{n}-grams:"
        ngrams = [line.split("\t")[1].split(" ") for line in lines[1:]]
        assert len(ngrams) == count and ngrams == sorted(ngrams)
        assert all(len(line.split("\t")) == (3 if n < 3 else 2) for line in lines[1:])


def test_bad_arguments_and_empty_corpus_are_errors():
    with pytest.raises(LanguageModelError, match="order"):
        estimate(TINY, 0)
    with pytest.raises(LanguageModelError, match="no sentences"):
        estimate([], 3)


def test_sentences_shorter_than_the_order_are_fine(tmp_path):
    model = arpa(tmp_path, [["a"], ["b"], ["a"]], 5)
    assert model.order == 5 and not model.probs[4]
    total = sum(10 ** model.log10_prob(w, ["a"]) for w in model.vocabulary if w != BOS)
    assert total == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("order", [1, 2, 4])
def test_kenlm_loads_the_model_and_agrees(tmp_path, order):
    kenlm = pytest.importorskip("kenlm")
    corpus = synthetic_corpus()
    path = tmp_path / "lm.arpa"
    write_arpa(estimate(corpus, order, prune=order > 2), path)
    ours = ArpaModel.load(path)
    theirs = kenlm.Model(str(path))
    assert theirs.order == max(order, 2)  # a unigram model is written with an empty 2-gram section
    for sentence in corpus[:50] + [["w1", "never", "seen"]]:
        # KenLM stores float32: agreement to ~1e-6 on log10 sentence scores.
        assert theirs.score(" ".join(sentence)) == pytest.approx(ours.score(sentence), abs=1e-4)

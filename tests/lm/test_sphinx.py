"""Sphinx trie models read back exactly; restricting a vocabulary renormalizes every context.

``data/tiny.lm.bin.gz`` is ``data/tiny.arpa`` (a Kneser-Ney 3-gram of five sentences,
``e-mail`` and ``a.`` among its words) converted by Debian bookworm's sphinxbase-utils
0.8+5prealpha: ``sphinx_lm_convert -i tiny.arpa -o tiny.lm.bin``, then gzip.
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pytest

from deepspeech.lm import BOS, UNK, ArpaModel, LanguageModelError, estimate, write_arpa
from deepspeech.lm.ngrams import find_rows, restrict_vocabulary
from deepspeech.lm.sphinx import read_sphinx_lm

DATA = Path(__file__).parent / "data"
SPELLABLE = re.compile(r"[a-z']+")


@pytest.fixture
def tiny_bin(tmp_path) -> Path:
    path = tmp_path / "tiny.lm.bin"
    path.write_bytes(gzip.decompress((DATA / "tiny.lm.bin.gz").read_bytes()))
    return path


def test_sphinx_binary_reads_back_as_its_source_arpa(tmp_path, tiny_bin):
    write_arpa(read_sphinx_lm(tiny_bin), tmp_path / "back.arpa")
    ours, source = ArpaModel.load(tmp_path / "back.arpa"), ArpaModel.load(DATA / "tiny.arpa")
    for n in range(3):
        assert ours.probs[n].keys() == source.probs[n].keys()
        for ngram, prob in source.probs[n].items():
            if prob > -99:  # Sphinx keeps log10 -99 (<s>) as a finite -10 or so
                assert ours.probs[n][ngram] == pytest.approx(prob, abs=1e-5)
            assert ours.backoffs[n].get(ngram, 0.0) == pytest.approx(
                source.backoffs[n].get(ngram, 0.0), abs=1e-5)


def test_a_file_that_is_not_a_sphinx_model_is_named(tmp_path, tiny_bin):
    with pytest.raises(LanguageModelError, match="not a Sphinx trie"):
        read_sphinx_lm(DATA / "tiny.arpa")
    cut = tmp_path / "cut.lm.bin"
    cut.write_bytes(tiny_bin.read_bytes()[:1000])
    with pytest.raises(LanguageModelError, match="truncated"):
        read_sphinx_lm(cut)


def context_total(model: ArpaModel, context: tuple[str, ...]) -> float:
    return math.fsum(10 ** model.log10_prob(w, context) for w in model.vocabulary if w != BOS)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_restricting_the_vocabulary_conditions_every_context(tmp_path, order):
    sentences = [line.split() for line in (
        "send me an e-mail", "the e-mail came", "a. b. c. said the cat", "the cat sat",
        "the dog sat on the mat", "an e-mail on the mat", "the cat and the dog")]
    full_model = estimate(sentences, order)
    write_arpa(full_model, tmp_path / "full.arpa")
    write_arpa(restrict_vocabulary(full_model, SPELLABLE.fullmatch), tmp_path / "kept.arpa")
    full, kept = ArpaModel.load(tmp_path / "full.arpa"), ArpaModel.load(tmp_path / "kept.arpa")
    assert {"e-mail", "a.", "b."}.isdisjoint(kept.vocabulary)
    contexts = {ngram for table in kept.probs[:order - 1] for ngram in table} | {()}
    for context in contexts:
        assert context_total(kept, context) == pytest.approx(1.0, abs=1e-6), context
        # conditioning: every kept word's probability grows by the same factor
        ratios = [10 ** (kept.log10_prob(w, context) - full.log10_prob(w, context))
                  for w in kept.vocabulary if w not in (BOS, UNK)]
        assert max(ratios) == pytest.approx(min(ratios), rel=1e-6), context
        assert min(ratios) >= 1.0


def test_restricting_adds_an_unknown_word_never_predicted(tiny_bin):
    model = read_sphinx_lm(tiny_bin)
    model.vocab[model.vocab.index(UNK)] = "zzz"  # a model without <unk>, as Sphinx's are
    restricted = restrict_vocabulary(model, SPELLABLE.fullmatch)
    unk = restricted.vocab.index(UNK)
    assert restricted.orders[0].log10_prob[unk] == -99.0
    assert find_rows(restricted, np.array([[unk]]))[0] == unk


def test_restricting_needs_listed_suffixes():
    model = estimate([["a", "b", "c"]], 3)
    vocab = model.vocab
    b_c = find_rows(model, np.array([[vocab.index("b"), vocab.index("c")]]))[0]
    model.orders[1].word[b_c] = vocab.index("</s>")  # "b c" becomes "b </s>": "a b c" loses its suffix
    with pytest.raises(LanguageModelError, match="suffix"):
        restrict_vocabulary(model, SPELLABLE.fullmatch)

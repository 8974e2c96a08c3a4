"""``deepspeech lm mix``: the mix of two ARPA models, checked against a brute-force scorer."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from deepspeech.cli import lm as lm_cli
from deepspeech.errors import DeepSpeechError
from deepspeech.lm import BOS, ArpaModel, estimate, write_arpa
from deepspeech.lm.arpa import read_arpa
from deepspeech.lm.ngrams import score_ngrams

# A hand-written 3-gram in SRILM's style (backoff 1 left out), normalized by hand: its
# 3-gram "<s> x x" has no listed suffix "x x", so the mix must back off to score it.
_HAND = {
    1: [("</s>", 0.2, None), (BOS, 0.0, 2 / 3), ("<unk>", 0.1, None), ("x", 0.4, 0.4),
        ("y", 0.3, 0.5)],
    2: [("<s> x", 0.6, 0.5 / 0.84), ("x y", 0.5, None), ("x </s>", 0.3, None),
        ("y x", 0.7, None)],
    3: [("<s> x x", 0.5, None)],
}


def write_hand(path) -> None:
    lines = ["\\data\\", *(f"ngram {n}={len(rows)}" for n, rows in _HAND.items())]
    for n, rows in _HAND.items():
        lines += ["", f"\\{n}-grams:"]
        for words, prob, backoff in rows:
            value = f"{math.log10(prob):.10f}" if prob else "-99"
            lines.append(value + f"\t{words}" + ("" if backoff is None
                                                 else f"\t{math.log10(backoff):.10f}"))
    path.write_text("\n".join([*lines, "", "\\end\\", ""]), encoding="utf-8")


def write_estimated(path, order: int) -> None:
    corpus = ["x z u", "z z x w", "w x z", "u x z w", "z w w"]
    write_arpa(estimate([s.split() for s in corpus], order), path)


def prob(model: ArpaModel, word: str, context: tuple[str, ...]) -> float:
    """p(word | context) by the back-off rule; 0 for a word outside the model."""
    if (word,) not in model.probs[0]:
        return 0.0
    context = context[len(context) - model.order + 1:] if model.order > 1 else ()
    weight = 1.0
    while (*context, word) not in model.probs[len(context)]:
        # an unlisted context (one holding an unknown word, say) has backoff 1
        weight *= 10 ** model.backoffs[len(context) - 1].get(context, 0.0)
        context = context[1:]
    return weight * 10 ** model.probs[len(context)][(*context, word)]


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="deepspeech")
    lm_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lm", "mix", *argv])
    return args.handler(args)


@pytest.fixture
def models(tmp_path):
    a, b = tmp_path / "a.arpa", tmp_path / "b.arpa"
    write_hand(a)
    write_estimated(b, 3)
    return a, b


def mixed(tmp_path, a, b, weight: float) -> ArpaModel:
    output = tmp_path / "out" / "mix.arpa"
    assert run_cli(str(a), str(b), "--weight", str(weight), "-o", str(output)) == 0
    return ArpaModel.load(output)


@pytest.mark.parametrize("b_order", [2, 3])
def test_every_context_sums_to_one(tmp_path, models, b_order):
    a, b = models
    write_estimated(b, b_order)
    mix = mixed(tmp_path, a, b, 0.3)
    assert mix.order == 3
    words = [w for w in mix.vocabulary if w != BOS]
    unlisted = [("w", "y"), ("y", "u"), ("q", "x")]  # "q": a word neither model knows
    contexts = [(), *(h for table in mix.probs[:-1] for h in table), *unlisted]
    for context in contexts:
        assert sum(prob(mix, w, context) for w in words) == pytest.approx(1.0, abs=1e-6), context


def test_listed_ngrams_mix_the_two_models(tmp_path, models, capsys):
    a, b = models
    mix = mixed(tmp_path, a, b, 0.3)
    printed = capsys.readouterr().out
    assert "3-grams: " in printed and " MB) in " in printed and "0.3 x " in printed
    first, second = ArpaModel.load(a), ArpaModel.load(b)
    listed = [ngram for table in mix.probs for ngram in table]
    assert set(listed) == {ngram for m in (first, second) for t in m.probs for ngram in t}
    for ngram in listed:
        *context, word = ngram
        expected = 0.3 * prob(first, word, tuple(context)) \
            + 0.7 * prob(second, word, tuple(context))
        assert prob(mix, word, tuple(context)) == pytest.approx(expected, rel=1e-6, abs=1e-90)
    assert ("<s>", "x", "x") in mix.probs[2] and ("z", "z", "x") in mix.probs[2]


def test_a_weight_near_one_gives_a(tmp_path, models):
    a, b = models
    mix = mixed(tmp_path, a, b, 1 - 1e-9)
    first = ArpaModel.load(a)
    for n, table in enumerate(first.probs):
        for ngram, value in table.items():
            assert mix.probs[n][ngram] == pytest.approx(value, abs=1e-6)
            if n < 2:  # the backoff weights come back too, as A's distributions do
                assert mix.backoffs[n][ngram] == pytest.approx(
                    first.backoffs[n].get(ngram, 0.0), abs=1e-6)


def test_words_of_one_model_only_keep_their_share(tmp_path, models):
    a, b = models
    mix = mixed(tmp_path, a, b, 0.25)
    second = ArpaModel.load(b)
    assert {"u", "w", "y", "z"} <= set(mix.vocabulary)
    assert {"u", "w", "z"}.isdisjoint(ArpaModel.load(a).vocabulary)
    for word in ("u", "w", "z"):
        assert 10 ** mix.probs[0][(word,)] == pytest.approx(0.75 * 10 ** second.probs[0][(word,)])


def test_the_mix_loads_everywhere(tmp_path, models):
    a, b = models
    output = tmp_path / "mix.arpa"
    run_cli(str(a), str(b), "--weight", "0.5", "-o", str(output))
    model = read_arpa(output)
    assert [len(t) for t in model.orders] == [len(t) for t in ArpaModel.load(output).probs]
    write_arpa(model, tmp_path / "again.arpa")
    assert (tmp_path / "again.arpa").read_bytes() == output.read_bytes()
    kenlm = pytest.importorskip("flashlight.lib.text.decoder.kenlm")  # the beam search's KenLM
    dictionary = pytest.importorskip("flashlight.lib.text.dictionary").Dictionary()
    sentence = ["x", "x", "z", "u", "</s>"]
    for word in dict.fromkeys(sentence):
        dictionary.add_entry(word)
    lm = kenlm.KenLM(str(output), dictionary)
    state, reference = lm.start(False), ArpaModel.load(output)
    for i, word in enumerate(sentence):
        state, score = lm.score(state, dictionary.get_index(word))
        expected = math.log10(prob(reference, word, (BOS, *sentence[:i])))
        assert score == pytest.approx(expected, abs=1e-5)  # KenLM keeps float32


@pytest.mark.parametrize("weight", ["0", "1", "-0.5", "1.5", "nan"])
def test_bad_weights_are_refused_before_reading(tmp_path, weight):
    missing = str(tmp_path / "missing.arpa")
    with pytest.raises(DeepSpeechError, match="--weight must be between 0 and 1"):
        run_cli(missing, missing, "--weight", weight, "-o", str(tmp_path / "m.arpa"))


def test_missing_and_broken_files_are_named(tmp_path, models):
    a, _ = models
    output = str(tmp_path / "m.arpa")
    with pytest.raises(DeepSpeechError, match="nothere.arpa: language model file not found"):
        run_cli(str(a), str(tmp_path / "nothere.arpa"), "--weight", "0.5", "-o", output)
    broken = tmp_path / "broken.arpa"
    text = a.read_text(encoding="utf-8")
    broken.write_text(text.replace("ngram 2=4", "ngram 2=5"), encoding="utf-8")
    with pytest.raises(DeepSpeechError, match="broken.arpa: the header declares"):
        run_cli(str(broken), str(a), "--weight", "0.5", "-o", output)
    broken.write_text(text.replace("\tx y\n", "\tx v\n"), encoding="utf-8")
    with pytest.raises(DeepSpeechError, match="broken.arpa line 15: 'v' is not among"):
        run_cli(str(broken), str(a), "--weight", "0.5", "-o", output)
    broken.write_text(text.replace("\tx y\n", "\tx </s>\n"), encoding="utf-8")
    with pytest.raises(DeepSpeechError, match="broken.arpa: the 2-gram 'x </s>' is listed twice"):
        run_cli(str(broken), str(a), "--weight", "0.5", "-o", output)


def test_read_arpa_keeps_every_value(tmp_path):
    path = tmp_path / "b.arpa"
    write_estimated(path, 3)
    model, reference = read_arpa(path), ArpaModel.load(path)
    for n, (table, words) in enumerate(zip(model.orders, model.word_ids(), strict=True)):
        ngrams = [tuple(model.vocab[i] for i in row) for row in words]
        assert np.allclose(table.log10_prob, [reference.probs[n][g] for g in ngrams])
        if table.log10_backoff is not None:
            assert np.allclose(table.log10_backoff,
                               [reference.backoffs[n].get(g, 0.0) for g in ngrams])


def test_scoring_backs_off_past_unknown_words(tmp_path):
    """A context word the model lacks (-1) must never be matched as some listed n-gram."""
    path = tmp_path / "b.arpa"
    write_estimated(path, 3)
    model = read_arpa(path)
    last = len(model.vocab) - 1
    # (r - 1, last, w) is listed: a careless key for (r, -1, w) would land on it
    first, _, word = next(t for t in model.word_ids()[2] if t[1] == last and t[0] < last)
    scores = score_ngrams(model, np.array([[first + 1, -1, word], [first + 1, word, -1]]))
    assert scores[0] == pytest.approx(model.orders[0].log10_prob[word])  # nothing but p(w)
    assert scores[1] == -np.inf  # a word the model lacks is never predicted

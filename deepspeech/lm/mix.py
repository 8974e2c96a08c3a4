"""Linear interpolation of two back-off n-gram models into one, as SRILM's ``ngram -mix-lm``.

Decoding with two models at once would need two LM states per beam hypothesis; a static
mix is one ARPA file the decoder loads like any other. The mix M of A (weight λ) and B:

* vocabulary: the union of both; listed n-grams: per order, the union of both lists;
* every listed n-gram gets p_M(w | h) = λ p_A(w | h) + (1 - λ) p_B(w | h), each p_X by X's
  own back-off rule (``score_ngrams``). A word X does not know has p_X = 0, and a context
  holding it is unlisted in X, which backs off past it (SRILM's rule). X's ``<unk>`` is
  mixed like any word: it is not spread over the other model's words;
* every listed context h gets the backoff weight that makes its distribution sum to 1:
  bo(h) = (1 - Σ p_M(w | h)) / (1 - Σ p_M(w | h')), both sums over the w listed after h,
  h' being h without its first word. Orders go upwards, because p_M(w | h') may itself
  back off through the weights of shorter contexts.

The result is exact for listed n-grams and approximate for the rest: a backed-off
p_M(w | h) is bo(h) p_M(w | h'), proportional to the mixed lower-order distribution,
where the true mixture λ bo_A(h) p_A(w | h') + (1 - λ) bo_B(h) p_B(w | h') weighs each
model by its own backoff weight. This needs every listed n-gram's context to be listed,
as in any ARPA file ``assemble`` accepts, and the union keeps that property.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deepspeech.lm.arpa import read_arpa, write_arpa
from deepspeech.lm.kneser_ney import NGramModel, log10_or_zero
from deepspeech.lm.ngrams import assemble, find_rows, score_ngrams
from deepspeech.lm.text import LanguageModelError


def check_weight(weight: float) -> None:
    """Refuse a weight that would drop a model (0, 1) or is no weight at all."""
    if not 0.0 < weight < 1.0:
        raise LanguageModelError(f"--weight must be between 0 and 1 (exclusive), got {weight:g}")


def _word_maps(vocab: list[str], model: NGramModel) -> tuple[np.ndarray, np.ndarray]:
    """Model word id -> union id, and union id -> model word id (-1: not in the model)."""
    to_union = np.searchsorted(np.array(vocab), np.array(model.vocab))
    to_model = np.full(len(vocab), -1, dtype=np.int64)
    to_model[to_union] = np.arange(len(model.vocab))
    return to_union, to_model


def _listed_in(model: NGramModel, ids: np.ndarray) -> np.ndarray:
    """Whether each n-gram ``ids`` (model word ids, -1: not in the model) is listed in it."""
    listed = np.zeros(len(ids), dtype=bool)
    if ids.shape[1] <= model.order:
        known = (ids >= 0).all(axis=1)
        listed[known] = find_rows(model, ids[known]) >= 0
    return listed


def mix(a: NGramModel, b: NGramModel, weight: float) -> NGramModel:
    """The back-off model of λ p_A + (1 - λ) p_B, λ = ``weight`` (see the module's notes)."""
    check_weight(weight)
    vocab = sorted(set(a.vocab) | set(b.vocab))
    maps = [_word_maps(vocab, model) for model in (a, b)]
    order = max(a.order, b.order)
    listed = [maps[0][0][ids] for ids in a.word_ids()]
    listed += [np.zeros((0, n), dtype=np.int64) for n in range(a.order + 1, order + 1)]
    for n, ids in enumerate(b.word_ids()):  # B's n-grams that A does not list
        union_ids = maps[1][0][ids]
        listed[n] = np.vstack([listed[n], union_ids[~_listed_in(a, maps[0][1][union_ids])]])
    # The union's shape first, values after: scoring the mix needs its rows.
    mixed = assemble(vocab, listed, [np.zeros(len(i)) for i in listed],
                     [*(np.zeros(len(i)) for i in listed[:-1]), None])
    ids = mixed.word_ids()
    probs = []
    for table, ngrams in zip(mixed.orders, ids, strict=True):
        p = (weight * 10.0 ** score_ngrams(a, maps[0][1][ngrams])
             + (1.0 - weight) * 10.0 ** score_ngrams(b, maps[1][1][ngrams]))
        table.log10_prob = log10_or_zero(p)
        probs.append(p)
    for n in range(1, order):  # upwards: p_M(w | h') uses the backoffs of shorter contexts
        contexts, children = mixed.orders[n - 1], mixed.orders[n]
        lower = 10.0 ** score_ngrams(mixed, ids[n][:, 1:])
        listed_mass = np.bincount(children.prefix, weights=probs[n], minlength=len(contexts))
        lower_mass = np.bincount(children.prefix, weights=lower, minlength=len(contexts))
        numerator = np.maximum(1.0 - listed_mass, 0.0)
        denominator = 1.0 - lower_mass
        contexts.log10_backoff = log10_or_zero(np.where(
            denominator > 1e-12, numerator / np.maximum(denominator, 1e-12), 1.0))
    return mixed


def mix_lm(a_path: str | Path, b_path: str | Path, output: str | Path,
           weight: float) -> NGramModel:
    """Mix two ARPA files (``a_path`` with ``weight``) and write the result as ARPA."""
    check_weight(weight)  # before reading a hundred MB
    model = mix(read_arpa(a_path), read_arpa(b_path), weight)
    write_arpa(model, output)
    return model

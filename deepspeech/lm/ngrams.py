"""Operations on a finished ``NGramModel``: assembling one from arrays, finding and
scoring n-grams, and restricting it to the words an acoustic model can spell.

A model read from another toolkit's file (``deepspeech.lm.sphinx``) arrives as per-order
arrays of word ids and log10 values; ``assemble`` puts them in the sorted, prefix-linked
form that ``write_arpa`` writes. ``restrict_vocabulary`` then drops the words the
decoder could never output (``e-mail``, ``a.``) without leaving holes in the
distributions: removing words from a back-off model is conditioning on "the next
word is not one of them", so every context's remaining probabilities are divided by
Z(h) = 1 - R(h), the mass it gave to removed words. For a listed context h with
suffix h' (h without its first word)::

    R(h) = sum over listed h w, w removed, of p(w | h)
           + bo(h) * (R(h') - sum over the same w of p(w | h'))

(backed-off mass reaches the removed words that h does not list), and R of the empty
context is the removed words' unigram mass. The listed probabilities become
p(w | h) / Z(h), and the backoff weights bo(h) Z(h') / Z(h), which keeps every backed-off
probability divided by Z(h) too. An unlisted context backs off whole to its suffix and
needs no entry. This needs the suffix of every listed n-gram to be listed, as Kneser-Ney
estimation and Sphinx's trie both guarantee.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deepspeech.lm.kneser_ney import BOS, EOS, LOG10_ZERO, UNK, NGramModel, NGramOrder
from deepspeech.lm.text import LanguageModelError


def _row_keys(table: NGramOrder, size: int) -> np.ndarray:
    """Sorted keys of a table's rows: (prefix row + 1) * vocabulary size + last word."""
    return (table.prefix.astype(np.int64) + 1) * size + table.word


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each wanted key in the sorted ``keys``, -1 where absent."""
    rows = np.searchsorted(keys, wanted)
    found = rows < len(keys)
    found[found] = keys[rows[found]] == wanted[found]
    return np.where(found, rows, -1)


def find_rows(model: NGramModel, ids: np.ndarray) -> np.ndarray:
    """Row of each n-gram ``ids`` (``[count, n]`` word ids) in order n of the model, or -1."""
    size = len(model.vocab)
    rows = np.full(len(ids), -1, dtype=np.int64)
    for j in range(ids.shape[1]):
        wanted = (rows + 1) * size + ids[:, j]
        if j:
            wanted[rows < 0] = -1  # no context row: below every key, so never found
        rows = _lookup(_row_keys(model.orders[j], size), wanted)
    return rows


def score_ngrams(model: NGramModel, ids: np.ndarray) -> np.ndarray:
    """log10 p(w | h) by the ARPA back-off rule for each row ``h w`` of ``ids`` ([count, n]).

    A word id of -1 stands for a word outside the model's vocabulary, as when two models
    are compared over the union of their words. Predicted, it has probability 0 (-inf);
    in a context it makes every context that holds it unlisted (backoff weight 1), so the
    model backs off past it, as SRILM does for the words of a shared vocabulary that one
    model lacks. Contexts longer than the model's order are cut to order - 1 words.
    """
    count, n = ids.shape
    result = np.full(count, -np.inf)
    weight = np.zeros(count)
    unknown_at = np.where(ids[:, :-1] < 0, np.arange(1, n), 0)
    first = np.maximum(unknown_at.max(axis=1, initial=0), n - model.order)
    pending = ids[:, -1] >= 0
    for k in range(n):  # the longest usable context first, then each shorter one
        active = np.flatnonzero(pending & (first <= k))
        if not len(active):
            continue
        rows = find_rows(model, ids[active, k:])
        hit, miss = active[rows >= 0], active[rows < 0]
        result[hit] = weight[hit] + model.orders[n - k - 1].log10_prob[rows[rows >= 0]]
        pending[hit] = False
        if k < n - 1 and len(miss):
            context = find_rows(model, ids[miss, k:-1])
            listed = context >= 0
            weight[miss[listed]] += model.orders[n - k - 2].log10_backoff[context[listed]]
    return result


def assemble(vocab: list[str], ngrams: list[np.ndarray], log10_probs: list[np.ndarray],
             log10_backoffs: list[np.ndarray | None]) -> NGramModel:
    """An ``NGramModel`` from per-order ``[count, n]`` word ids (into ``vocab``) and values.

    Words are renumbered in sorted order and each order's rows sorted, as ARPA lists
    them; every n-gram's context (its first n-1 words) must itself be listed, and no
    n-gram twice.
    """
    sorted_vocab = sorted(vocab)
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[np.argsort(np.array(vocab, dtype=object), kind="stable")] = np.arange(len(vocab))
    model = NGramModel(sorted_vocab)
    for n, (ids, prob, backoff) in enumerate(zip(ngrams, log10_probs, log10_backoffs,
                                                 strict=True), start=1):
        ids = rank[ids]
        prefix = find_rows(model, ids[:, :-1]) if n > 1 else np.full(len(ids), -1)
        if (prefix < 0).any() and n > 1:
            missing = " ".join(sorted_vocab[i] for i in ids[prefix < 0][0])
            raise LanguageModelError(
                f"the {n}-gram {missing!r} has no listed context; an ARPA model needs one")
        keys = (prefix + 1) * len(vocab) + ids[:, -1]
        sort = np.argsort(keys, kind="stable")
        twice = np.flatnonzero(np.diff(keys[sort]) == 0)
        if len(twice):  # find_rows would find only one of them
            words = " ".join(sorted_vocab[i] for i in ids[sort[twice[0]]])
            raise LanguageModelError(f"the {n}-gram {words!r} is listed twice")
        model.orders.append(NGramOrder(
            prefix=prefix[sort], word=ids[sort, -1], log10_prob=np.asarray(prob)[sort],
            log10_backoff=None if backoff is None else np.asarray(backoff)[sort]))
    return model


def _suffix_rows(model: NGramModel, ids: list[np.ndarray]) -> list[np.ndarray]:
    """Per order n >= 2, the row of each n-gram's suffix (first word dropped) in order n-1."""
    suffixes = [np.zeros(len(ids[0]), dtype=np.int64)]  # order 1: the empty context
    for n in range(2, model.order + 1):
        rows = find_rows(model, ids[n - 1][:, 1:])
        if (rows < 0).any():
            missing = " ".join(model.vocab[i] for i in ids[n - 1][rows < 0][0])
            raise LanguageModelError(f"the {n}-gram {missing!r} is listed but its suffix is "
                                     "not; its vocabulary cannot be restricted")
        suffixes.append(rows)
    return suffixes


def restrict_vocabulary(model: NGramModel, keep: Callable[[str], object]) -> NGramModel:
    """The model conditioned on the words ``keep`` accepts (sentence markers always kept).

    The result lists ``<unk>``, never predicted, when the model had none: KenLM warns
    about a model without it on every load.
    """
    kept_word = np.array([w in (BOS, EOS, UNK) or bool(keep(w)) for w in model.vocab])
    ids = model.word_ids()
    suffix = _suffix_rows(model, ids)
    probs = [10.0 ** t.log10_prob for t in model.orders]
    # removed[n][h]: R of the order-n contexts h (order 0: the empty context)
    removed = [np.array([probs[0][~kept_word].sum()])]
    for n in range(1, model.order):
        table, children = model.orders[n - 1], model.orders[n]
        gone = ~kept_word[children.word]
        here = np.bincount(children.prefix[gone], weights=probs[n][gone], minlength=len(table))
        below = np.bincount(children.prefix[gone], weights=probs[n - 1][suffix[n][gone]],
                            minlength=len(table))
        backoff = 10.0 ** table.log10_backoff
        removed.append(here + backoff * (removed[n - 1][suffix[n - 1]] - below))
    keep_rows, log10_probs, log10_backoffs = [], [], []
    for n, table in enumerate(model.orders, start=1):
        rows = kept_word[ids[n - 1]].all(axis=1)
        context = np.zeros(len(table), dtype=np.int64) if n == 1 else table.prefix
        z_context = 1.0 - removed[n - 1][context]
        if (z_context[rows] <= 0).any():
            bad = ids[n - 1][rows & (z_context <= 0)][0][:-1]
            raise LanguageModelError(f"context {' '.join(model.vocab[i] for i in bad)!r} "
                                     "predicts only removed words")
        keep_rows.append(rows)
        log10_probs.append((table.log10_prob - np.log10(np.maximum(z_context, 1e-300)))[rows])
        if table.log10_backoff is None:
            log10_backoffs.append(None)
            continue
        z_self = np.maximum(1.0 - removed[n], 1e-300)
        z_suffix = 1.0 - removed[n - 1][suffix[n - 1]]
        log10_backoffs.append((table.log10_backoff + np.log10(np.maximum(z_suffix, 1e-300))
                               - np.log10(z_self))[rows])
    index = np.cumsum(kept_word) - 1
    vocab = [w for w, k in zip(model.vocab, kept_word, strict=True) if k]
    ngrams = [index[i[rows]] for i, rows in zip(ids, keep_rows, strict=True)]
    if UNK not in vocab:
        vocab.append(UNK)
        ngrams[0] = np.vstack([ngrams[0], [[len(vocab) - 1]]])
        log10_probs[0] = np.append(log10_probs[0], LOG10_ZERO)
        if log10_backoffs[0] is not None:
            log10_backoffs[0] = np.append(log10_backoffs[0], 0.0)
    return assemble(vocab, ngrams, log10_probs, log10_backoffs)

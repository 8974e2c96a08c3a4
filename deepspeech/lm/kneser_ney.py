"""Interpolated modified Kneser-Ney n-gram estimation (Chen & Goodman, 1999).

The whole estimate is a handful of array operations per order, so a corpus of
100k sentences gives a 4-gram model in seconds without any compiled extension:

1. Sentences become word ids framed by ``<s>``/``</s>``; n-grams never cross a
   sentence. Each order's table holds the distinct n-grams sorted by word ids, which
   are assigned in sorted word order, so the tables come out in ARPA's sorted order.
   Every n-gram knows its prefix (context) and its suffix (the (n-1)-gram it backs
   off to) as row indices into the previous order's table.
2. Adjusted counts (Kneser-Ney's key idea): the highest order counts occurrences;
   a lower order counts *distinct left extensions* ("how many contexts does this
   continue?"), except n-grams that start with ``<s>``, which cannot be extended to
   the left and keep their raw count.
3. Per order, discounts D1, D2, D3+ from the count-of-counts n1..n4 of the
   adjusted counts: Y = n1 / (n1 + 2 n2), Dk = k - (k + 1) Y n(k+1) / nk. Tiny
   corpora lack the counts for this; they get KenLM's fallback 0.5, 1.0, 1.5.
4. p(w | h) = max(c(hw) - D(c(hw)), 0) / c(h.) + gamma(h) p(w | h'), with
   gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3 N3+(h.)) / c(h.), and unigrams
   interpolated with the uniform distribution over the vocabulary (``<s>``
   excluded: it is never predicted). The ARPA file stores p(w | h) of the listed
   n-grams and gamma(h) as the backoff weight of h, which makes the ARPA backoff
   rule reproduce the interpolated model exactly.
5. Pruning (``prune=True``) drops n-grams of order >= 3 whose adjusted count is 1,
   except those that are the prefix or the suffix of a kept longer n-gram (an
   ARPA file must hold them). The backoff weight of a context that lost children
   is then recomputed so that its distribution still sums to one:
   bo(h) = (1 - sum of kept p(w | h)) / (1 - sum over the same w of p(w | h')).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from deepspeech.lm.text import LanguageModelError

log = logging.getLogger(__name__)

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
# KenLM's --discount_fallback values, for orders whose count-of-counts cannot
# support the Chen & Goodman estimate (typically tiny corpora).
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
# log10 probability written for "impossible" (<s> as a predicted word), as SRILM does.
LOG10_ZERO = -99.0


@dataclass
class NGramOrder:
    """The n-grams of one order listed in the model, in sorted (ARPA) order."""

    prefix: np.ndarray  # row of the (n-1)-gram context in the previous order (order 1: -1)
    word: np.ndarray  # id of the last word
    log10_prob: np.ndarray
    log10_backoff: np.ndarray | None  # None for the highest order
    # Kneser-Ney's D1, D2, D3+ (zeros for a model read from a file rather than estimated)
    discounts: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __len__(self) -> int:
        return len(self.word)


@dataclass
class NGramModel:
    """A backoff n-gram model: the vocabulary (sorted) and one table per order."""

    vocab: list[str]
    orders: list[NGramOrder] = field(default_factory=list)

    @property
    def order(self) -> int:
        return len(self.orders)

    def word_ids(self) -> list[np.ndarray]:
        """Per order, the word ids of every listed n-gram as an ``[count, n]`` array."""
        result: list[np.ndarray] = []
        for table in self.orders:
            last = table.word[:, None]
            result.append(last if not result else np.hstack([result[-1][table.prefix], last]))
        return result


@dataclass
class _Table:
    """All distinct n-grams of one order (pruned or not), as parallel arrays."""

    prefix: np.ndarray
    suffix: np.ndarray
    word: np.ndarray
    first: np.ndarray
    raw: np.ndarray


def _vocabulary(counts: Counter, vocab_limit: int) -> list[str]:
    words = [w for w in counts if w not in (BOS, EOS, UNK)]
    if vocab_limit and len(words) > vocab_limit:
        # Most frequent first; ties broken alphabetically so the result is deterministic.
        words = sorted(words, key=lambda w: (-counts[w], w))[:vocab_limit]
    return sorted({*words, BOS, EOS, UNK})


class _Index(dict):
    """Word -> id, with every word outside the vocabulary mapped to ``<unk>``."""

    def __init__(self, vocab: list[str]) -> None:
        # A corpus word spelled like a sentence marker is text, not a marker: it
        # becomes <unk>; the real markers are set by position.
        super().__init__((w, i) for i, w in enumerate(vocab))
        self.unk = self[UNK]
        self[BOS] = self[EOS] = self.unk

    def __missing__(self, word: str) -> int:
        return self.unk


def _encode(sentences: Iterable[Sequence[str]], vocab_limit: int):
    flat: list[str] = []
    lengths: list[int] = []
    for sentence in sentences:
        flat.append(BOS)
        flat.extend(sentence)
        flat.append(EOS)
        lengths.append(len(sentence) + 2)
    if not lengths:
        raise LanguageModelError("the corpus holds no sentences (is it empty?)")
    vocab = _vocabulary(Counter(flat), vocab_limit)
    ids = np.fromiter(map(_Index(vocab).__getitem__, flat), dtype=np.int64, count=len(flat))
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths_arr) - 1
    ids[ends - lengths_arr + 1] = vocab.index(BOS)
    ids[ends] = vocab.index(EOS)
    # Last position of the sentence each position belongs to: n-grams stop there.
    limit = np.repeat(ends, lengths_arr)
    return vocab, ids, limit


def _group(keys: np.ndarray):
    """Distinct keys (sorted), one position of each, the row of every key, counts."""
    order = np.argsort(keys)  # any occurrence will do, so no stable sort is needed
    ordered = keys[order]
    new = np.ones(len(keys), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    rows = np.empty(len(keys), dtype=np.int64)
    rows[order] = np.cumsum(new) - 1
    counts = np.diff(np.append(np.flatnonzero(new), len(keys)))
    return ordered[new], order[new], rows, counts


def _count(ids: np.ndarray, limit: np.ndarray, order: int, size: int) -> list[_Table]:
    """Distinct n-grams per order with their raw counts, prefixes and suffixes."""
    positions = np.arange(len(ids), dtype=np.int64)
    vocab_ids = np.arange(size, dtype=np.int64)
    tables = [_Table(prefix=np.full(size, -1), suffix=np.full(size, -1), word=vocab_ids,
                     first=vocab_ids, raw=np.bincount(ids, minlength=size))]
    row_at = ids  # row of the n-gram that starts at each position (order 1: the word)
    for n in range(2, order + 1):
        valid = positions[limit - positions >= n - 1]
        # An n-gram is its prefix's row and its last word: one int64 key.
        uniq, first_at, rows, raw = _group(row_at[valid] * size + ids[valid + n - 1])
        prefix = uniq // size
        tables.append(_Table(
            prefix=prefix,
            suffix=row_at[valid[first_at] + 1],
            word=uniq % size,
            first=tables[-1].first[prefix],
            raw=raw,
        ))
        row_at = np.full(len(ids), -1, dtype=np.int64)
        row_at[valid] = rows
    return tables


def _adjusted_counts(tables: list[_Table], bos: int) -> list[np.ndarray]:
    adjusted = []
    for n, table in enumerate(tables, start=1):
        if n == len(tables):
            adjusted.append(table.raw)
            continue
        extensions = np.bincount(tables[n].suffix, minlength=len(table.raw))
        adjusted.append(np.where(table.first == bos, table.raw, extensions))
    return adjusted


def discounts(counts: np.ndarray, order: int) -> tuple[float, float, float]:
    """Chen & Goodman's D1, D2, D3+ from count-of-counts, or the fallback if unusable."""
    nk = [int(np.count_nonzero(counts == k)) for k in (1, 2, 3, 4)]
    if min(nk[:3]) > 0:
        y = nk[0] / (nk[0] + 2 * nk[1])
        values = tuple(k - (k + 1) * y * nk[k] / nk[k - 1] for k in (1, 2, 3))
        if all(0.0 <= d <= k for k, d in zip((1, 2, 3), values, strict=True)):
            return values  # type: ignore[return-value]
    log.warning("order %d: counts of counts n1..n4 = %s give no valid Kneser-Ney discounts "
                "(corpus too small or unusual); using %s", order, nk, FALLBACK_DISCOUNTS)
    return FALLBACK_DISCOUNTS


def _discount_of(counts: np.ndarray, d: tuple[float, float, float]) -> np.ndarray:
    return np.array((0.0, *d))[np.minimum(counts, 3)]


def _kept(tables: list[_Table], adjusted: list[np.ndarray], prune: bool) -> list[np.ndarray]:
    """Rows listed in the model per order: singletons of order >= 3 go when pruning."""
    kept: list[np.ndarray] = [np.ones(0, dtype=bool)] * len(tables)
    for n in range(len(tables), 0, -1):
        mask = adjusted[n - 1] > 1 if prune and n >= 3 else np.ones(len(adjusted[n - 1]), bool)
        if n < len(tables) and prune and n >= 3:
            longer, keep = tables[n], kept[n]
            mask[longer.prefix[keep]] = True
            mask[longer.suffix[keep]] = True
        kept[n - 1] = mask
    return kept


def _sum_by(index: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``values`` per ``index`` (float64 even when empty)."""
    return np.bincount(index, weights=values, minlength=size).astype(np.float64, copy=False)


def log10_or_zero(values: np.ndarray) -> np.ndarray:
    """log10 of probabilities or weights as ARPA stores them: at least ``LOG10_ZERO``."""
    with np.errstate(divide="ignore"):
        out = np.where(values > 0, np.log10(np.maximum(values, 1e-300)), LOG10_ZERO)
    return np.maximum(out, LOG10_ZERO) + 0.0  # + 0.0 turns -0.0 into 0.0


def estimate(
    sentences: Iterable[Sequence[str]],
    order: int,
    vocab_limit: int = 0,
    prune: bool = False,
) -> NGramModel:
    """Estimate an interpolated modified Kneser-Ney model from tokenized sentences."""
    if order < 1:
        raise LanguageModelError(f"order must be at least 1, got {order}")
    if vocab_limit < 0:
        raise LanguageModelError(f"vocabulary limit must not be negative, got {vocab_limit}")
    vocab, ids, limit = _encode(sentences, vocab_limit)
    size, bos = len(vocab), vocab.index(BOS)
    tables = _count(ids, limit, order, size)
    adjusted = _adjusted_counts(tables, bos)
    kept = _kept(tables, adjusted, prune)

    # Unigrams: discounted adjusted counts plus a share of the uniform distribution.
    counts = adjusted[0].copy()
    counts[bos] = 0
    d = discounts(counts[counts > 0], 1)
    reduced = _discount_of(counts, d)
    total = counts.sum()
    prob = (counts - reduced) / total + reduced.sum() / total / (size - 1)
    prob[bos] = 0.0
    probs, backoffs, disc = [prob], [], [d]

    for n in range(2, order + 1):
        table, lower = tables[n - 1], probs[-1]
        counts = adjusted[n - 1]
        d = discounts(counts, n) if len(counts) else FALLBACK_DISCOUNTS
        reduced = _discount_of(counts, d)
        n_contexts = len(tables[n - 2].raw)
        context_total = _sum_by(table.prefix, counts, n_contexts)
        gamma = _sum_by(table.prefix, reduced, n_contexts)
        has_children = context_total > 0
        gamma[has_children] /= context_total[has_children]
        lower_of = lower[table.suffix]
        prob = (counts - reduced) / np.maximum(context_total[table.prefix], 1) \
            + gamma[table.prefix] * lower_of

        backoff = np.where(has_children, gamma, 1.0)
        keep = kept[n - 1]
        if not keep.all():
            lost = np.bincount(table.prefix[~keep], minlength=n_contexts) > 0
            kept_mass = _sum_by(table.prefix[keep], prob[keep], n_contexts)
            lower_mass = _sum_by(table.prefix[keep], lower_of[keep], n_contexts)
            numerator = np.maximum(1.0 - kept_mass[lost], 0.0)
            denominator = 1.0 - lower_mass[lost]
            backoff[lost] = np.where(denominator > 1e-12,
                                     numerator / np.maximum(denominator, 1e-12), 1.0)
            # What the ARPA backoff rule gives for a dropped n-gram (its context may be
            # dropped too, then with weight 1): the next order interpolates with this.
            effective = np.where(kept[n - 2], backoff, 1.0)[table.prefix] * lower_of
            prob = np.where(keep, prob, effective)
        backoffs.append(backoff)
        probs.append(prob)
        disc.append(d)

    model = NGramModel(vocab=vocab)
    for n in range(1, order + 1):
        keep = kept[n - 1]
        table = tables[n - 1]
        if n == 1:
            prefix = table.prefix
        else:
            new_row = np.cumsum(kept[n - 2]) - 1  # rows of the previous order once pruned
            prefix = new_row[table.prefix[keep]]
        model.orders.append(NGramOrder(
            prefix=prefix,
            word=table.word[keep],
            log10_prob=log10_or_zero(probs[n - 1][keep]),
            log10_backoff=log10_or_zero(backoffs[n - 1][keep]) if n < order else None,
            discounts=tuple(float(x) for x in disc[n - 1]),  # type: ignore[arg-type]
        ))
    return model

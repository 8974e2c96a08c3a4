"""Read a CMU Sphinx trie language model (``.lm.bin``, pocketsphinx's) into an ``NGramModel``.

Pocketsphinx's own ARPA writers cannot be used for its general English model
(``en-us.lm.bin``): the one in pocketsphinx 5.1.1 and Debian's ``sphinx_lm_convert``
abort on it, because its header declares a few more bigrams than its trie holds, and
pocketsphinx 5.1.1's Python ``NGramModel.write`` writes nonsense numbers and crashes.
This reader walks the trie itself, in numpy, and trusts the trie's pointers for the
counts. The layout (sphinxbase/pocketsphinx ``ngram_model_trie.c``, ``lm_trie.c``,
``lm_trie_quant.c``, all little-endian):

* ``"Trie Language Model"``, the order (1 byte), a count per order (uint32);
* order > 1: an int32 (formerly the quantization type), then the quantization
  tables, 2^16 float32 each: for each middle order (2 .. N-1) probabilities then
  backoffs, then the highest order's probabilities;
* count(1) + 1 unigrams of {float32 prob, float32 backoff, uint32 next}: the last is
  a sentinel whose ``next`` ends the bigram range;
* the bit-packed n-gram arrays, middle orders then the highest, sized from the header
  counts. An entry is the word id, then (middle) a 16-bit backoff code, a 16-bit
  probability code and the index of its first child, or (highest) a 16-bit probability
  code. The entry after the last holds the end pointer of the last child range;
* an int32 byte count, then the words, each NUL-terminated, in id order.

A trie path runs backwards through an n-gram: the unigram is the predicted word, its
children are the word before it, and so on; the node for the path ``w_n .. w_1`` holds
p(w_n | w_1 .. w_n-1) and the backoff of ``w_1 .. w_n``. Sphinx inserts a "blank" node
(its backoff-computed probability, backoff 1) where a listed n-gram's shorter suffix is
not listed; written out, such nodes are ordinary n-grams of the same value. Probabilities
are stored in Sphinx's log base 1.0001 and, above the unigrams, quantized to 2^16 levels
per order: the ARPA values are those levels, not the model's original numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from deepspeech.lm.kneser_ney import NGramModel
from deepspeech.lm.ngrams import assemble
from deepspeech.lm.text import LanguageModelError

MAGIC = b"Trie Language Model"
# Sphinx stores log probabilities in base 1.0001 (its logmath default, used by
# sphinx_lm_convert when the model was made); the file does not record it.
LOG10_OF_BASE = math.log10(1.0001)
_QUANT_BITS = 16
_QUANT_LEVELS = 1 << _QUANT_BITS
_UNIGRAM = np.dtype([("prob", "<f4"), ("backoff", "<f4"), ("next", "<u4")])


def _required_bits(value: int) -> int:
    return int(value).bit_length()


def _packed_size(entries: int, vocab: int, other_bits: int) -> int:
    """Bytes of one bit-packed array: entries + 1 slots, then 8 bytes of read slack."""
    return ((1 + entries) * (_required_bits(vocab) + other_bits) + 7) // 8 + 8


class _Reader:
    """Sequential reads from the file's bytes, each failure naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        self.pos = 0

    def take(self, dtype: str | np.dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        end = self.pos + dtype.itemsize * count
        if end > len(self.data):
            raise LanguageModelError(f"{self.path}: truncated Sphinx trie language model")
        values = np.frombuffer(self.data, dtype, count, self.pos)
        self.pos = end
        return values


class _Packed:
    """One bit-packed n-gram array: fields read for many entries at once."""

    def __init__(self, memory: np.ndarray, entry_bits: int) -> None:
        self.memory = memory
        self.entry_bits = entry_bits

    def field(self, entries: np.ndarray, offset: int, bits: int) -> np.ndarray:
        """The ``bits``-wide field at bit ``offset`` of each entry (at most 25 bits)."""
        at = entries.astype(np.int64) * self.entry_bits + offset
        byte, shift = at >> 3, (at & 7).astype(np.uint32)
        word = np.zeros(len(at), dtype=np.uint32)
        for i in range(4):
            word |= self.memory[byte + i].astype(np.uint32) << np.uint32(8 * i)
        return (word >> shift) & np.uint32((1 << bits) - 1)


def read_sphinx_lm(path: str | Path) -> NGramModel:
    """The n-grams of a Sphinx trie ``.lm.bin``, with log10 values, as an ``NGramModel``."""
    path = Path(path)
    if not path.is_file():
        raise LanguageModelError(f"{path}: language model file not found")
    reader = _Reader(path)
    if reader.data[:len(MAGIC)] != MAGIC:
        raise LanguageModelError(f"{path}: not a Sphinx trie language model (no "
                                 f"{MAGIC.decode()!r} header); is it ARPA or DMP?")
    reader.pos = len(MAGIC)
    order = int(reader.take("u1", 1)[0])
    counts = [int(c) for c in reader.take("<u4", order)]
    vocab_size = counts[0]
    tables = None
    if order > 1:
        reader.take("<i4", 1)
        tables = reader.take("<f4", _QUANT_LEVELS * (2 * (order - 2) + 1)).astype(np.float64)
        tables = tables.reshape(-1, _QUANT_LEVELS)
    unigrams = reader.take(_UNIGRAM, vocab_size + 1)
    arrays = []
    for n in range(2, order + 1):
        other = 2 * _QUANT_BITS + _required_bits(counts[n]) if n < order else _QUANT_BITS
        size = _packed_size(counts[n - 1], vocab_size, other)
        arrays.append(_Packed(reader.take("u1", size), _required_bits(vocab_size) + other))
    length = int(reader.take("<i4", 1)[0])
    words = bytes(reader.take("u1", length)).split(b"\0")[:-1]
    if len(words) != vocab_size:
        raise LanguageModelError(f"{path}: {len(words)} words for {vocab_size} unigrams")
    vocab = [w.decode("utf-8") for w in words]

    # Walk the trie level by level: paths[k][e] is entry e's path (predicted word first).
    word_bits = _required_bits(vocab_size)
    paths = [np.arange(vocab_size, dtype=np.int64)[:, None]]
    log10_probs = [unigrams["prob"][:-1].astype(np.float64) * LOG10_OF_BASE]
    log10_backoffs = [unigrams["backoff"][:-1].astype(np.float64) * LOG10_OF_BASE]
    starts = unigrams["next"].astype(np.int64)  # child ranges of the level above, + end
    for n, packed in enumerate(arrays, start=2):
        entries = np.arange(starts[-1], dtype=np.int64)
        if starts[-1] > counts[n - 1] + 1 or np.any(np.diff(starts) < 0):
            raise LanguageModelError(f"{path}: corrupt trie pointers at order {n}")
        parent = np.searchsorted(starts, entries, side="right") - 1
        word = packed.field(entries, 0, word_bits).astype(np.int64)
        paths.append(np.hstack([paths[-1][parent], word[:, None]]))
        if n == order:  # the word, then the probability's code
            code = packed.field(entries, word_bits, _QUANT_BITS)
            log10_probs.append(tables[-1][code] * LOG10_OF_BASE)
            break
        # a middle order: the word, the backoff's code, the probability's code, next
        code = packed.field(entries, word_bits + _QUANT_BITS, _QUANT_BITS)
        log10_probs.append(tables[2 * (n - 2)][code] * LOG10_OF_BASE)
        code = packed.field(entries, word_bits, _QUANT_BITS)
        log10_backoffs.append(tables[2 * (n - 2) + 1][code] * LOG10_OF_BASE)
        ends = np.append(entries, len(entries))
        starts = packed.field(ends, word_bits + 2 * _QUANT_BITS,
                              _required_bits(counts[n])).astype(np.int64)
    if order == 1:
        log10_backoffs = []
    return assemble(vocab, [p[:, ::-1] for p in paths], log10_probs, [*log10_backoffs, None])

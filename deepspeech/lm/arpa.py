"""ARPA back-off language model files: write ours, read any.

The format (as written by SRILM and KenLM's lmplz, read by KenLM and flashlight)::

    \\data\\
    ngram 1=<count>
    ...
    \\1-grams:
    <log10 p(w)>  <w>  <log10 backoff(w)>
    ...
    \\N-grams:
    <log10 p(wN | w1..wN-1)>  <w1 .. wN>
    \\end\\

The probability of a word after a context h is the listed one when ``h w`` is
listed; otherwise backoff(h) times the probability after h without its first
word (backoff 1 when h is not listed). ``ArpaModel`` implements exactly this
rule in plain Python: slow, but independent of the writer, which is what tests
and sanity checks need. ``read_arpa`` reads a file into an ``NGramModel``'s arrays
instead, for whole-model operations (mixing) on models of millions of n-grams.
"""

from __future__ import annotations

import gzip
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from deepspeech.files import atomic_write
from deepspeech.lm.kneser_ney import BOS, EOS, UNK, NGramModel
from deepspeech.lm.ngrams import assemble
from deepspeech.lm.text import LanguageModelError

# Eight decimals: rounding must not spoil "probabilities sum to one" at 1e-6.
_DECIMALS = 8
# "0000" .. "9999" as one 4-byte item each: gathering items is far faster than rows.
_DIGITS = np.array([[ord(c) for c in f"{i:04d}"] for i in range(10_000)],
                   dtype=np.uint8).view(np.uint32).ravel()
# Bytes formatted per step: bounds the memory of the blocks below.
_BLOCK_BYTES = 32 << 20

# Python's float formatting costs about a microsecond per number, which made
# writing a few million n-grams the slowest step of building a model. Lines are
# instead assembled as fixed-width byte blocks, one slot per field, padded with
# NUL bytes that are dropped at the end: a few array operations per block.


def _numbers(values: np.ndarray, out: np.ndarray) -> None:
    """``"%.8f" % v`` for every value into the NUL-padded ``[rows, 12]`` byte block ``out``."""
    values = np.clip(values, -99.0, 99.0)
    scaled = np.rint(np.abs(values) * 10**_DECIMALS).astype(np.int64)
    whole, fraction = np.divmod(scaled, 10**_DECIMALS)
    out[:, 0] = np.where((values < 0) & (scaled > 0), ord("-"), 0)
    out[:, 1:3] = _DIGITS[whole].view(np.uint8).reshape(-1, 4)[:, 2:]
    out[:, 1] *= whole >= 10
    out[:, 3] = ord(".")
    out[:, 4:8] = _DIGITS[fraction // 10_000].view(np.uint8).reshape(-1, 4)
    out[:, 8:12] = _DIGITS[fraction % 10_000].view(np.uint8).reshape(-1, 4)


def _lines(words: np.ndarray, spellings: np.ndarray, prob: np.ndarray,
           backoff: np.ndarray | None) -> bytes:
    """ARPA lines ``prob<TAB>w1 w2 ..<TAB>backoff``; ``spellings``: NUL-padded, one per word."""
    rows, order = words.shape
    width = spellings.dtype.itemsize
    number = 4 + _DECIMALS
    total = number + 1 + order * (width + 1) + (number + 1 if backoff is not None else 0)
    block = np.zeros((rows, total), dtype=np.uint8)
    _numbers(prob, block[:, :number])
    at = number
    for j in range(order):
        block[:, at] = ord("\t" if j == 0 else " ")
        block[:, at + 1:at + 1 + width] = spellings[words[:, j]].view(np.uint8).reshape(rows, -1)
        at += width + 1
    if backoff is not None:
        block[:, at] = ord("\t")
        _numbers(backoff, block[:, at + 1:at + 1 + number])
    block[:, -1] = ord("\n")
    return block[block != 0].tobytes()


def write_arpa(model: NGramModel, path: str | Path) -> None:
    """Write ``model`` as an ARPA file, atomically (temp file + rename)."""
    if any("\0" in w for w in model.vocab):
        raise LanguageModelError("a word holds a NUL character; clean the corpus")
    encoded = [w.encode("utf-8") for w in model.vocab]
    width = max(len(w) for w in encoded)
    # One fixed-size item per word (NUL-padded), gathered whole like the digits above.
    spellings = np.array(encoded, dtype=f"S{width}").view(f"V{width}")
    with atomic_write(path, "wb") as out:
        out.write(b"\\data\\\n")
        for n, table in enumerate(model.orders, start=1):
            out.write(f"ngram {n}={len(table)}\n".encode())
        if model.order == 1:
            # KenLM refuses unigram-only files; an empty bigram section is the same model.
            out.write(b"ngram 2=0\n")
        word_ids = model.word_ids()
        for n, (table, words) in enumerate(zip(model.orders, word_ids, strict=True), start=1):
            out.write(f"\n\\{n}-grams:\n".encode())
            rows = max(1, _BLOCK_BYTES // (n * (width + 1) + 27))
            for i in range(0, len(table), rows):
                part = slice(i, i + rows)
                backoff = None if table.log10_backoff is None else table.log10_backoff[part]
                out.write(_lines(words[part], spellings, table.log10_prob[part], backoff))
        if model.order == 1:
            out.write(b"\n\\2-grams:\n")
        out.write(b"\n\\end\\\n")


def _open(path: Path) -> IO[str]:
    if not path.is_file():
        raise LanguageModelError(f"{path}: language model file not found")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def is_arpa(path: str | Path) -> bool:
    """True when the file starts like an ARPA model (KenLM binaries do not)."""
    try:
        with _open(Path(path)) as handle:
            for line in handle:
                if line.strip():
                    return line.strip() == "\\data\\"
    except (UnicodeDecodeError, OSError, EOFError):
        return False
    return False


def _sections(path: Path) -> Iterator[tuple[int, int, list[str]]]:
    """(order, line number, fields) for every n-gram line of an ARPA file (header: order 0)."""
    order = 0
    try:
        with _open(path) as handle:
            for number, line in enumerate(handle, start=1):
                line = line.strip()
                if not line:
                    continue
                if line.startswith("\\"):
                    if line == "\\end\\":
                        return
                    if line.endswith("-grams:"):
                        try:
                            order = int(line[1:-len("-grams:")])
                        except ValueError:
                            raise LanguageModelError(
                                f"{path} line {number}: bad section header {line!r}") from None
                    continue
                if order:
                    yield order, number, line.split()
                elif line.startswith("ngram ") and "=" in line:
                    # The header ("ngram 3=1234"): order 0, fields [n, count].
                    yield 0, number, line[len("ngram "):].replace("=", " ").split()
    except UnicodeDecodeError as exc:
        raise LanguageModelError(
            f"{path}: not a text ARPA file ({exc.reason}); a KenLM binary cannot be read here"
        ) from None


def read_unigrams(path: str | Path) -> list[str]:
    """The words of the 1-gram section (sentence markers and ``<unk>`` included)."""
    path = Path(path)
    words = []
    for order, number, fields in _sections(path):
        if order == 0:
            continue
        if order > 1:
            break
        if len(fields) < 2:
            raise LanguageModelError(f"{path} line {number}: malformed 1-gram line")
        words.append(fields[1])
    if not words:
        raise LanguageModelError(f"{path}: no 1-grams found; is this an ARPA file?")
    return words


def read_arpa(path: str | Path) -> NGramModel:
    """An ARPA file as an ``NGramModel`` (sorted, prefix-linked arrays), checked as KenLM does.

    Values go straight into typed arrays, one line at a time: a 124 MB model reads in
    seconds and a few hundred MB, where ``ArpaModel``'s dictionaries would take gigabytes.
    A missing backoff weight is 1 (log10 0), as in SRILM's files.
    """
    path = Path(path)
    index: dict[str, int] = {}
    declared: list[int] = []
    ids: list[array] = []
    probs: list[array] = []
    backoffs: list[array] = []
    for order, number, fields in _sections(path):
        if order == 0:
            if len(fields) != 2 or not all(f.isdigit() for f in fields):
                raise LanguageModelError(f"{path} line {number}: bad header line")
            declared.append(int(fields[1]))
            continue
        while len(ids) < order:
            ids.append(array("q"))
            probs.append(array("d"))
            backoffs.append(array("d"))
        if len(fields) not in (order + 1, order + 2):
            raise LanguageModelError(
                f"{path} line {number}: expected {order} word(s) and 1-2 numbers")
        if order == 1:
            if fields[1] in index:
                raise LanguageModelError(f"{path} line {number}: {fields[1]!r} listed twice")
            index[fields[1]] = len(index)
        try:
            ids[order - 1].extend(map(index.__getitem__, fields[1:order + 1]))
            probs[order - 1].append(float(fields[0]))
            backoffs[order - 1].append(float(fields[-1]) if len(fields) == order + 2 else 0.0)
        except KeyError as exc:
            raise LanguageModelError(
                f"{path} line {number}: {exc.args[0]!r} is not among the 1-grams") from None
        except ValueError:
            raise LanguageModelError(f"{path} line {number}: not a number") from None
    found = [len(p) for p in probs]
    found += [0] * (len(declared) - len(found))
    if not index:
        raise LanguageModelError(f"{path}: no 1-grams found; is this an ARPA file?")
    if found != declared:
        raise LanguageModelError(f"{path}: the header declares {declared} n-grams per order, "
                                 f"the file lists {found} (truncated?)")
    while len(ids) > 1 and not len(ids[-1]):  # "ngram 2=0": a unigram model written for KenLM
        ids.pop()
    n_orders = len(ids)
    try:
        return assemble(list(index),
                        [np.frombuffer(w, dtype=np.int64).reshape(-1, n)
                         for n, w in enumerate(ids, start=1)],
                        [np.frombuffer(p, dtype=np.float64) for p in probs[:n_orders]],
                        [*(np.frombuffer(b, dtype=np.float64) for b in backoffs[:n_orders - 1]),
                         None])
    except LanguageModelError as exc:
        raise LanguageModelError(f"{path}: {exc}") from None


class ArpaModel:
    """An ARPA model in dictionaries, scored with the back-off rule (for checks and tests)."""

    def __init__(self, probs: list[dict[tuple[str, ...], float]],
                 backoffs: list[dict[tuple[str, ...], float]]) -> None:
        self.probs = probs
        self.backoffs = backoffs

    @property
    def order(self) -> int:
        return len(self.probs)

    @property
    def vocabulary(self) -> list[str]:
        return [ngram[0] for ngram in self.probs[0]]

    @classmethod
    def load(cls, path: str | Path) -> ArpaModel:
        path = Path(path)
        probs: list[dict[tuple[str, ...], float]] = []
        backoffs: list[dict[tuple[str, ...], float]] = []
        for order, number, fields in _sections(path):
            if order == 0:  # the header: an order may have no n-grams at all
                while fields[0].isdigit() and len(probs) < int(fields[0]):
                    probs.append({})
                    backoffs.append({})
                continue
            while len(probs) < order:
                probs.append({})
                backoffs.append({})
            if len(fields) not in (order + 1, order + 2):
                raise LanguageModelError(
                    f"{path} line {number}: expected {order} word(s) and 1-2 numbers")
            ngram = tuple(fields[1:order + 1])
            try:
                probs[order - 1][ngram] = float(fields[0])
                if len(fields) == order + 2:
                    backoffs[order - 1][ngram] = float(fields[-1])
            except ValueError:
                raise LanguageModelError(f"{path} line {number}: not a number") from None
        if not probs or not probs[0]:
            raise LanguageModelError(f"{path}: no n-grams found; is this an ARPA file?")
        return cls(probs, backoffs)

    def log10_prob(self, word: str, context: Sequence[str] = ()) -> float:
        """log10 p(word | context) by the ARPA back-off rule; unknown words are ``<unk>``."""
        if (word,) not in self.probs[0]:
            word = UNK
        context = tuple(w if (w,) in self.probs[0] else UNK for w in context)
        context = context[max(0, len(context) - self.order + 1):] if self.order > 1 else ()
        weight = 0.0
        while True:
            prob = self.probs[len(context)].get((*context, word))
            if prob is not None:
                return weight + prob
            if not context:
                raise LanguageModelError(f"word {word!r} is not in the model's 1-grams")
            weight += self.backoffs[len(context) - 1].get(context, 0.0)
            context = context[1:]

    def score(self, words: Sequence[str], bos: bool = True, eos: bool = True) -> float:
        """log10 probability of a sentence (``<s>``/``</s>`` added as KenLM does)."""
        context: list[str] = [BOS] if bos else []
        total = 0.0
        for word in [*words, EOS] if eos else words:
            total += self.log10_prob(word, context)
            context.append(word)
        return total

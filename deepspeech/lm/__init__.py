"""N-gram language models for beam search: corpus reading, Kneser-Ney estimation, ARPA,
mixing.

``build_lm`` turns a text corpus (or a manifest's transcripts) into an ARPA file
that KenLM, and therefore the flashlight beam search decoder, loads; ``mix_lm``
interpolates two ARPA files into one. Written in the project with numpy, so no
compiled tool (lmplz, SRILM) is needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from deepspeech.data.text import TextNormalizer
from deepspeech.lm.arpa import ArpaModel, is_arpa, read_unigrams, write_arpa
from deepspeech.lm.kneser_ney import BOS, EOS, UNK, NGramModel, estimate
from deepspeech.lm.mix import mix_lm
from deepspeech.lm.text import CHAR_SEPARATOR, LanguageModelError, iter_sentences

__all__ = [
    "BOS", "CHAR_SEPARATOR", "EOS", "UNK", "ArpaModel", "LanguageModelError", "NGramModel",
    "build_lm", "estimate", "is_arpa", "iter_sentences", "mix_lm", "read_unigrams", "write_arpa",
]

log = logging.getLogger(__name__)

# KenLM is compiled for at most this order, both in flashlight-text (the decoder) and
# in the kenlm module; a higher one loads nowhere here.
MAX_ORDER = 6


def build_lm(
    corpus: str | Path | Sequence[str | Path],
    output: str | Path,
    order: int = 3,
    vocab_limit: int = 0,
    prune: bool = False,
    units: str = "word",
    normalizer: TextNormalizer | None = None,
) -> NGramModel:
    """Estimate a Kneser-Ney model from one or more corpus files and write it as ARPA.

    Several files are one corpus: a general text and a training manifest's transcripts
    give the LM both the vocabulary of the language and the wording of the domain,
    without a concatenated copy of either on disk.
    """
    if not 1 <= order <= MAX_ORDER:
        raise LanguageModelError(
            f"--order must be from 1 to {MAX_ORDER} (the highest the decoder's KenLM loads), "
            f"got {order}")
    if vocab_limit < 0:
        raise LanguageModelError(f"--vocab-limit must not be negative, got {vocab_limit}")
    start = time.perf_counter()
    corpora = [corpus] if isinstance(corpus, (str, Path)) else list(corpus)
    sentences = [sentence for path in corpora
                 for sentence in iter_sentences(path, normalizer, units)]
    names = ", ".join(str(path) for path in corpora)
    if not sentences:
        raise LanguageModelError(f"{names}: no sentences left after normalization (empty file?)")
    model = estimate(sentences, order, vocab_limit=vocab_limit, prune=prune)
    write_arpa(model, output)
    log.info("%s: %d sentences -> %s (%s) in %.1f s", names, len(sentences), output,
             ", ".join(f"{n}-grams: {len(t)}" for n, t in enumerate(model.orders, start=1)),
             time.perf_counter() - start)
    return model

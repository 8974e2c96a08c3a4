"""Corpus preparers: one module per corpus, each with ``prepare_x()`` and ``download_x()``.

``prepare_x(root, output, ...)`` reads a corpus in its own layout and writes one
JSON Lines manifest per split (``train.jsonl``, ``dev.jsonl`` ...) with header
durations, speakers and paths relative to ``output``; it returns a
``PreparedCorpus`` whose ``format()`` is the summary the command prints.
``download_x(target_dir)`` fetches and unpacks the corpus where a network exists
(Common Voice needs a manual download; your own folder has nothing to fetch) and
returns the folder to prepare from.

    librispeech   OpenSLR 12 and Mini LibriSpeech: every part, any audio, gender, dev carved out
    an4           CMU AN4, NIST SPHERE (or raw), train/dev by speaker + test
    commonvoice   Mozilla Common Voice, MP3 + train/dev/test.tsv
    fsdd          Free Spoken Digit Dataset, single or connected digits
    folder        your own a.wav + a.txt pairs
    kaldi         a Kaldi data directory (wav.scp, text, utt2spk, segments), one split
    speechocean762  OpenSLR 101, a Kaldi directory: train/dev by speaker (children and
                  adults in both), age and gender kept; test when present

Each module ends with its ``PREPARER`` record (``common.Preparer``): name, both
functions, help and the command-line options ``prepare_x`` takes beyond ``root``,
``output`` and ``workers``. ``PREPARERS`` below is the registry ``deepspeech data
prepare`` is built from; a new corpus is one module plus one line there. Shared
helpers (speaker splits, downloads, summaries) live in ``common.py``.
"""

from __future__ import annotations

from deepspeech.data.prepare import (
    an4,
    commonvoice,
    folder,
    fsdd,
    kaldi,
    librispeech,
    speechocean762,
)
from deepspeech.data.prepare.common import Option, Preparer

__all__ = ["PREPARERS", "Option", "Preparer"]

# In the order the command line lists them.
PREPARERS: dict[str, Preparer] = {
    preparer.name: preparer
    for preparer in (librispeech.PREPARER, an4.PREPARER, commonvoice.PREPARER, fsdd.PREPARER,
                     folder.PREPARER, kaldi.PREPARER, speechocean762.PREPARER)
}

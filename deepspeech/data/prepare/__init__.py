"""Corpus preparers: one module per corpus, each with ``download_x()`` and ``prepare_x()``.

``prepare_x(root, output, ...)`` reads a corpus in its own layout and writes one
JSON Lines manifest per split (``train.jsonl``, ``dev.jsonl`` ...) with header
durations, speakers and paths relative to ``output``; it returns a
``PreparedCorpus`` whose ``format()`` is the summary the command prints.
``download_x(target_dir)`` fetches and unpacks the corpus where a network exists
(Common Voice needs a manual download) and returns the folder to prepare from.

    librispeech   OpenSLR 12, FLAC + *.trans.txt, official subsets
    an4           CMU AN4, NIST SPHERE (or raw), train/dev by speaker + test
    commonvoice   Mozilla Common Voice, MP3 + train/dev/test.tsv
    fsdd          Free Spoken Digit Dataset, single or connected digits
    folder        your own a.wav + a.txt pairs

Shared helpers (speaker splits, downloads, summaries) live in ``common.py``.
"""

CORPORA = ("librispeech", "an4", "commonvoice", "fsdd", "folder")

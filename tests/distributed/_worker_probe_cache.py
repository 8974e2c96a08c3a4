"""The pre-flight under MPI: each rank probes a share of the files, all reach one verdict.

    _worker_probe_cache.py OUT_DIR OVERRIDE...

Writes OUT_DIR/rank<R>.json: the files this rank opened and the data plan it got.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deepspeech.config import load_config
from deepspeech.data import probe
from deepspeech.data.text import build_vocabulary
from deepspeech.training.data import load_training_data, read_training_manifests
from deepspeech.training.launch import make_sync

out, overrides = Path(sys.argv[1]), sys.argv[2:]
config = load_config(None, overrides)
sync = make_sync(config.distributed)
opened: list[str] = []
real = probe.probe_audio


def counting_probe(path, *args, **kwargs):
    opened.append(path)
    return real(path, *args, **kwargs)


probe.probe_audio = counting_probe
vocabulary = build_vocabulary("english", [" "])
data = load_training_data(config, read_training_manifests(config), vocabulary,
                          lambda seconds: int(seconds / 0.02), None, sync)
(out / f"rank{sync.rank}.json").write_text(json.dumps({
    "opened": sorted(opened), "summary": data.summary,
    "train": [u.audio_filepath for u in data.train.utterances],
    "validation": [u.audio_filepath for u in data.validation.utterances]}))
sync.close()

"""The pre-flight under MPI: each rank probes a share of the files, all reach one verdict.

    _worker_probe_cache.py OUT_DIR OVERRIDE...

Writes OUT_DIR/rank<R>.json: the files this rank opened and the data plan it got.

    _worker_probe_cache.py --slow SECONDS OUT_DIR train ARGS...

Runs ``deepspeech train ARGS`` (one process or a rank of many) with a pre-flight slow
enough to be interrupted: each probe takes SECONDS more, and a process touches
OUT_DIR/probing<PID> as it begins probing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from deepspeech.data import probe

real = probe.probe_audio


def _slow_train(seconds: float, out: Path, argv: list[str]) -> int:
    from deepspeech.cli import main

    def slow_probe(path, *args, **kwargs):
        (out / f"probing{os.getpid()}").touch()
        time.sleep(seconds)
        return real(path, *args, **kwargs)

    probe.probe_audio = slow_probe
    return main(argv)


def _pre_flight(out: Path, overrides: list[str]) -> None:
    from deepspeech.config import load_config
    from deepspeech.data.text import build_vocabulary
    from deepspeech.training.data import load_training_data, read_training_manifests
    from deepspeech.training.launch import make_sync

    config = load_config(None, overrides)
    sync = make_sync(config.distributed)
    opened: list[str] = []

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


if sys.argv[1] == "--slow":
    sys.exit(_slow_train(float(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
_pre_flight(Path(sys.argv[1]), sys.argv[2:])

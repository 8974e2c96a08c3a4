"""Shared fixtures: tiny corpora that the tests write themselves (no downloads, no ../shared)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from torch.utils.data import DataLoader, Dataset

from deepspeech.data.synth.tones import write_tone_corpus

# Tests pin the thread count: it is part of the determinism contract.
torch.set_num_threads(1)

# Without a GPU, the Triton kernels (the GPU CTC loss) run in Triton's interpreter on
# the CPU. Triton reads this when it is first imported, so it is set before any test is.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A suite started in the background (`nohup bash scripts/test.sh &`) inherits SIGINT ignored,
# and so would every process it starts: a shell that starts with a signal ignored cannot trap
# it, so the tests that interrupt a script with Ctrl-C would see it ignored. Python's own
# handler again here, which every child then starts with as the default.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Probe caches of session fixtures (made before any test's own folder) stay out of ~/.cache.
_SESSION_CACHE = tempfile.mkdtemp(prefix="deepspeech-test-cache-")
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)
os.environ.setdefault("DEEPSPEECH_CACHE_DIR", _SESSION_CACHE)

@pytest.fixture(autouse=True)
def probe_cache_folder(tmp_path_factory, monkeypatch):
    """A fresh ``DEEPSPEECH_CACHE_DIR`` per test (its processes inherit it): the tests keep
    their probe caches apart from each other and out of the user's ``~/.cache``."""
    folder = tmp_path_factory.mktemp("probe-cache")
    monkeypatch.setenv("DEEPSPEECH_CACHE_DIR", str(folder))
    return folder


class _DyingWorker(Dataset):
    """Its worker dies as one that the out-of-memory killer ends."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        os.kill(os.getpid(), signal.SIGKILL)


class StopAtStep:
    """Asks to stop when the loop asks for the ``step``-th time, as a signal would."""

    signal_name = "SIGINT"

    def __init__(self, step: int) -> None:
        self.step, self.asked = step, 0

    @property
    def requested(self) -> bool:
        self.asked += 1
        return self.asked >= self.step


@pytest.fixture
def dying_loader() -> DataLoader:
    """A loader whose one worker is killed (SIGKILL) as it computes the first batch."""
    return DataLoader(_DyingWorker(), num_workers=1)


@pytest.fixture(scope="session")
def with_nan_audio():
    """``make(manifest, index, folder)``: a copy of ``manifest`` in ``folder`` (absolute
    paths) whose utterance ``index`` reads ``folder/bad.wav``, its audio with NaN samples
    behind a header that checks fine: found only when a loader decodes it."""
    return _with_nan_audio


def _with_nan_audio(manifest: Path, index: int, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    for entry in entries:
        entry["audio_filepath"] = str(manifest.parent / entry["audio_filepath"])
    samples, rate = sf.read(entries[index]["audio_filepath"], dtype="float32")
    samples[100:200] = np.nan
    sf.write(folder / "bad.wav", samples, rate, subtype="FLOAT")
    entries[index]["audio_filepath"] = str(folder / "bad.wav")
    copy = folder / manifest.name
    copy.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return copy


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> dict[str, Path]:
    """Train and validation manifests of tone 'speech' shared by the slow tests."""
    folder = tmp_path_factory.mktemp("corpus")
    return {"train": write_tone_corpus(folder, 48, seed=0, name="train"),
            "val": write_tone_corpus(folder, 12, seed=1, name="val")}


@pytest.fixture(scope="session")
def tiny_overrides():
    """``make(corpus, output_dir)``: overrides for a model whose step takes milliseconds."""
    return _tiny_overrides


def _tiny_overrides(corpus: dict[str, Path], output_dir: Path) -> list[str]:
    return [
        f"data.train_manifest={corpus['train']}", f"data.val_manifest={corpus['val']}",
        f"train.output_dir={output_dir}", "data.num_workers=0", "train.num_threads=1",
        "train.batch_size=8", "train.epochs=2", "train.checkpoint_every=2",
        "train.log_every=1",
        "model.conv.channels=[4,4]", "model.conv.kernels=[[11,5],[11,5]]",
        "model.rnn.layers=2", "model.rnn.hidden=24", "optim.name=adamw", "optim.lr=0.003",
        "features.spec_augment.freq_masks=1", "features.spec_augment.time_masks=1",
        "model.dropout=0.1",
    ]


@pytest.fixture(scope="session")
def interrupted_training():
    """``run(command, metrics, signal, **popen)``: start a training command, send it
    ``signal`` once ``metrics`` holds three records, return (exit status, output)."""
    return _interrupted_training


def _interrupted_training(command: list[str], metrics: Path, sent: int,
                          **popen) -> tuple[int, str]:
    from deepspeech.training.metrics import read_metrics

    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           **popen)
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(read_metrics(metrics)) >= 3):
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    job.send_signal(sent)
    output, _ = job.communicate(timeout=120)
    return job.returncode, output

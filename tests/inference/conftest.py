"""Shared by the inference tests: random models (fast, no training), their checkpoints,
and a real ``deepspeech serve`` process on a free loopback port."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from deepspeech.config import load_config
from deepspeech.data.text import Vocabulary
from deepspeech.features import FeatureExtractor
from deepspeech.inference.recognizer import Recognizer
from deepspeech.model import DeepSpeech2
from deepspeech.training.checkpoint import Checkpoint, save_checkpoint


def _random_recognizer(overrides: list[str], seed: int = 0) -> Recognizer:
    config = load_config(None, overrides, check_files=False)
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    if config.features.normalize == "global":
        second = 0.3 * torch.randn(config.data.sample_rate, generator=torch.Generator().manual_seed(99))
        extractor.compute_stats([second])
    torch.manual_seed(seed)
    model = DeepSpeech2(config.model, extractor.num_bins, len(Vocabulary.english()))
    return Recognizer(config, Vocabulary.english(), extractor, model, torch.device("cpu"))


def _save_random_checkpoint(recognizer: Recognizer, path: Path) -> Path:
    stats = recognizer.extractor.stats
    save_checkpoint(Checkpoint(config=recognizer.config.to_dict(),
                               vocabulary=recognizer.vocabulary.characters,
                               model=recognizer.model.state_dict(),
                               feature_stats=stats.to_dict() if stats else None), path)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    finally:
        connection.close()


@contextlib.contextmanager
def _serving(checkpoint: Path, log_path: Path, extra: list[str],
             timeout: float = 90.0) -> Iterator[int]:
    """A ``deepspeech serve`` process of ``checkpoint``: its port once /health answers;
    stopped (Ctrl-C, then a kill) on leaving."""
    port = _free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "deepspeech", "serve", "--checkpoint", str(checkpoint),
             "--port", str(port), *extra], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited ({process.returncode}):\n{log_path.read_text()}")
            with contextlib.suppress(OSError):
                if _health(port) == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"no /health in {timeout:g} s:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield port
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def random_recognizer():
    """``make(overrides, seed=0)``: a randomly initialized model with its front end."""
    return _random_recognizer


@pytest.fixture(scope="session")
def save_random_checkpoint():
    """``save(recognizer, path)``: a checkpoint that ``Recognizer.from_checkpoint`` loads."""
    return _save_random_checkpoint


@pytest.fixture(scope="session")
def serving():
    """``with serving(checkpoint, log_path, extra_flags) as port:`` a real server."""
    return _serving

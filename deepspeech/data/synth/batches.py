"""Speaking batches of planned utterances in fresh worker processes, ahead of their use.

espeak-ng and Piper keep state between utterances, so an utterance's samples
depend on what the process spoke before. Each batch of ``BATCH`` utterances
therefore runs in a fresh interpreter (``python -m deepspeech.data.synth.worker``),
which makes the audio a function of the batch alone, whatever the number of
workers and whatever ran before in the calling process. Subprocesses rather
than multiprocessing: no re-import of the caller's ``__main__``, and a worker
that imports neither numpy nor torch starts in about a tenth of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepspeech.data.synth import worker
from deepspeech.data.synth.engine import Params
from deepspeech.data.synth.espeak import SynthesisError

BATCH = 32  # utterances per worker process; part of the output's definition


@dataclass(frozen=True)
class PlannedUtterance:
    """One utterance to speak: its text, engine, voice and prosody, and where it belongs."""

    split: str
    index: int
    text: str
    engine: str  # "espeak", "flite" ...
    voice: str  # the engine's voice name: "en-us+m3", "slt"
    speaker: str  # the manifest's speaker id: "en-us+m3", "flite-slt"
    variant: str  # what the splits are disjoint in: espeak's variant "m3", else the speaker
    params: Params  # the engine's prosody


def _worker_environment() -> dict[str, str]:
    # The worker must import this very package, installed or not.
    root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


class Batches:
    """Batches of planned utterances, spoken ``ahead`` at a time, in split order.

    ``plan(split, index)`` gives the utterances. A split's batches are started
    until the split is full (:meth:`finish`); those started beyond that are
    dropped unread.
    """

    def __init__(self, folder: Path, splits: list[str],
                 plan: Callable[[str, int], PlannedUtterance], ahead: int) -> None:
        self.folder, self.splits, self.plan, self.ahead = folder, splits, plan, ahead
        self.running: deque = deque()
        self.split_position, self.batch_number = 0, 0
        self._fill()

    def _fill(self) -> None:
        while len(self.running) < self.ahead and self.split_position < len(self.splits):
            split = self.splits[self.split_position]
            first = self.batch_number * BATCH
            plans = [self.plan(split, index) for index in range(first, first + BATCH)]
            stem = self.folder / f"{split}-{self.batch_number:05d}"
            requests = [(p.engine, p.text, p.voice, p.params) for p in plans]
            stem.with_suffix(".json").write_text(json.dumps(requests), encoding="utf-8")
            process = subprocess.Popen(
                [sys.executable, "-m", worker.__name__, str(stem.with_suffix(".json")),
                 str(stem.with_suffix(".pcm"))],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=_worker_environment(),
            )
            self.running.append((split, plans, stem, process))
            self.batch_number += 1

    def next(self, split: str) -> Iterator[tuple[PlannedUtterance, tuple[np.ndarray, int]]]:
        """The next batch of ``split``: planned utterances with their int16 samples and rate."""
        batch_split, plans, stem, process = self.running.popleft()
        assert batch_split == split, (batch_split, split)
        _, errors = process.communicate()
        self._fill()
        if process.returncode != 0:
            message = errors.decode(errors="replace").strip().splitlines()
            raise SynthesisError(
                f"synthesis worker failed ({process.returncode}): {message[-1] if message else ''}"
            )
        samples = worker.read_batch(stem.with_suffix(".pcm"))
        stem.with_suffix(".json").unlink()
        stem.with_suffix(".pcm").unlink()
        return zip(plans, samples, strict=True)

    def finish(self, split: str) -> None:
        """``split`` is full: drop its remaining batches and start on the next split."""
        while self.running and self.running[0][0] == split:
            self._stop(*self.running.popleft()[2:])
        self.split_position += 1
        self.batch_number = 0
        self._fill()

    def close(self) -> None:
        """Stop what still runs (after an error or an interrupt)."""
        while self.running:
            self._stop(*self.running.popleft()[2:])

    @staticmethod
    def _stop(stem: Path, process: subprocess.Popen) -> None:
        process.kill()
        process.communicate()
        stem.with_suffix(".json").unlink(missing_ok=True)
        stem.with_suffix(".pcm").unlink(missing_ok=True)

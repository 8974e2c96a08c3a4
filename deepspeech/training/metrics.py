"""Metrics to JSON Lines (for scripts and plots) and TensorBoard (for people).

``metrics.jsonl`` holds one object per logged step. A resumed run first drops the
lines logged after its checkpoint's step, so the file describes one history.
``Throughput`` measures what the log shows beside the loss: audio seconds per
second, and the time spent waiting for data and for the other processes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from deepspeech.errors import DeepSpeechError
from deepspeech.files import atomic_write
from deepspeech.jsonl import read_objects

log = logging.getLogger(__name__)
STARVED_FRACTION = 0.2
"""Above this share of an epoch spent waiting for batches, training says so."""


class MetricsLogger:
    """Writes only on the process that owns the logs (rank 0)."""

    def __init__(self, output_dir: Path, enabled: bool = True, resume_step: int = 0) -> None:
        self.enabled = enabled
        self.path = Path(output_dir) / "metrics.jsonl"
        self.writer = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resume_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"),
                                        purge_step=resume_step or None)
        except ImportError:  # tensorboard is a dependency, but logging must not kill a run
            log.warning("tensorboard is not importable; metrics go to %s only", self.path)

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = [record for record in read_metrics(self.path) if record.get("step", 0) <= step]
        with atomic_write(self.path, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(record) + "\n" for record in kept))

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "time": round(time.time(), 3), **values}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(path: Path) -> list[dict]:
    """All records of a ``metrics.jsonl``; a line cut off by a killed run is dropped, so
    that the run can still be plotted and resumed."""
    return [record for _, record in read_objects(path, DeepSpeechError, "a metrics record",
                                                 drop_cut_end=True)]


class Throughput:
    """Audio trained on and time waited, over the window since the last log and over
    the epoch. Training should never wait for its data: the epoch's share is reported
    when it is too large (``data_starvation``)."""

    def __init__(self, comm_wait_seconds: Callable[[], float]) -> None:
        self._comm_wait_seconds = comm_wait_seconds
        self._restart_window()
        self._fetch_start = time.perf_counter()
        self._epoch_data_wait = 0.0
        self._epoch_timed_from: float | None = None

    def _restart_window(self) -> None:
        self.audio_seconds = 0.0
        self._window_start = time.perf_counter()
        self._window_comm_wait = self._comm_wait_seconds()
        self._window_data_wait = 0.0

    def batch_arrived(self) -> None:
        """Call when the loader hands over a batch: the time since ``fetching`` was waiting."""
        waited = time.perf_counter() - self._fetch_start
        self._window_data_wait += waited
        if self._epoch_timed_from is None:  # the first batch also waits for workers to start
            self._epoch_timed_from = time.perf_counter()
        else:
            self._epoch_data_wait += waited

    def fetching(self) -> None:
        """Call before awaiting the next batch."""
        self._fetch_start = time.perf_counter()

    def take_window(self, processes: int) -> dict[str, float]:
        """The window's audio-seconds per second (all processes) and waiting fractions;
        starts the next window."""
        elapsed = max(time.perf_counter() - self._window_start, 1e-9)
        window = {
            "train/audio_seconds_per_second": self.audio_seconds * processes / elapsed,
            "train/comm_wait_fraction": (self._comm_wait_seconds()
                                         - self._window_comm_wait) / elapsed,
            "train/data_wait_fraction": self._window_data_wait / elapsed,
        }
        self._restart_window()
        return window

    def epoch_starvation(self, num_workers: int) -> str | None:
        """``data_starvation`` over the epoch so far."""
        return data_starvation(self._epoch_data_wait,
                               time.perf_counter() - self._epoch_timed_from, num_workers)


def data_starvation(waited: float, elapsed: float, num_workers: int) -> str | None:
    """What to tell a person whose training waited for its data more than it should."""
    if elapsed <= 0 or waited / elapsed <= STARVED_FRACTION:
        return None
    return (f"{waited / elapsed:.0%} of the training time went to waiting for batches with "
            f"data.num_workers={num_workers}: the data pipeline is the bottleneck; give it "
            f"more workers if the machine has idle cores")

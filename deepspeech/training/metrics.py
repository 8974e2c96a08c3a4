"""Metrics to JSON Lines (for scripts and plots) and TensorBoard (for people).

``metrics.jsonl`` holds one object per logged step. A resumed run first drops the
lines logged after its checkpoint's step, so the file describes one history.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from deepspeech.errors import DeepSpeechError
from deepspeech.files import atomic_write
from deepspeech.jsonl import read_objects

log = logging.getLogger(__name__)


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

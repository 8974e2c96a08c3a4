"""Ctrl-C, SIGTERM and SIGUSR1 stop training after the current step, with ``last.pt`` there.

A killed run used to lose every step since its last checkpoint, and a cluster's
preemption (SLURM sends SIGTERM, then SIGKILL after a grace period) lost the same.
Instead the first signal is only recorded. Each step's loss all-reduce carries every
rank's request, so all ranks stop after the same step, write the checkpoint that a
resume continues from bit for bit, and exit. A second signal stops at once, as Ctrl-C
always did. ``mpirun`` forwards SIGUSR1 to every rank, while its own SIGINT and SIGTERM
kill the job: ``kill -USR1 <mpirun pid>`` stops a multi-process run cleanly.

Data-loader workers ignore these signals, so a Ctrl-C sent to the whole process group,
or a cluster's SIGTERM to every process of the job, does not kill the workers that the
last step still needs (``deepspeech.data.workers``; before it runs, a
forked worker's copy of the handlers ignores them too).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

from deepspeech.data.workers import STOP_SIGNALS

log = logging.getLogger(__name__)


class StopRequests:
    """Context manager: while active, ``requested`` tells whether a stop was asked for."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._owner = os.getpid()
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():  # Python's own rule
            self._previous = {number: signal.signal(number, self._handle)
                              for number in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:  # a forked data-loader worker
            return
        if self.requested:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(number).name
        log.warning("%s: stopping after this step and saving last.pt there "
                    "(send it again to stop at once)", self.signal_name)

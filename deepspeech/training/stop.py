"""Ctrl-C, SIGTERM and SIGUSR1 stop training after the current step, with ``last.pt`` there.

A killed run used to lose every step since its last checkpoint, and a cluster's
preemption (SLURM sends SIGTERM, then SIGKILL after a grace period) lost the same.
Instead the first signal is only recorded. Each step's loss all-reduce carries every
rank's request, so all ranks stop after the same step, write the checkpoint that a
resume continues from bit for bit, and exit. A second signal stops at once, as Ctrl-C
always did. ``mpirun`` forwards SIGUSR1 to every rank, while its own SIGINT and SIGTERM
kill the job: ``kill -USR1 <mpirun pid>`` stops a multi-process run cleanly.

Before step one there is nothing to save (a resumed run's ``last.pt`` is where it was),
and the pre-flight that checks every audio file can take minutes: inside
``nothing_to_save`` a stop request ends the run at once instead; under ``mpirun`` every
rank gets the signal, and the first rank it ends takes the others with it.

Data-loader workers ignore these signals, so a Ctrl-C sent to the whole process group,
or a cluster's SIGTERM to every process of the job, does not kill the workers that the
last step still needs (``deepspeech.data.workers``; before it runs, a
forked worker's copy of the handlers ignores them too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

from deepspeech.data.workers import STOP_SIGNALS

log = logging.getLogger(__name__)


class StopRequests:
    """Context manager: while active, ``requested`` tells whether a stop was asked for."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._owner = os.getpid()
        self._previous: dict[int, object] = {}
        self._at_once = False  # inside nothing_to_save

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
        if self.requested:  # said, for a rank's abort message under mpirun
            raise KeyboardInterrupt(f"{signal.Signals(number).name} after "
                                    f"{self.signal_name}: stopped at once")
        self.signal_name = signal.Signals(number).name
        if self._at_once:
            self._stop_now()
        if _mpirun_ends_the_job_on(number):
            log.warning("%s: stopping after this step; last.pt is replaced only if every rank "
                        "finishes it, and Open MPI's mpirun ends the whole job on %s: stop it "
                        "with kill -USR1 <mpirun pid>", self.signal_name, self.signal_name)
        else:
            log.warning("%s: stopping after this step and saving last.pt there "
                        "(send it again to stop at once)", self.signal_name)

    def _stop_now(self) -> NoReturn:
        message = (f"{self.signal_name} before the first step: stopped at once, nothing to "
                   "save yet")
        log.warning("%s", message)
        raise KeyboardInterrupt(message)


def _mpirun_ends_the_job_on(number: int) -> bool:
    """Whether this rank of several was started by Open MPI's mpirun and ``number`` is a
    signal that mpirun answers by killing every rank a moment later (all but SIGUSR1), so
    that the save the signal asks for cannot be promised."""
    return number != signal.SIGUSR1 and int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1


@contextlib.contextmanager
def nothing_to_save() -> Iterator[None]:
    """Inside, a stop request ends the process at once (``KeyboardInterrupt``) instead of
    after the next step: for the work before step one. A request that came before the block
    ends it as it begins. Without a ``StopRequests`` in force (a library call), a no-op."""
    # The StopRequests whose handler this process runs now, if any: signals are per process.
    stop = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if not isinstance(stop, StopRequests):
        yield
        return
    if stop.requested:
        stop._stop_now()
    outer, stop._at_once = stop._at_once, True
    try:
        yield
    finally:
        stop._at_once = outer

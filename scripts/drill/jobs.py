"""The fault drill's processes: each command in its own session, ended at a time bound.

A job that reaches its bound (``BOUND`` seconds from its start) is killed with its
whole process group, so the drill itself never hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BOUND = 120.0  # seconds a case may take (--bound sets it)
MPIRUN = Path(sys.executable).with_name("mpirun")


@dataclass
class Outcome:
    status: int | None  # None: killed at the bound
    seconds: float
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def environment() -> dict[str, str]:
    return {**os.environ, "OMPI_MCA_btl": "^ofi", "TQDM_DISABLE": "1",
            "PYTHONUNBUFFERED": "1"}


def deepspeech(*args: object) -> list[str]:
    return [sys.executable, "-m", "deepspeech", *map(str, args)]


def mpirun(*args: object) -> list[str]:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [str(MPIRUN), *root, "--oversubscribe", *map(str, args)]


class Job:
    """A command started in its own session, its output in files beside the case."""

    started: list[Job] = []  # every job, so that an interrupted drill ends them all

    def __init__(self, argv: list[str], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.start = folder, time.monotonic()
        with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
            self.proc = subprocess.Popen(argv, cwd=folder, env=environment(), stdout=out,
                                         stderr=err, start_new_session=True)
        Job.started.append(self)

    def running(self) -> bool:
        return self.proc.poll() is None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def finish(self, bound: float | None = None) -> Outcome:
        """Wait up to ``bound`` (else BOUND) seconds from the start; then kill the group."""
        try:
            status = self.proc.wait(timeout=max(0.1, (bound or BOUND) - self.elapsed()))
        except subprocess.TimeoutExpired:
            status = None
        seconds = self.elapsed()
        kill_group(self.proc.pid)
        if status is None:
            self.proc.wait()
        return Outcome(status, seconds, (self.folder / "stdout.txt").read_text(errors="replace"),
                       (self.folder / "stderr.txt").read_text(errors="replace"))


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run(argv: list[str], folder: Path) -> Outcome:
    return Job(argv, folder).finish()


def children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(condition: Callable[[], bool], job: Job) -> bool:
    """Poll until ``condition`` holds; False if the job ended or its bound came first."""
    while not condition():
        if not job.running() or job.elapsed() > BOUND:
            return False
        time.sleep(0.02)
    return True


def metric_steps(folder: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(1 for line in (folder / "metrics.jsonl").read_text().splitlines()
                   if '"train/loss"' in line)
    return 0


def rank_of(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK=") and \
                    b"deepspeech" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return item.split(b"=", 1)[1].decode()
    return None

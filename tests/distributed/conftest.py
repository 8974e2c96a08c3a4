"""Launch real ``mpirun`` jobs on small worker scripts next to the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# In-process tests initialise MPI as a singleton; probing for OFI networks costs a second.
os.environ.setdefault("OMPI_MCA_btl", "^ofi")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def mpirun_path() -> str | None:
    beside_python = Path(sys.executable).with_name("mpirun")
    return str(beside_python) if beside_python.exists() else shutil.which("mpirun")


@dataclass
class Job:
    returncode: int
    output: str
    seconds: float


def run_job(script: str, ranks: int, *args: str, timeout: float = 120.0,
            mpirun_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Job:
    """Run ``tests/distributed/<script>`` (or ``-m module``) on ``ranks`` processes.

    stdout and stderr come back merged, with the exit status and the wall time.
    """
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.skip("mpirun not found")
    command = [mpirun, "-n", str(ranks)]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    if ranks > (os.cpu_count() or 1):
        command.append("--oversubscribe")
    target = ["-m", script[3:]] if script.startswith("-m ") else [str(HERE / script)]
    command += [*mpirun_args, sys.executable, *target, *args]
    environment = {**os.environ, "OMPI_MCA_btl": "^ofi",
                   "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   **(env or {})}
    if not script.startswith("-m "):
        # Workers import mpi4py before deepspeech.distributed, which would set this.
        environment.setdefault("OMPI_MCA_osc", "^ucx")
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=timeout)
    return Job(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


@pytest.fixture(name="run_job")
def run_job_fixture():
    """`run_job` for the tests of this folder."""
    return run_job

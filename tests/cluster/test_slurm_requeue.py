"""Slurm's warning, a requeue and a dead node on the cluster of namespaces: a warned job
requeues itself and ends with the bits of a run never interrupted, a refused checkpoint
ends the job instead of restarting it, and a job whose node dies is requeued by Slurm and
resumes when the node is back."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.metrics import read_metrics
from tests.cluster.conftest import DETERMINISTIC, train_command, trained_alone, weights
from tests.cluster.test_slurm_cluster import JOB_ENVIRONMENT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LAYOUT = ("-N", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1")
# 24 steps: room for three warnings, each answered within a few steps (5 steps a second)
STEPS = ("train.epochs=4",)


@pytest.fixture(scope="module")
def uninterrupted(config, tiny_corpus, tiny_overrides, tmp_path_factory) -> tuple[str, int]:
    """Weights digest and step of the same training in one process, never interrupted."""
    output_dir = tmp_path_factory.mktemp("uninterrupted")
    return trained_alone(config, tiny_overrides(tiny_corpus, output_dir), output_dir,
                         *DETERMINISTIC, *STEPS)


@pytest.mark.parametrize(("cause", "requeues"),
                         [("warning", 1), ("warning", 3), ("preemption", 1)])
def test_a_warned_job_requeues_itself_and_ends_with_the_bits_of_an_uninterrupted_run(
        slurm, config, tiny_corpus, tiny_overrides, uninterrupted, tmp_path, cause: str,
        requeues: int) -> None:
    """The warning sent alone (as before the time limit), or by the preemption of the job
    for one in a partition of a higher tier (the cluster's `urgent`)."""
    run, log = tmp_path / "run", tmp_path / "job.out"
    job = submit(slurm, log, train_command(config, tiny_overrides(tiny_corpus, run),
                                           *DETERMINISTIC, *STEPS))
    for restart in range(1, requeues + 1):
        start = saved_step(run)
        wait_for(lambda start=start: trained_step(run) > start, f"a step after {start}",
                 slurm, job, log)
        warned = time.monotonic()
        if cause == "warning":
            warn(slurm, job)
        else:
            preempt(slurm, tmp_path / f"urgent-{restart}.out")
        wait_for(lambda restart=restart: field(slurm, job, "Restarts") == str(restart),
                 "the requeue", slurm, job, log)
        # the warning stops the run after the step in flight: it saved every step it took
        stopped = saved_step(run)
        assert stopped == trained_step(run), log.read_text()[-3000:]
        wait_for(lambda: field(slurm, job, "JobState") == "RUNNING", "the restart", slurm,
                 job, log)
        running = time.monotonic() - warned
        wait_for(lambda stopped=stopped: trained_step(run) > stopped, "a step after the restart",
                 slurm, job, log)
        print(f"{cause} {restart}: stopped at step {stopped}, running again {running:.1f} s "
              f"and stepping {time.monotonic() - warned:.1f} s after the warning")
    wait_for(lambda: field(slurm, job, "JobState") == "COMPLETED", "the end", slurm, job, log,
             seconds=300)
    output = log.read_text()
    assert output.count("resuming from") == requeues, output[-3000:]
    assert weights(run) == uninterrupted


def test_a_refused_checkpoint_ends_the_job_with_the_reason(
        slurm, config, tiny_corpus, tiny_overrides, tmp_path) -> None:
    run, log = tmp_path / "run", tmp_path / "job.out"
    job = submit(slurm, log, train_command(config, tiny_overrides(tiny_corpus, run),
                                           *DETERMINISTIC, *STEPS))
    wait_for(lambda: trained_step(run) > 0, "a step", slurm, job, log)
    warn(slurm, job)
    wait_for(lambda: field(slurm, job, "Restarts") == "1", "the requeue", slurm, job, log)
    last = run / "last.pt"  # cut short while the job waits for its restart (cred_expire)
    last.write_bytes(last.read_bytes()[:1000])
    wait_for(lambda: field(slurm, job, "JobState") == "FAILED", "the failure", slurm, job, log)
    time.sleep(3)  # a requeue loop would be back by now
    assert field(slurm, job, "JobState") == "FAILED"
    assert field(slurm, job, "Restarts") == "1"
    assert f"{last}" in log.read_text() and "CheckpointError" in log.read_text(), \
        log.read_text()[-3000:]


def test_a_node_that_dies_ends_the_job_which_resumes_when_it_is_back(
        slurm, config, tiny_corpus, tiny_overrides, uninterrupted, tmp_path) -> None:
    """Slurm's own verdict: node2 stops answering, the job ends as NODE_FAIL and, asked
    to (--requeue), waits for two nodes; node2's slurmd starts again and the job resumes
    from last.pt, redoing the steps since it, with the bits of a run never interrupted."""
    run, log = tmp_path / "run", tmp_path / "job.out"
    job = submit(slurm, log, train_command(config, tiny_overrides(tiny_corpus, run),
                                           *DETERMINISTIC, *STEPS))
    wait_for(lambda: saved_step(run) >= 2, "a checkpoint", slurm, job, log)
    killed = time.monotonic()
    for pid in node_processes("node2"):  # slurmd, its job's slurmstepd, prted, the ranks
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: field(slurm, job, "JobState") not in ("RUNNING", "COMPLETING"),
             "the job's end", slurm, job, log, seconds=90)
    ended = time.monotonic() - killed
    saved = saved_step(run)  # whole, whatever step it holds
    node = slurm.call("node1", "scontrol", "show", "node", "node2").stdout
    assert "State=DOWN" in node and "Reason=Not responding" in node, node
    assert field(slurm, job, "Restarts") == "1", field(slurm, job, "JobState")  # requeued
    assert "DUE TO NODE FAILURE" in log.read_text() and "on node node2" in log.read_text()
    # Slurm's detection (SlurmdTimeout=10 and its pings: 15-17 s measured) comes before
    # distributed.timeout_s (60)
    assert ended < 30, f"{ended:.1f} s"
    done = subprocess.run(slurm.command("slurmd", "node2"), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    back = time.monotonic()
    wait_for(lambda: field(slurm, job, "JobState") == "RUNNING", "the restart", slurm, job, log)
    running = time.monotonic() - back
    wait_for(lambda: field(slurm, job, "JobState") == "COMPLETED", "the end", slurm, job, log,
             seconds=300)
    print(f"dead node: the job ended {ended:.1f} s after node2 was killed, with last.pt at "
          f"step {saved}; running again {running:.1f} s after node2's slurmd started")
    assert f"resuming from {run / 'last.pt'}" in log.read_text()
    assert weights(run) == uninterrupted


def submit(slurm, log: Path, train: list[str], *options: str) -> str:
    """``sbatch mpirun.sbatch`` from node1 on both nodes: the job's id."""
    done = slurm.call("node1", "sbatch", *LAYOUT, *options, f"--output={log}",
                      "scripts/slurm/mpirun.sbatch", *train[train.index("-c"):],
                      env=JOB_ENVIRONMENT)
    job = re.search(r"Submitted batch job (\d+)", done.stdout)
    assert job, done.stdout + done.stderr
    return job.group(1)


def warn(slurm, job: str) -> None:
    """What Slurm sends the batch shell before the time limit or on preemption."""
    done = slurm.call("node1", "scancel", "--batch", "--signal=USR1", job)
    assert done.returncode == 0, done.stdout + done.stderr


def preempt(slurm, log: Path) -> None:
    """A second-long job on every CPU of both nodes, in the partition that preempts."""
    done = slurm.call("node1", "sbatch", "-p", "urgent", "-N", "2", "--exclusive",
                      f"--output={log}", "--wrap", "sleep 1")
    assert done.returncode == 0, done.stdout + done.stderr


def field(slurm, job: str, name: str) -> str:
    """One field of ``scontrol show job``."""
    shown = slurm.call("node1", "scontrol", "show", "-o", "job", job).stdout
    found = re.search(rf"\b{name}=(\S+)", shown)
    return found.group(1) if found else ""


def wait_for(condition: Callable[[], bool], what: str, slurm, job: str, log: Path,
             seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            shown = slurm.call("node1", "scontrol", "show", "job", job).stdout
            output = log.read_text() if log.exists() else "(no log)"
            pytest.fail(f"no {what} within {seconds} s:\n{shown}\n{output[-3000:]}")
        time.sleep(0.2)


def trained_step(run: Path) -> int:
    """The last step that the run logged (0 before any)."""
    metrics = run / "metrics.jsonl"
    records = read_metrics(metrics) if metrics.exists() else []
    return max((record["step"] for record in records if "step" in record), default=0)


def saved_step(run: Path) -> int:
    """The step of ``last.pt`` (0 before any)."""
    last = run / "last.pt"
    return load_checkpoint(last).state.step if last.exists() else 0


def node_processes(node: str) -> list[int]:
    return [int(pid) for pid in subprocess.run(["ip", "netns", "pids", node],
                                               capture_output=True, text=True,
                                               check=True).stdout.split()]

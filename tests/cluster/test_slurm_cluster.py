"""Slurm on the cluster of namespaces: jobs on both nodes, training under sbatch and srun
with the bits of one process, and nothing left behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import DETERMINISTIC, STATE, take_down, train_command, weights

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SUBNET = "10.77.0.0/24"
# What a job needs here and not on a real cluster: root may run mpirun; MPI's traffic, and
# the PMIx server's under srun, stay on the nodes' subnet.
JOB_ENVIRONMENT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "NET": SUBNET, "OMPI_MCA_btl": "self,sm,tcp", "OMPI_MCA_pml": "ob1",
                   "OMPI_MCA_btl_tcp_if_include": SUBNET, "OMPI_MCA_oob_tcp_if_include": SUBNET,
                   "PMIX_MCA_ptl_tcp_if_include": SUBNET}


def leftovers() -> list[str]:
    """Processes of the cluster's Slurm and munge still running (their command lines)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue  # not a process, or already gone
        if str(STATE) in command or command.startswith("slurmstepd"):
            found.append(command)
    return found


def test_srun_reaches_both_nodes_and_down_leaves_nothing(slurm) -> None:
    done = slurm.call("node1", "srun", "-N", "2", "hostname")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.split()) == ["node1", "node2"]
    queue = slurm.call("node1", "squeue", "-h")
    assert queue.returncode == 0 and queue.stdout == "", queue.stdout + queue.stderr
    assert len(leftovers()) >= 4, leftovers()  # munged, slurmctld and 2 slurmd
    take_down()
    assert leftovers() == []
    assert not STATE.exists()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.split()
    assert "node1" not in namespaces and "node2" not in namespaces
    take_down()  # idempotent
    assert not STATE.exists()


@pytest.mark.parametrize("launcher", ["mpirun.sbatch", "srun --mpi=pmix"])
def test_deterministic_training_under_slurm_gives_the_bits_of_one_process(
        slurm, config, tiny_corpus, tiny_overrides, one_process, tmp_path,
        launcher: str) -> None:
    """2 nodes x 2 ranks: Open MPI inside an sbatch allocation, or srun starting the ranks
    through Slurm's PMIx plugin."""
    train = train_command(config, tiny_overrides(tiny_corpus, tmp_path / "run"), *DETERMINISTIC)
    layout = ["-N", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1"]
    if launcher == "mpirun.sbatch":
        returncode, output, shown = sbatch(slurm, tmp_path / "job.out", layout,
                                           "scripts/slurm/mpirun.sbatch", train)
        assert "NodeList=node[1-2]" in shown and "NumTasks=4" in shown, shown
    else:
        done = slurm.call("node1", "srun", "--mpi=pmix", *layout, *train, timeout=300,
                          env=JOB_ENVIRONMENT)
        returncode, output = done.returncode, done.stdout + done.stderr
    assert returncode == 0, output[-3000:]
    assert "data parallel over 4 processes" in output, output[-3000:]
    assert weights(tmp_path / "run") == one_process


def test_torchrun_sbatch_on_cpu_nodes_gives_the_bits_of_one_process(
        slurm, config, tiny_corpus, tiny_overrides, one_process, tmp_path) -> None:
    """One torchrun per node starting WORKERS=2 gloo workers, each with one of the task's
    2 CPUs as its thread (the 1 thread of the one-process run)."""
    train = train_command(config, tiny_overrides(tiny_corpus, tmp_path / "run"), *DETERMINISTIC)
    returncode, output, shown = sbatch(slurm, tmp_path / "job.out",
                                       ["-N", "2", "--cpus-per-task", "2"],
                                       "scripts/slurm/torchrun.sbatch", train, WORKERS="2")
    assert "NodeList=node[1-2]" in shown and "NumTasks=2" in shown, shown
    assert returncode == 0, output[-3000:]
    assert "data parallel over 4 processes (torch backend" in output, output[-3000:]
    assert weights(tmp_path / "run") == one_process


def sbatch(slurm, log: Path, options: list[str], script: str, train: list[str],
           **env: str) -> tuple[int, str, str]:
    """``sbatch --wait OPTIONS SCRIPT`` from node1 with the training command's arguments
    (the script runs ``deepspeech train`` itself), ``env`` added to the job's environment:
    its status, its output with the job's log, and ``scontrol show job`` of it."""
    done = slurm.call("node1", "sbatch", "--wait", *options, f"--output={log}", script,
                      *train[train.index("-c"):], timeout=300, env={**JOB_ENVIRONMENT, **env})
    output = done.stdout + done.stderr + (log.read_text() if log.exists() else "")
    job = re.search(r"Submitted batch job (\d+)", done.stdout)
    assert job, output[-3000:]
    shown = slurm.call("node1", "scontrol", "show", "job", job.group(1)).stdout
    return done.returncode, output, shown

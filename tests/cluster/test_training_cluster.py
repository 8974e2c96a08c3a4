"""Training across two real nodes: the bits of one process, and a node that dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.metrics import read_metrics
from tests.cluster.conftest import DETERMINISTIC, train_command, weights

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_deterministic_training_on_two_nodes_gives_the_bits_of_one_process_and_one_node(
        cluster, config, tiny_corpus, tiny_overrides, one_process, tmp_path) -> None:
    for hosts, ranks in (("node1:2,node2:2", 4), ("node1:4", 4), ("node1:2", 2)):
        job = cluster.mpirun(hosts, ranks, *train_command(
            config, tiny_overrides(tiny_corpus, tmp_path / hosts), *DETERMINISTIC),
            timeout=300)
        assert job.returncode == 0, job.output[-3000:]
        assert f"data parallel over {ranks} processes" in job.output, job.output[-3000:]
        assert weights(tmp_path / hosts) == one_process, hosts


def test_torchrun_across_two_nodes_gives_the_bits_of_one_process(
        cluster, config, tiny_corpus, tiny_overrides, one_process, tmp_path) -> None:
    """The torch backend (gloo), one torchrun per node, rendezvous on node1."""
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--nnodes", "2",
                "--nproc-per-node", "1", "--rdzv-id", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "node1:29500", "-m", "deepspeech", "train", "-c", str(config),
                *tiny_overrides(tiny_corpus, tmp_path / "torchrun"), *DETERMINISTIC,
                "distributed.backend=torch"]
    nodes = [cluster.run(node, *torchrun) for node in ("node1", "node2")]
    # both nodes drained at once, and both shown whichever failed: a worker that dies on
    # one node leaves the other node's agent waiting at torchrun's exit barrier
    with ThreadPoolExecutor(len(nodes)) as pool:
        outputs = list(pool.map(output_within(300), nodes))
    report = "\n".join(f"--- node{index + 1}:\n{output[-2500:]}"
                       for index, output in enumerate(outputs))
    assert [node.returncode for node in nodes] == [0, 0], report
    assert "data parallel over 2 processes (torch backend" in outputs[0], outputs[0][-3000:]
    assert weights(tmp_path / "torchrun") == one_process


def output_within(seconds: float):
    """``finish(process)``: its merged output, after killing it if it runs past ``seconds``."""
    def finish(process: subprocess.Popen) -> str:
        try:
            return process.communicate(timeout=seconds)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            return process.communicate()[0] + f"\n(killed: still running after {seconds} s)"
    return finish


def node_processes(node: str, name: str) -> list[int]:
    """Processes in ``node``'s namespace whose command line contains ``name``."""
    pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True,
                          check=True).stdout.split()
    found = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # already gone
        if name in command:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("victim", ["ranks", "node"])
def test_a_node_that_dies_ends_the_job_in_bounded_time_and_last_pt_survives(
        cluster, config, tiny_corpus, tiny_overrides, tmp_path, victim: str) -> None:
    metrics = tmp_path / "metrics.jsonl"
    job = cluster.popen("node1:2,node2:2", 4, *train_command(
        config, tiny_overrides(tiny_corpus, tmp_path), "train.epochs=1000",
        "distributed.timeout_s=20"))
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(read_metrics(metrics)) >= 3
                   and (tmp_path / "last.pt").exists()):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[0]
            time.sleep(0.1)
        # the node's ranks (as the out-of-memory killer would), or every process of the
        # node at once: its two ranks, the runtime's daemon and the launch agent's prted
        victims = node_processes("node2", "deepspeech train" if victim == "ranks" else "")
        assert len(victims) == (2 if victim == "ranks" else 4), victims
        killed = time.monotonic()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        output, _ = job.communicate(timeout=90)
        ended = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert ended < 60, output[-3000:]
    if victim == "ranks":
        # The survivors' TCP links to node2 close and Open MPI aborts from inside its
        # progress engine. Its note naming the peer host (node2) is forwarded to mpirun and
        # lost in about 1 run of 7; what stays is the survivor that aborted ("rank 0 on
        # node node1 calling abort"): the dead rank is not reliably named.
        assert job.returncode != 0, output[-3000:]
    else:
        # Whichever of the runtime's two alarms rings first: the launch agent ("daemon
        # failed to report back", status 255) or the daemon's link; after the second
        # ("PRTE has lost communication with a remote daemon") Open MPI 5.0.11's mpirun
        # may exit with status 0, so a job script must not take 0 alone for success.
        lost = "lost communication with a remote daemon" in output
        assert job.returncode != 0 or lost, output[-3000:]
        assert "Remote host:   node2" in output or "on node node2" in output, output[-3000:]
    state = load_checkpoint(tmp_path / "last.pt")  # whole, whatever step it holds
    assert state.state.step >= 2
    deadline = time.monotonic() + 15  # mpirun may return while its own ranks are dying
    while node_processes("node1", "deepspeech train") or node_processes("node2",
                                                                          "deepspeech train"):
        assert time.monotonic() < deadline, "ranks outlived the job"
        time.sleep(0.1)

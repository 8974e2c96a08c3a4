"""scripts/cluster.sh: nodes with their own names and shaped links, and nothing left behind."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import SCRIPT, STATE, bring_up, cannot_make_namespaces, take_down

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def host_network() -> dict[str, str]:
    """What the script may touch on the host: namespaces, links, hosts files, its state."""
    def output(*command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout
    links = sorted(line.split(":")[1].split("@")[0].strip()
                   for line in output("ip", "-o", "link", "show").splitlines())
    return {"netns": output("ip", "netns", "list"), "links": " ".join(links),
            "hosts": Path("/etc/hosts").read_text(),
            "netns_dir": str(Path("/etc/netns").exists()), "state": str(STATE.exists())}


@pytest.fixture
def clean_host():
    """The host's network before the test; the cluster is taken down afterwards whatever
    happened."""
    reason = cannot_make_namespaces()
    if reason:
        pytest.skip(f"no cluster of namespaces: {reason}")
    before = host_network()
    try:
        yield before
    finally:
        take_down()


def run_on(node: str, *command: str) -> str:
    done = subprocess.run(["bash", str(SCRIPT), "run", node, *command], capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_up_makes_named_shaped_nodes_and_down_removes_everything(clean_host) -> None:
    done = bring_up("2", "1gbit")
    if done.returncode != 0:
        pytest.skip(f"no cluster of namespaces: {done.stderr.strip().splitlines()[-1]}")
    assert "node1..node2" in done.stdout
    assert [run_on(node, "hostname") for node in ("node1", "node2")] == ["node1", "node2"]
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() != "node1"
    # node2 reaches node1 by name (through its own hosts file); the host's is untouched
    assert run_on("node2", "getent", "hosts", "node1").split()[0] == "10.77.0.1"
    assert Path("/etc/hosts").read_text() == clean_host["hosts"]
    for where in (["tc", "-n", "node2", "qdisc", "show", "dev", "eth0"],
                  ["tc", "qdisc", "show", "dev", "dscl-node2"]):
        assert "tbf" in subprocess.run(where, capture_output=True, text=True).stdout
    assert bring_up("2").returncode != 0  # one cluster at a time
    left_running = subprocess.Popen(["bash", str(SCRIPT), "run", "node2", "sleep", "600"])
    take_down()
    assert left_running.wait(timeout=10) == -signal.SIGKILL  # processes on the nodes go too
    assert host_network() == clean_host
    take_down()  # idempotent
    assert host_network() == clean_host


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_up_leaves_nothing_behind(clean_host, sent: int) -> None:
    up = subprocess.Popen(["bash", str(SCRIPT), "up", "200"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (STATE / "nodes").exists() or len((STATE / "nodes").read_text().split()) < 5:
        assert up.poll() is None and time.monotonic() < deadline, up.communicate()
        time.sleep(0.05)
    up.send_signal(sent)
    up.communicate(timeout=60)
    assert up.returncode != 0
    assert host_network() == clean_host


def test_a_bad_rate_is_refused_before_anything_is_made(clean_host) -> None:
    done = bring_up("2", "fast")
    assert done.returncode != 0 and "RATE must look like" in done.stderr
    assert host_network() == clean_host

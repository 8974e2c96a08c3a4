"""A cluster of network namespaces for the tests of this folder (``scripts/cluster.sh``).

The ``cluster`` fixture brings up two nodes for a test module and takes them down
afterwards, also when a test fails; where namespaces cannot be made (not root, no
``ip`` or ``unshare``, a container without the rights) every test skips, saying why.
``cluster.mpirun`` runs a real ``mpirun`` from node1 across the nodes; the ``slurm``
fixture brings up the nodes with Slurm on them (``up 2 --slurm``) for one test. The
deterministic training run in one process (``one_process``) is the digest the multi-node
runs must give.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.sh"
STATE = Path("/run/deepspeech-cluster")
NODES = 2
DETERMINISTIC = ("distributed.deterministic=true", "train.micro_batch_size=2", "train.epochs=1",
                 "distributed.timeout_s=60")


@dataclass
class Job:
    returncode: int
    output: str
    seconds: float


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    """mpirun beside this Python first on PATH; the ranks import this checkout."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "OMPI_MCA_btl": "^ofi", "OMPI_MCA_osc": "^ucx",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            **(extra or {})}


class Cluster:
    """Nodes node1..node{NODES} made by scripts/cluster.sh, and jobs on them."""

    nodes = NODES

    def command(self, *args: str) -> list[str]:
        """The script's command line (``mpirun ...``, ``run HOST ...``)."""
        return ["bash", str(SCRIPT), *args]

    def mpirun(self, hosts: str, ranks: int, *program: str, timeout: float = 120.0,
               env: dict[str, str] | None = None) -> Job:
        """``mpirun --host HOSTS -n RANKS -x PYTHONPATH PROGRAM...`` from node1; ranks are
        not bound to cores where a node gets more of them than the machine has cores."""
        command = self._mpirun_command(hosts, ranks, program)
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env=_environment(env), capture_output=True,
                              text=True, timeout=timeout)
        return Job(done.returncode, done.stdout + done.stderr, time.monotonic() - start)

    def popen(self, hosts: str, ranks: int, *program: str,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """The same job, started in the background (output merged, as text)."""
        command = self._mpirun_command(hosts, ranks, program)
        return subprocess.Popen(command, cwd=ROOT, env=_environment(env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def _mpirun_command(self, hosts: str, ranks: int, program: tuple[str, ...]) -> list[str]:
        return self.command("mpirun", "--host", hosts, "-n", str(ranks), "-x", "PYTHONPATH",
                            *_binding(hosts), *program)

    def run(self, node: str, *command: str) -> subprocess.Popen:
        """``command`` started on ``node`` (its network, its hostname), output merged."""
        return subprocess.Popen(self.command("run", node, *command), cwd=ROOT,
                                env=_environment(None), text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)

    def call(self, node: str, *command: str, timeout: float = 30.0,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``command`` run to its end on ``node``, output captured as text."""
        return subprocess.run(self.command("run", node, *command), cwd=ROOT,
                              env=_environment(env), capture_output=True, text=True,
                              timeout=timeout)


def _binding(hosts: str) -> list[str]:
    """``--bind-to none`` where one node of ``HOSTS`` (``node1:4,node2:2``) gets more ranks
    than there are cores: Open MPI refuses to bind two ranks to a core."""
    most = max(int(entry.partition(":")[2] or 1) for entry in hosts.split(","))
    return ["--bind-to", "none"] if most > (os.cpu_count() or 1) else []


def cannot_make_namespaces() -> str | None:
    """Why this machine cannot host the cluster, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    for tool in ("ip", "unshare", "bash"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found"
    if not Path(sys.executable).with_name("mpirun").exists() and shutil.which("mpirun") is None:
        return "mpirun not found"
    if STATE.exists():
        return f"a cluster is already up ({STATE}); scripts/cluster.sh down"
    return None


def bring_up(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``scripts/cluster.sh up ARGS...``."""
    return subprocess.run(["bash", str(SCRIPT), "up", *args], capture_output=True, text=True,
                          timeout=timeout)


def take_down() -> None:
    """``scripts/cluster.sh down``: idempotent, so always safe."""
    subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=60,
                   check=True)


def _nodes(*args: str, timeout: float = 60.0):
    """``Cluster()`` on nodes brought up with ``up ARGS...``, taken down whatever happened;
    a skip, with the reason, where they cannot be made."""
    reason = cannot_make_namespaces()
    if reason:
        pytest.skip(f"no cluster of namespaces: {reason}")
    try:
        done = bring_up(*args, timeout=timeout)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
            pytest.skip(f"no cluster of namespaces: {lines[-1]}")
        yield Cluster()
    finally:
        take_down()


@pytest.fixture(scope="module")
def cluster():
    """Two nodes for the module, removed at its end whatever happened."""
    yield from _nodes(str(NODES))


@pytest.fixture
def slurm():
    """Two nodes with Slurm (a controller on node1, slurmd on each) for one test; `up`
    installs the packages where they are missing, hence the longer bound."""
    yield from _nodes(str(NODES), "--slurm", timeout=300)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "empty.yaml"
    path.write_text("{}\n")
    return path


@pytest.fixture(scope="module")
def one_process(config, tiny_corpus, tiny_overrides, tmp_path_factory) -> tuple[str, int]:
    """Weights digest and step of the deterministic run in one process, without mpirun."""
    output_dir = tmp_path_factory.mktemp("one")
    return trained_alone(config, tiny_overrides(tiny_corpus, output_dir), output_dir,
                         *DETERMINISTIC)


def trained_alone(config: Path, overrides: list[str], output_dir: Path,
                  *extra: str) -> tuple[str, int]:
    """Weights digest and step of a training run in one process, without mpirun: the bits
    a run across processes or nodes must give."""
    done = subprocess.run(train_command(config, overrides, *extra),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return weights(output_dir)


def train_command(config: Path, overrides: list[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "deepspeech", "train", "-c", str(config), *overrides, *extra]


def weights(output_dir: Path) -> tuple[str, int]:
    state = load_checkpoint(output_dir / "last.pt")
    return state_dict_digest(state.model), state.state.step

"""Which launcher started this process, and the matching gradient synchronization.

``mpirun`` (Open MPI, MPICH) and ``torchrun`` both export the world size; a plain
``deepspeech train`` has none and runs as a single process with no MPI at all.
"""

from __future__ import annotations

import os

from deepspeech.config import DistributedConfig
from deepspeech.training.sync import GradientSync

WORLD_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "WORLD_SIZE")


def launched_world_size() -> int:
    """Number of processes the launcher started (1 without a launcher)."""
    for name in WORLD_SIZE_VARIABLES:
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK",
                        "SLURM_LOCALID")


def launched_local_rank() -> int:
    """This process's index among the processes the launcher started on its node (0 alone)."""
    for name in LOCAL_RANK_VARIABLES:
        if os.environ.get(name):
            return int(os.environ[name])
    return 0


def make_sync(config: DistributedConfig, device: str = "cpu") -> GradientSync:
    """Data-parallel gradient synchronization over the configured backend, for gradients
    on ``device`` (the torch backend runs NCCL for CUDA ones, gloo for the rest)."""
    from deepspeech.training.data_parallel import DataParallelSync

    return DataParallelSync(config, device=device)

"""``--tune``: the pure algorithms' timings turned into a rules file for this machine
(``deepspeech.distributed.tuning``); the built-in choice stays where no candidate beats it
in every pass."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from mpi4py import MPI

from deepspeech.bench.allreduce.backends import PURE_BACKENDS
from deepspeech.bench.allreduce.sizes import format_size, parse_size
from deepspeech.distributed import tuning
from deepspeech.distributed.allreduce import DEFAULT_SEGMENT_BYTES
from deepspeech.distributed.choice import builtin_algorithm
from deepspeech.distributed.topology import node_layout
from deepspeech.distributed.transport import mpi_library

DEFAULT_BACKENDS = "ring,hierarchical,mpi,gloo"
TUNING_CANDIDATES = "rd,ring-only@256K,ring-only@1M,ring-only@4M,ring-only@16M,ring-only@64M"


def default_backends(comm: MPI.Comm, tune: str | None) -> str:
    """What to time without --backends; with --tune the candidates (collective)."""
    if not tune:
        return DEFAULT_BACKENDS
    # whether any ranks share a node: the same answer on every rank, unlike a node's own
    # rank count (2 ranks on node1 and 1 on node2 must time the same list)
    shared = node_layout(comm).nodes < comm.Get_size()
    return TUNING_CANDIDATES + (",hierarchical" if shared else "") + ",mpi"

def candidate_rule(name: str) -> tuning.Rule | None:
    """The rule a pure-algorithm backend stands for; None for the others."""
    base, _, segment = name.partition("@")
    algorithm = PURE_BACKENDS.get(base)
    if algorithm is None or (algorithm == "hierarchical" and segment) or algorithm == "ipc":
        # not a pure algorithm, hierarchical@ (the window block: not a rule), or one for
        # GPU buffers (rules are for CPU tensors)
        return None
    return tuning.Rule(0, algorithm, parse_size(segment) if segment else None)

def builtin_incumbents(comm: MPI.Comm, sizes: list[int],
                candidates: dict[str, tuning.Rule]) -> dict[int, str]:
    """Per size, the candidate that runs what the built-in choice runs (where one does)."""
    by_rule = {(rule.algorithm, rule.segment_bytes or DEFAULT_SEGMENT_BYTES): name
               for name, rule in candidates.items()}
    incumbents = {}
    for nbytes in sizes:
        name = by_rule.get((builtin_algorithm(nbytes, comm), DEFAULT_SEGMENT_BYTES))
        if name is not None:
            incumbents[nbytes] = name
    return incumbents

def write_rules(path: str, passes: list[dict], candidates: dict[str, tuning.Rule],
                 incumbents: dict[int, str], world: int, nodes: int) -> list[str]:
    """Turn the candidates' timings into a rules file (rank 0); lines saying what it holds."""
    timings = {key: [timed[key] for timed in passes] for key in passes[0]
               if key[0] in candidates}
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    measured_on = (f"{cpu}, {os.cpu_count()} CPUs, {mpi_library()}, "
                   f"{time.strftime('%Y-%m-%d')}, {world} ranks on {nodes} node(s)")
    rules = tuning.rules_from_timings(timings, candidates, world, nodes, measured_on,
                                      incumbents)
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(rules.to_json())
    partial.replace(target)
    lines = [f"all-reduce rules for {world} ranks on {nodes} node(s), {len(passes)} "
             f"pass(es) -> {target}:"]
    for rule in rules.rules:
        segment = f", segments {format_size(rule.segment_bytes)}" if rule.segment_bytes else ""
        lines.append(f"  from {format_size(rule.from_bytes) if rule.from_bytes else '0'}: "
                     f"{rule.algorithm}{segment}")
    lines.append(f"use them: {tuning.ENVIRONMENT_VARIABLE}={target} (every rank) or "
                 f"distributed.allreduce_tuning={target}")
    return lines

"""Per-machine all-reduce rules: which algorithm and segment size for which buffer size.

The built-in choice (the size rule of choice.py) rests on thresholds measured
on one machine. Another machine moves the crossovers: on the 2-vCPU AMD EPYC
of docs/BENCHMARKS.md the node-aware variant beat everything up to 16 MiB; on
a 2-vCPU Intel Xeon it lost to the ring from 2 MiB up, and whole-chunk
messages beat 1 MiB segments up to 8 MiB. Like Open MPI's dynamic rules file
(``coll_tuned_dynamic_rules_filename``), a rules file measured on the target
machine replaces the thresholds:

    mpirun -n 2 deepspeech bench allreduce --tune allreduce_rules.json
    DEEPSPEECH_ALLREDUCE_TUNING=allreduce_rules.json mpirun -n 2 ...   # or
    deepspeech train ... distributed.allreduce_tuning=allreduce_rules.json

A file holds the world size and node count it was measured with and an
ordered list of rules ``{"from_bytes", "algorithm", "segment_bytes"}``; a
buffer takes the last rule whose ``from_bytes`` it reaches. It applies only
to CPU tensors on communicators of that world size and node count; anything
else keeps the built-in choice. The algorithm decides the order of the
floating-point sums (for more than 2 ranks), so the rules are part of the
determinism contract, like the thread count: every rank must use the same
file, which is checked (a hash compare) on the first all-reduce of each
communicator.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mpi4py import MPI

from .algorithms import ALGORITHMS
from .faults import check_same
from .topology import node_layout

ENVIRONMENT_VARIABLE = "DEEPSPEECH_ALLREDUCE_TUNING"
FORMAT = "deepspeech-allreduce-rules/1"


class TuningFileError(ValueError):
    """A rules file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Rule:
    """From ``from_bytes`` up (to the next rule), run ``algorithm`` with this segment size."""

    from_bytes: int
    algorithm: str
    segment_bytes: int | None = None


@dataclass(frozen=True)
class Rules:
    """The rules measured on one machine for one world size and node count."""

    world_size: int
    nodes: int
    rules: tuple[Rule, ...]
    measured_on: str = ""

    def rule_for(self, nbytes: int) -> Rule:
        chosen = self.rules[0]
        for rule in self.rules:
            if nbytes >= rule.from_bytes:
                chosen = rule
        return chosen

    def to_json(self) -> str:
        body = {"format": FORMAT, "world_size": self.world_size, "nodes": self.nodes,
                "measured_on": self.measured_on,
                "rules": [{k: v for k, v in asdict(r).items() if v is not None}
                          for r in self.rules]}
        return json.dumps(body, indent=2) + "\n"


def parse_rules(text: str, source: str) -> Rules:
    """Rules from the JSON ``text``; errors name ``source`` and the offending key."""
    def fail(key: str, message: str) -> TuningFileError:
        return TuningFileError(f"{source}: {key}: {message}")

    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise TuningFileError(f"{source}: not JSON (line {error.lineno}, column "
                              f"{error.colno}: {error.msg})") from None
    if not isinstance(body, dict):
        raise TuningFileError(f"{source}: expected a JSON object")
    if body.get("format") != FORMAT:
        raise fail("format", f"expected {FORMAT!r}, got {body.get('format')!r}")
    world_size, nodes = body.get("world_size"), body.get("nodes")
    if not isinstance(world_size, int) or world_size < 2:
        raise fail("world_size", f"must be an integer of at least 2, got {world_size!r}")
    if not isinstance(nodes, int) or not 1 <= nodes <= world_size:
        raise fail("nodes", f"must be an integer from 1 to world_size, got {nodes!r}")
    entries = body.get("rules")
    if not isinstance(entries, list) or not entries:
        raise fail("rules", "must be a non-empty list")
    rules = []
    for i, entry in enumerate(entries):
        key = f"rules[{i}]"
        if not isinstance(entry, dict):
            raise fail(key, "must be an object")
        unknown = set(entry) - {"from_bytes", "algorithm", "segment_bytes"}
        if unknown:
            raise fail(key, f"unknown keys {sorted(unknown)}")
        start, algorithm = entry.get("from_bytes"), entry.get("algorithm")
        segment = entry.get("segment_bytes")
        if not isinstance(start, int) or start < 0:
            raise fail(f"{key}.from_bytes", f"must be a non-negative integer, got {start!r}")
        if rules and start <= rules[-1].from_bytes:
            raise fail(f"{key}.from_bytes", "must grow from rule to rule")
        if algorithm not in ALGORITHMS:
            raise fail(f"{key}.algorithm", f"must be one of {', '.join(sorted(ALGORITHMS))}, "
                                           f"got {algorithm!r}")
        if ALGORITHMS[algorithm].node_aware and nodes == world_size:
            raise fail(f"{key}.algorithm", f"{algorithm} needs ranks that share a node")
        if segment is not None and (not isinstance(segment, int) or segment < 1):
            raise fail(f"{key}.segment_bytes", f"must be a positive integer, got {segment!r}")
        rules.append(Rule(start, algorithm, segment))
    if rules[0].from_bytes != 0:
        raise fail("rules[0].from_bytes", "the first rule must start at 0")
    return Rules(world_size, nodes, tuple(rules), str(body.get("measured_on", "")))


def load_rules(path: str | os.PathLike[str]) -> Rules:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise TuningFileError(f"{path}: cannot read the all-reduce rules: "
                              f"{error.strerror}") from None
    return parse_rules(text, str(path))


def rules_from_timings(timings: dict[tuple[str, int], Sequence[float]],
                       candidates: dict[str, Rule], world_size: int, nodes: int,
                       measured_on: str, incumbents: dict[int, str] | None = None) -> Rules:
    """The fastest candidate at each measured size, merged into ranges.

    ``timings`` maps (candidate name, bytes) to seconds, one figure per
    measurement pass; ``candidates`` maps each name to the rule it stands for
    (its ``from_bytes`` is ignored). ``incumbents`` names, per size, the
    candidate that the built-in choice runs. On a shared machine one pass can
    crown the wrong algorithm (a 15-20% loss at 32 MiB and up once, docs/
    BENCHMARKS.md), so another candidate replaces the incumbent only if it is
    faster in every pass; among those the lowest median wins. A new range
    starts at the first measured size where another candidate wins.
    """
    sizes = sorted({nbytes for _, nbytes in timings})
    rules: list[Rule] = []
    for nbytes in sizes:
        timed = {name: timings[name, nbytes] for name in candidates if (name, nbytes) in timings}
        incumbent = (incumbents or {}).get(nbytes)
        if incumbent in timed:
            held = timed[incumbent]
            timed = {name: seconds for name, seconds in timed.items() if name == incumbent
                     or all(t < h for t, h in zip(seconds, held, strict=True))}
        best = candidates[min(timed, key=lambda name: (statistics.median(timed[name]), name))]
        if rules and (rules[-1].algorithm, rules[-1].segment_bytes) == \
                (best.algorithm, best.segment_bytes):
            continue
        rules.append(Rule(0 if not rules else nbytes, best.algorithm, best.segment_bytes))
    return Rules(world_size, nodes, tuple(rules), measured_on)


_active: Rules | None = None
_active_source: str | None = None  # the path _active came from; None: not looked up yet
_active_text = "no rules file"  # what ranks compare
_keyval: int | None = None


def use_rules(path: str | os.PathLike[str] | None) -> None:
    """Make ``allreduce`` follow the rules in ``path`` (None: back to the environment)."""
    _activate(load_rules(path) if path is not None else None,
              str(path) if path is not None else None)


def _activate(rules: Rules | None, source: str | None) -> None:
    global _active, _active_source, _active_text
    _active, _active_source = rules, source
    _active_text = rules.to_json() if rules is not None else "no rules file"


def _current() -> Rules | None:
    if _active_source is None:
        path = os.environ.get(ENVIRONMENT_VARIABLE, "")
        _activate(load_rules(path) if path else None, path)
    return _active


def rules_for(comm: MPI.Comm, timeout_s: float) -> Rules | None:
    """The active rules if they were measured for ``comm``'s size and node count.

    The first call for a communicator compares every rank's rules, or their
    absence (a collective hash compare: all ranks make it at the same
    all-reduce): a rank that did not get the file would otherwise reduce in
    another order, or another algorithm, than its peers.
    """
    global _keyval
    rules = _current()
    if comm.Get_size() == 1:
        return None
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval()
    described = _active_text
    if comm.Get_attr(_keyval) is not described:
        where = f"all-reduce rules ({_active_source or 'none'}; "  \
                f"set {ENVIRONMENT_VARIABLE} alike on every rank)"
        check_same(comm, described, where, timeout_s)
        comm.Set_attr(_keyval, described)
    if rules is None or rules.world_size != comm.Get_size():
        return None
    return rules if node_layout(comm).nodes == rules.nodes else None

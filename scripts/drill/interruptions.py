"""Cases where a run is cut short: SIGKILL, SIGTERM, SIGINT, a full or read-only disk,
a resume into another run, and MPI jobs with a rank killed or ranks that disagree.

Each function makes a case: ``case(drill) -> Row``, run by ``fault_drill.py``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from .jobs import Job, alive, children, metric_steps, mpirun, rank_of, run, wait_for
from .verdicts import (
    TRACEBACK,
    Row,
    digest,
    ended_early,
    fingerprint,
    first_line,
    judged,
    leftovers,
    loads,
)
from .workspace import LONG_STEPS, Drill


def sigkill(job: Job) -> tuple[int, int]:
    """SIGKILL the job's main process only, as the out-of-memory killer would; then
    (its loader workers before, those still alive 1 s later). The group dies after."""
    workers = children(job.proc.pid)
    os.kill(job.proc.pid, signal.SIGKILL)
    time.sleep(1.0)
    orphans = sum(alive(pid) for pid in workers)
    job.finish()
    return len(workers), orphans


def load_step(path: Path) -> int:
    from deepspeech.training.checkpoint import load_checkpoint
    return load_checkpoint(path).state.step


def resumed_row(d: Drill, run_dir: Path, folder: Path, resume: str) -> Row:
    """Finish the run from ``resume``; ok when its weights are the uninterrupted run's."""
    outcome = run(d.long(run_dir, resume), folder / "resume")
    row = judged(outcome, clean=True)
    same = outcome.status == 0 and digest(run_dir / "last.pt") == d.reference
    if outcome.status == 0 and not same:
        row.problems.append("resumed weights differ from the uninterrupted run's")
    row.intact = "yes" if same else "no"
    return row


def kill_case(index: int, mid_write: bool = False) -> Callable[[Drill], Row]:
    """SIGKILL a training at a seeded random moment, resume, compare with the reference.

    ``mid_write``: as if the kill cut a checkpoint's write short, half of last.pt is put
    where the write leaves it (a random kill rarely lands there); the resume removes it.
    """
    def case(d: Drill) -> Row:
        folder = d.folder(f"kill {index}{' mid-write' if mid_write else ''}")
        run_dir, last = folder / "run", folder / "run" / "last.pt"
        # A moment in steps, not seconds, so that a loaded machine does not move it past
        # the end; the jitter (a step is about 50 ms) lands some kills mid-step.
        chance = random.Random(d.seed * 1000 + index)
        target = chance.randint(6 if mid_write else 1, LONG_STEPS - 1)  # 5: the first last.pt
        jitter = chance.uniform(0.0, 0.06)
        job = Job(d.long(run_dir), folder / "first")
        if not wait_for(lambda: metric_steps(run_dir) >= target, job):
            return ended_early(job, f"step {target}")
        time.sleep(jitter)
        if not job.running():
            return Row(said="ended before the kill", status=job.finish().status,
                       intact="n.a.")
        step = metric_steps(run_dir)
        workers, orphans = sigkill(job)
        if mid_write and last.exists():
            (run_dir / ".last.pt.k1ll3d.tmp").write_bytes(last.read_bytes()[:200_000])
        tmp = leftovers(run_dir)
        broken = loads(last) if last.exists() else None
        start = load_step(last) if last.exists() and not broken else 0
        row = resumed_row(d, run_dir, folder,
                          f"train.resume={last}" if start else "--overwrite")
        row.said = (f"killed at step {step}, {orphans}/{workers} workers alive 1 s on, "
                    f"{'.tmp left, ' if tmp else ''}"
                    + (f"resumed at {start}" if start else "no last.pt: started again"))
        if broken:
            row.problems.append(f"corrupt last.pt: {broken}")
        if orphans:
            row.problems.append(f"{orphans} loader worker(s) alive 1 s after the kill")
        if leftovers(run_dir):
            row.problems.append(f"{leftovers(run_dir)[0]} left after the resume")
        return row
    return case


def stop_case(number: signal.Signals) -> Callable[[Drill], Row]:
    """SIGTERM or SIGINT: stop after the step with last.pt saved there; resume exactly."""
    def case(d: Drill) -> Row:
        folder = d.folder(f"{number.name}")
        run_dir, last = folder / "run", folder / "run" / "last.pt"
        job = Job(d.long(run_dir), folder / "first")
        if not wait_for(lambda: metric_steps(run_dir) >= 3, job):
            return ended_early(job, "step 3")
        job.proc.send_signal(number)
        first = job.finish()
        stopped = re.search(rf"stopped by {number.name} at step (\d+)", first.output)
        problems = [] if first.status in (130, 128 + number) else [
            f"exit {first.status}, expected 130 or {128 + number}"]
        if TRACEBACK in first.output:
            problems.append("Python traceback")
        if not stopped or not last.exists() or load_step(last) != int(stopped.group(1)):
            problems.append("last.pt is not at the step the stop names")
        row = resumed_row(d, run_dir, folder, f"train.resume={last}")
        row.said = stopped.group(0) if stopped else first_line(first)
        row.status, row.seconds = first.status, first.seconds
        row.problems[:0] = problems
        return row
    return case


def full_disk(d: Drill) -> Row:
    folder = d.folder("full disk")
    with d.tmpfs("full", "1m") as point:
        outcome = run(d.train(point / "run", train__epochs=4), folder)
        row = judged(outcome, names=r"no space left")
        last, metrics = point / "run" / "last.pt", point / "run" / "metrics.jsonl"
        broken = loads(last) if last.exists() else "no last.pt was written"
        try:
            [json.loads(line) for line in metrics.read_text().splitlines()]
        except (OSError, ValueError) as exc:
            broken = broken or f"metrics.jsonl: {exc}"
        row.intact = "no" if broken else "yes"
        if broken:
            row.problems.append(broken)
    return row


def read_only_new(d: Drill) -> Row:
    folder = d.folder("read-only new run")
    with d.tmpfs("ro_new", "4m", read_only=True) as point:
        return judged(run(d.train(point / "run", "train.max_steps=2"), folder),
                      names=re.escape(str(point)))


def read_only_resume(d: Drill) -> Row:
    folder = d.folder("read-only resume")
    base = d.base12.parent
    with d.tmpfs("ro_resume", "8m", read_only=True,
                 fill=lambda p: shutil.copytree(base, p / "run")) as point:
        before = fingerprint(point / "run")
        outcome = run(d.train(point / "run", f"train.resume={point / 'run' / 'last.pt'}",
                              train__epochs=3), folder)
        row = judged(outcome, names=re.escape(str(point)))
        row.intact = "yes" if fingerprint(point / "run") == before else "no"
    return row


def resume_into_other(d: Drill) -> Row:
    folder = d.folder("resume into another run")
    # k1: the same settings stopped at step 2, as a killed run would be
    other = d.finished("k1", d.train(d.root / "runs" / "k1", "--overwrite",
                                     "train.max_steps=2"))
    target = folder / "base12"
    shutil.copytree(d.base12.parent, target)
    before = fingerprint(target)
    outcome = run(d.train(target, f"train.resume={other / 'last.pt'}"), folder)
    row = judged(outcome, names=r"base12")
    row.intact = "yes" if fingerprint(target) == before else "no"
    if row.intact == "no":
        row.problems.append("base12's files changed")
    return row


def mpi_rank_killed(d: Drill) -> Row:
    """SIGKILL rank 1 of a two-rank training: the job ends in bounded time, naming it."""
    folder = d.folder("mpi rank killed")
    run_dir = folder / "run"
    job = Job(mpirun("-n", "2", *d.train(run_dir, "distributed.timeout_s=10",
                                          train__epochs=1000)), folder)
    if not wait_for(lambda: metric_steps(run_dir) >= 3, job):
        return ended_early(job, "step 3")
    ranks = [pid for pid in children(job.proc.pid) if rank_of(pid) == "1"]
    if ranks:
        os.kill(ranks[0], signal.SIGKILL)
    killed_at = job.elapsed()
    outcome = job.finish(bound=killed_at + 90)
    outcome.seconds -= killed_at  # from the kill to the job's end
    row = judged(outcome, names=r"rank 1\b", status=None, where="output")
    row.said = next((line.strip() for line in outcome.output.splitlines()
                     if re.search(r"rank 1\b", line)), row.said)
    if not ranks:
        row.problems.append("the drill found no rank 1 to kill")
    broken = loads(run_dir / "last.pt")
    row.intact = "no" if broken else "yes"
    if broken:
        row.problems.append(broken)
    return row


def mpi_configs_differ(d: Drill) -> Row:
    """Ranks started with different seeds: refused before step one."""
    folder = d.folder("mpi ranks disagree")
    base = d.train(folder / "run", "distributed.timeout_s=20")
    outcome = run(mpirun("-n", "1", *base, "train.seed=0", ":", "-n", "1", *base,
                         "train.seed=1"), folder)
    row = judged(outcome, names=r"config differs", status=None, where="output")
    row.said = next((line.split(": ", 1)[-1] for line in outcome.stderr.splitlines()
                     if "differs" in line), row.said)
    if metric_steps(folder / "run"):
        row.problems.append("trained before refusing")
    return row

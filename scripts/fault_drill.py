"""A hostile afternoon against the ``deepspeech`` command line: no hang, no silent loss.

Every case runs the real command as a subprocess in its own process group with a time
bound, so the drill itself never hangs: a case that reaches its bound is a HANG (and its
process group is killed). The cases: broken audio files and manifest lines (through
``train``, ``evaluate``, ``data check`` and ``transcribe``), broken configs, SIGKILLs at
seeded random moments followed by a resume that must end bitwise identical to a run never
interrupted, SIGTERM and SIGINT, a full disk and a read-only folder (small tmpfs mounts,
so run it as root), a NaN file behind a loader worker, a resume into a folder that holds
another run, an MPI job with a rank killed or with ranks that disagree on the config,
checkpoints that carry a pickle payload, and malformed ARPA language models; then the
hostile part: ``deepspeech serve`` on a loopback port under slow bodies, idle streams,
too many uploads or streams from one client, odd sample rates and clients that leave
mid-upload (each a named refusal or a request served within its bound, the server alive,
serving and its memory bounded after every case), and model packages with special files,
paths out of the package or NaN weights.

A case is ok when it ends within its bound with a named error (exit status 2, the message
naming the file, line or key, no Python traceback) or a clean result, and nothing already
written is lost. The drill prints one row per case and exits with status 1 if any fails.
The cases live in ``scripts/drill/`` (``bad_input``, ``interruptions``, ``hostile``);
``all_cases`` below lists them in the order they run.

    python scripts/fault_drill.py                    # every case, a table
    python scripts/fault_drill.py --only kill --kills 3 --json
    python scripts/fault_drill.py --only 'hostile*'  # the hostile part alone
    python scripts/fault_drill.py --out /tmp/drill   # keep the cases' files and outputs

All data is made in a temporary folder (tone 'speech', no network); mounts are undone
and the folder removed at the end unless ``--out`` names one to keep.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from drill import jobs
from drill.bad_input import (
    ARPAS,
    CONFIGS,
    arpa_case,
    config_case,
    input_case,
    nan_behind_worker,
    override_case,
    payload_case,
)
from drill.hostile import hostile_cases
from drill.inputs import AUDIO_KINDS, LINE_KINDS
from drill.interruptions import (
    full_disk,
    kill_case,
    mpi_configs_differ,
    mpi_rank_killed,
    read_only_new,
    read_only_resume,
    resume_into_other,
    stop_case,
)
from drill.verdicts import Row, header, table_row
from drill.workspace import Drill


def all_cases(kills: int) -> dict[str, Callable[[Drill], Row]]:
    """Every case, by name, in the order they run."""
    cases: dict[str, Callable[[Drill], Row]] = {}
    for kind in [*AUDIO_KINDS, *LINE_KINDS, "empty manifest", "non-UTF-8 manifest"]:
        cases[f"train: {kind}"] = input_case("train", kind)
    for kind in ("missing file", "WAV cut off", "8 kHz audio", "invalid JSON line",
                 "empty manifest", "non-UTF-8 manifest"):
        cases[f"evaluate: {kind}"] = input_case("evaluate", kind)
    for kind in ("FLAC cut off", "NaN samples", "folder as audio", "negative duration"):
        cases[f"data check: {kind}"] = input_case("check", kind)
    for kind in ("empty file", "text file as .wav", "NaN samples", "stereo"):
        cases[f"transcribe: {kind}"] = input_case("transcribe", kind)
    for name in CONFIGS:
        cases[f"config: {name}"] = config_case(name)
    for name, command, override, names in (
            ("override: unknown key", "train", "train.bogus=1", r"train\.bogus"),
            ("override: decode.beam=1e8", "evaluate", "decode.beam=100000000", r"decode\.beam"),
            ("override: lm_weight=1e308", "evaluate", "decode.lm_weight=1.0e308",
             r"decode\.lm_weight"),
            ("override: beam_threshold=-5", "evaluate", "decode.beam_threshold=-5",
             r"decode\.beam_threshold")):
        cases[name] = override_case(name, command, override, names)
    for index in range(1, kills + 1):
        cases[f"kill {index}: SIGKILL + resume"] = kill_case(index)
    cases[f"kill {kills + 1}: .tmp from a cut write"] = kill_case(kills + 1, mid_write=True)
    for number in (signal.SIGTERM, signal.SIGINT):
        cases[f"{number.name} + resume"] = stop_case(number)
    cases["full disk (1 MB tmpfs)"] = full_disk
    cases["read-only: new run"] = read_only_new
    cases["read-only: resume"] = read_only_resume
    cases["hang: train NaN, 1 worker"] = nan_behind_worker("train")
    cases["hang: evaluate NaN, 1 worker"] = nan_behind_worker("evaluate")
    cases["resume into another run"] = resume_into_other
    cases["mpi: rank 1 SIGKILLed"] = mpi_rank_killed
    cases["mpi: ranks' seeds differ"] = mpi_configs_differ
    for how in ("evaluate", "transcribe", "resume", "init_from"):
        cases[f"pickle payload: {how}"] = payload_case(how)
    for kind in ARPAS:
        cases[f"arpa: {kind}"] = arpa_case(kind)
    cases["arpa: bad probability, tune"] = arpa_case("bad probability", "tune")
    cases.update(hostile_cases())
    return cases


def run_case(drill: Drill, name: str, case: Callable[[Drill], Row]) -> Row:
    """One case; a failure of the drill's own setup is that case's FAIL, not a crash."""
    try:
        row = case(drill)
    except Exception as exc:  # reported in the table, so that the other cases still run
        row = Row(problems=[f"drill error: {type(exc).__name__}: {exc}"])
    row.case = name
    row.said = re.sub(rf"{re.escape(str(drill.root))}/(cases/[^/\s]+/)?", "", row.said)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the cases' files here")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILL drills (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--only", metavar="PATTERN",
                        help="run the cases whose name contains PATTERN (or matches it as "
                             "a glob)")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    parser.add_argument("--bound", type=float, default=jobs.BOUND,
                        help=f"seconds before a case counts as a hang (default {jobs.BOUND:.0f})")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args()
    cases = all_cases(args.kills)
    if args.only:
        cases = {name: case for name, case in cases.items()
                 if args.only.lower() in name.lower() or fnmatch.fnmatch(name, args.only)}
    if args.list or not cases:
        print("\n".join(cases) or f"no case matches {args.only!r}")
        return 0 if cases else 2
    jobs.BOUND = args.bound  # read by Job.finish and wait_for
    # a drill stopped by SIGTERM still kills its jobs and undoes its mounts (finally)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    torch.set_num_threads(1)
    root = args.out or Path(tempfile.mkdtemp(prefix="fault_drill_"))
    root.mkdir(parents=True, exist_ok=True)
    drill = Drill(root.resolve(), args.seed)
    start, rows = time.monotonic(), []
    try:
        if not args.json:
            print(header(), flush=True)
        for name, case in cases.items():
            rows.append(run_case(drill, name, case))
            print(json.dumps({**asdict(rows[-1]), "seconds": round(rows[-1].seconds, 2),
                              "verdict": rows[-1].verdict})
                  if args.json else table_row(rows[-1]), flush=True)
    finally:
        for job in jobs.Job.started:
            jobs.kill_group(job.proc.pid)
        for point in list(drill.mounts):
            drill.unmount(point)
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)
    failed = [row.case for row in rows if row.problems]
    if not args.json:
        print(f"\n{len(rows) - len(failed)} ok, {len(failed)} FAIL of {len(rows)} cases in "
              f"{time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

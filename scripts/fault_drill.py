"""A hostile afternoon against the ``deepspeech`` command line: no hang, no silent loss.

Every case runs the real command as a subprocess in its own process group with a time
bound, so the drill itself never hangs: a case that reaches its bound is a HANG (and its
process group is killed). The cases: broken audio files and manifest lines (through
``train``, ``evaluate``, ``data check`` and ``transcribe``), broken configs, SIGKILLs at
seeded random moments followed by a resume that must end bitwise identical to a run never
interrupted, SIGTERM and SIGINT, a full disk and a read-only folder (small tmpfs mounts,
so run it as root), a NaN file behind a loader worker, a resume into a folder that holds
another run, an MPI job with a rank killed or with ranks that disagree on the config,
checkpoints that carry a pickle payload, and malformed ARPA language models.

A case is ok when it ends within its bound with a named error (exit status 2, the message
naming the file, line or key, no Python traceback) or a clean result, and nothing already
written is lost. The drill prints one row per case and exits with status 1 if any fails.

    python scripts/fault_drill.py                    # every case, a table
    python scripts/fault_drill.py --only kill --kills 3 --json
    python scripts/fault_drill.py --out /tmp/drill   # keep the cases' files and outputs

All data is made in a temporary folder (tone 'speech', no network); mounts are undone
and the folder removed at the end unless ``--out`` names one to keep.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

BOUND = 120.0  # seconds a case may take (--bound)
RATE = 16000
WORDS = ["yes", "no", "up", "down", "left", "right", "go", "stop"]
BAD_LINE = 5  # the broken utterance's line in each manifest the drill writes
TRACEBACK = "Traceback (most recent call last)"
MPIRUN = Path(sys.executable).with_name("mpirun")
LONG_STEPS = 36  # the kill drills' run: 6 epochs of 6 steps


# ---------------------------------------------------------------------------- data

def tone(words: list[str], rate: int = RATE, seed: int = 0) -> np.ndarray:
    """One distinct tone per word with short gaps: crude, learnable 'speech'."""
    rng = np.random.default_rng(seed)
    pieces = []
    for word in words:
        t = np.arange(int(rate * 0.25)) / rate
        pieces += [0.4 * np.sin(2 * np.pi * (300 + 120 * WORDS.index(word)) * t),
                   np.zeros(int(rate * 0.05))]
    audio = np.concatenate(pieces)
    return (audio + 0.01 * rng.standard_normal(len(audio))).astype(np.float32)


def entry(path: Path | str, text: str = "yes no", duration: float = 0.6, **extra) -> str:
    """One manifest line."""
    return json.dumps({"audio_filepath": str(path), "text": text, "duration": duration,
                       **extra})


def write_corpus(folder: Path, count: int, seed: int, name: str) -> Path:
    """``count`` utterances of 2-3 words as FLAC and their manifest (absolute paths)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 3))]
        audio = tone(words, seed=seed * 1000 + index)
        path = folder / f"{name}{index:03d}.flac"
        sf.write(path, audio, RATE)
        lines.append(entry(path, " ".join(words), len(audio) / RATE))
    manifest = folder / f"{name}.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def write_audio(path: Path, rate: int = RATE, channels: int = 1,
                subtype: str = "PCM_16") -> float:
    """A two-word tone at ``rate``; returns its duration."""
    audio = tone(["yes", "no"], rate)
    sf.write(path, np.stack([audio] * channels, axis=1) if channels > 1 else audio, rate,
             subtype=subtype)
    return len(audio) / rate


def cut(path: Path, fraction: float) -> None:
    """Keep the first ``fraction`` of a file's bytes, as a copy interrupted midway."""
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])


# Each kind of broken audio writes a file into the folder and returns its path; the
# error must name the file. "clean" kinds must train, score or transcribe without error.
def missing(folder: Path) -> Path:
    return folder / "missing.wav"


def empty(folder: Path) -> Path:
    (folder / "empty.wav").write_bytes(b"")
    return folder / "empty.wav"


def text_as_wav(folder: Path) -> Path:
    (folder / "notes.wav").write_text("this is not audio\n")
    return folder / "notes.wav"


def cut_wav(folder: Path) -> Path:
    write_audio(folder / "cut.wav")
    cut(folder / "cut.wav", 0.5)
    return folder / "cut.wav"


def cut_flac(folder: Path) -> Path:
    write_audio(folder / "cut.flac")
    cut(folder / "cut.flac", 0.5)
    return folder / "cut.flac"


def nan_samples(folder: Path) -> Path:
    audio = tone(["yes", "no"])
    audio[100:200] = np.nan
    sf.write(folder / "nan.wav", audio, RATE, subtype="FLOAT")
    return folder / "nan.wav"


def rate_8k(folder: Path) -> Path:
    write_audio(folder / "phone.wav", rate=8000)
    return folder / "phone.wav"


def stereo(folder: Path) -> Path:
    write_audio(folder / "stereo.wav", channels=2)
    return folder / "stereo.wav"


def a_folder(folder: Path) -> Path:
    (folder / "clips.wav").mkdir()
    return folder / "clips.wav"


AUDIO_KINDS: dict[str, tuple[Callable[[Path], Path], bool]] = {
    "missing file": (missing, False), "empty file": (empty, False),
    "text file as .wav": (text_as_wav, False), "WAV cut off": (cut_wav, False),
    "FLAC cut off": (cut_flac, False), "NaN samples": (nan_samples, False),
    "8 kHz audio": (rate_8k, True), "stereo": (stereo, True),
    "folder as audio": (a_folder, False),
}

# Broken manifest lines: the line itself (the good audio beside it to point at).
LINE_KINDS: dict[str, Callable[[Path], str]] = {
    "out-of-vocabulary chars": lambda good: entry(good, "héllo wörld ☃"),
    "invalid JSON line": lambda good: '{"audio_filepath": "a.wav", "text": ',
    "missing \"text\"": lambda good: json.dumps({"audio_filepath": str(good),
                                                 "duration": 0.6}),
    "negative duration": lambda good: entry(good, duration=-1.0),
    "offset past the end": lambda good: entry(good, duration=0.6, offset=100.0),
}


def broken_manifest(folder: Path, source: Path, kind: str) -> tuple[Path, str]:
    """A copy of ``source`` with line BAD_LINE broken as ``kind``; (manifest, must-name)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = source.read_text().splitlines()
    manifest = folder / "bad.jsonl"
    line_named = rf"bad\.jsonl(:| line ){BAD_LINE}\b"
    if kind == "empty manifest":
        manifest.write_bytes(b"")
        return manifest, r"bad\.jsonl"
    if kind == "non-UTF-8 manifest":
        lines[BAD_LINE - 1] = lines[BAD_LINE - 1].replace('"text": "', '"text": "caf\udce9 ')
        manifest.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
        return manifest, line_named
    if kind in LINE_KINDS:
        good = folder / "good.flac"  # its own file, so that naming it names the line
        write_audio(good)
        lines[BAD_LINE - 1] = LINE_KINDS[kind](good)
        named = rf"{line_named}|good\.flac"
    else:
        make, _ = AUDIO_KINDS[kind]
        path = make(folder)
        duration = sf.info(path).duration if path.is_file() and kind in (
            "8 kHz audio", "stereo", "NaN samples", "WAV cut off") else 0.6
        lines[BAD_LINE - 1] = entry(path, duration=duration)
        named = re.escape(path.name)
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, named


def is_clean(kind: str) -> bool:
    return kind in AUDIO_KINDS and AUDIO_KINDS[kind][1]


# ---------------------------------------------------------------------------- processes

@dataclass
class Outcome:
    status: int | None  # None: killed at the bound
    seconds: float
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def environment() -> dict[str, str]:
    return {**os.environ, "OMPI_MCA_btl": "^ofi", "TQDM_DISABLE": "1",
            "PYTHONUNBUFFERED": "1"}


def deepspeech(*args: object) -> list[str]:
    return [sys.executable, "-m", "deepspeech", *map(str, args)]


def mpirun(*args: object) -> list[str]:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [str(MPIRUN), *root, "--oversubscribe", *map(str, args)]


class Job:
    """A command started in its own session, its output in files beside the case."""

    started: list[Job] = []  # every job, so that an interrupted drill ends them all

    def __init__(self, argv: list[str], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.start = folder, time.monotonic()
        with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
            self.proc = subprocess.Popen(argv, cwd=folder, env=environment(), stdout=out,
                                         stderr=err, start_new_session=True)
        Job.started.append(self)

    def running(self) -> bool:
        return self.proc.poll() is None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def finish(self, bound: float | None = None) -> Outcome:
        """Wait up to ``bound`` (else BOUND) seconds from the start; then kill the group."""
        try:
            status = self.proc.wait(timeout=max(0.1, (bound or BOUND) - self.elapsed()))
        except subprocess.TimeoutExpired:
            status = None
        seconds = self.elapsed()
        kill_group(self.proc.pid)
        if status is None:
            self.proc.wait()
        return Outcome(status, seconds, (self.folder / "stdout.txt").read_text(errors="replace"),
                       (self.folder / "stderr.txt").read_text(errors="replace"))


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run(argv: list[str], folder: Path) -> Outcome:
    return Job(argv, folder).finish()


def children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(condition: Callable[[], bool], job: Job) -> bool:
    """Poll until ``condition`` holds; False if the job ended or its bound came first."""
    while not condition():
        if not job.running() or job.elapsed() > BOUND:
            return False
        time.sleep(0.02)
    return True


def ended_early(job: Job, waited_for: str) -> Row:
    """The row of a job that ended (or reached its bound) before what the case waited for."""
    row = judged(job.finish(), clean=True)
    row.problems.append(f"ended before {waited_for}")
    return row


def metric_steps(folder: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(1 for line in (folder / "metrics.jsonl").read_text().splitlines()
                   if '"train/loss"' in line)
    return 0


# ---------------------------------------------------------------------------- verdicts

@dataclass
class Row:
    case: str = ""
    said: str = ""
    status: int | str = "-"
    seconds: float = 0.0
    intact: str = "n.a."
    problems: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "ok" if not self.problems else "FAIL: " + "; ".join(self.problems)


def error_text(outcome: Outcome) -> str:
    """The command's error message, from its 'error:' line on, else the last lines."""
    lines = outcome.stderr.splitlines()
    for index, line in enumerate(lines):
        if re.match(r"deepspeech [\w ]+: error: ", line):
            return "\n".join(lines[index:])
    return "\n".join(line for line in lines[-3:] if line.strip())


def first_line(outcome: Outcome) -> str:
    """The first line of the error; for a clean run its last line of output."""
    told = [line for line in outcome.stdout.splitlines() if line.strip()]
    logged = [line for line in outcome.stderr.splitlines() if " INFO " in line]
    if outcome.status == 0:  # a score, a transcript or the log's last word
        line = next((line for line in told if "WER" in line), told[0] if told else
                    logged[-1] if logged else "(clean; printed nothing)")
    elif outcome.status == 1 and told:  # data check: its first finding
        line = next((line for line in told if line.startswith("  ")), told[0])
    else:  # an error; when its first line only announces a list, the list's first item
        lines = error_text(outcome).strip().splitlines() or [""]
        line = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        line = re.sub(r" \([^()]{40,}\)", "", line)  # long advice in brackets
    return re.sub(r"^deepspeech [\w ]+: error: |^\d\d:\d\d:\d\d \w+ [\w.]+: ", "", line)


def judged(outcome: Outcome, clean: bool = False, names: str = "", status: int | None = 2,
           where: str = "error") -> Row:
    """A row for an outcome that must be clean, or an error with exit ``status`` (None:
    any but 0) whose message (``where``: error, stdout or output) matches ``names``."""
    row = Row(said=first_line(outcome), seconds=outcome.seconds,
              status="-" if outcome.status is None else outcome.status)
    if outcome.status is None:
        row.problems.append(f"HANG: killed after {outcome.seconds:.0f} s")
        return row
    if TRACEBACK in outcome.output:
        row.problems.append("Python traceback")
    if clean:
        if outcome.status != 0:
            row.problems.append(f"exit {outcome.status}, expected a clean run")
        return row
    if outcome.status == 0 or status is not None and outcome.status != status:
        row.problems.append(f"exit {outcome.status}, expected {status or 'an error'}")
    text = {"error": error_text(outcome), "stdout": outcome.stdout,
            "output": outcome.output}[where]
    if names and not re.search(names, text):
        row.problems.append(f"message does not name /{names}/")
    return row


def digest(path: Path) -> str:
    from deepspeech.training.checkpoint import load_checkpoint
    from deepspeech.training.determinism import state_dict_digest
    return state_dict_digest(load_checkpoint(path).model)


def loads(path: Path) -> str | None:
    """None if the checkpoint loads, else why not."""
    from deepspeech.training.checkpoint import load_checkpoint
    try:
        load_checkpoint(path)
    except Exception as exc:  # any failure is a corrupt checkpoint, reported, not raised
        return str(exc).splitlines()[0]
    return None


def fingerprint(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.tmp"))


# ---------------------------------------------------------------------------- the drill

class Drill:
    """The drill's folder and the shared runs and corpora that cases build on, made once."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root, self.seed = root, seed
        self.mounts: list[Path] = []
        (root / "empty.yaml").write_text("{}\n")
        self.config = root / "empty.yaml"

    def folder(self, name: str) -> Path:
        path = self.root / "cases" / re.sub(r"[^\w.-]+", "_", name).strip("_")
        shutil.rmtree(path, ignore_errors=True)  # from an earlier drill in the same --out
        path.mkdir(parents=True)
        return path

    @functools.cached_property
    def corpus(self) -> dict[str, Path]:
        folder = self.root / "corpus"
        return {"train": write_corpus(folder, 48, 0, "train"),
                "val": write_corpus(folder, 12, 1, "val")}

    def tiny(self, output_dir: Path, workers: int = 0, **changes: object) -> list[str]:
        """Overrides for a model whose training step takes milliseconds."""
        settings = {
            "data.train_manifest": self.corpus["train"], "data.val_manifest": self.corpus["val"],
            "train.output_dir": output_dir, "data.num_workers": workers,
            "train.num_threads": 1, "train.batch_size": 8, "train.epochs": 2,
            "train.checkpoint_every": 2, "train.log_every": 1, "model.conv.channels": "[4,4]",
            "model.conv.kernels": "[[11,5],[11,5]]", "model.rnn.layers": 2,
            "model.rnn.hidden": 24, "optim.name": "adamw", "optim.lr": 0.003,
            "features.spec_augment.freq_masks": 1, "features.spec_augment.time_masks": 1,
            "model.dropout": 0.1, **{k.replace("__", "."): v for k, v in changes.items()}}
        return [f"{key}={value}" for key, value in settings.items()]

    def train(self, output_dir: Path, *extra: str, workers: int = 0, **changes) -> list[str]:
        return deepspeech("train", "-c", self.config, *self.tiny(output_dir, workers, **changes),
                          *extra)

    def finished(self, name: str, argv: list[str]) -> Path:
        """Run a training the cases build on, in runs/NAME; its folder."""
        outcome = run(argv, self.root / "logs" / name)
        if outcome.status != 0:
            raise RuntimeError(f"setup run {name} failed: {first_line(outcome)}")
        return self.root / "runs" / name

    @functools.cached_property
    def base12(self) -> Path:
        """A finished 12-step run's last.pt: the model that evaluate and transcribe use."""
        runs = self.root / "runs"
        return self.finished("base12", self.train(runs / "base12", "--overwrite")) / "last.pt"

    # The kill drills: LONG_STEPS steps, a checkpoint every 5, one loader worker.
    def long(self, output_dir: Path, *extra: str) -> list[str]:
        return self.train(output_dir, *extra, workers=1, train__epochs=LONG_STEPS // 6,
                          train__checkpoint_every=5)

    @functools.cached_property
    def reference(self) -> str:
        """The weights digest of the long run, never interrupted."""
        runs = self.root / "runs"
        return digest(self.finished("reference", self.long(runs / "reference", "--overwrite"))
                      / "last.pt")

    @contextlib.contextmanager
    def tmpfs(self, name: str, size: str, read_only: bool = False,
              fill: Callable[[Path], None] | None = None) -> Iterator[Path]:
        """A small tmpfs mounted under the drill's folder, unmounted afterwards."""
        point = self.root / "mounts" / name
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                       check=True, capture_output=True)
        self.mounts.append(point)
        try:
            if fill:
                fill(point)
            if read_only:
                subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True,
                               capture_output=True)
            yield point
        finally:
            self.unmount(point)

    def unmount(self, point: Path) -> None:
        if point in self.mounts:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)
            self.mounts.remove(point)


# ---------------------------------------------------------------------------- cases

def input_case(tool: str, kind: str) -> Callable[[Drill], Row]:
    """``tool`` (train, evaluate, check, transcribe) meets a broken input of ``kind``."""
    def case(d: Drill) -> Row:
        folder = d.folder(f"{tool} {kind}")
        clean = is_clean(kind)
        if tool == "transcribe":
            make, _ = AUDIO_KINDS[kind]
            path = make(folder)
            return judged(run(deepspeech("transcribe", "--checkpoint", d.base12, path),
                              folder), clean, re.escape(path.name))
        source = d.corpus["val" if tool == "evaluate" else "train"]
        manifest, names = broken_manifest(folder / "data", source, kind)
        if tool == "train":
            return judged(run(d.train(folder / "run", "train.max_steps=2",
                                      f"data.train_manifest={manifest}"), folder), clean, names)
        if tool == "evaluate":
            return judged(run(deepspeech("evaluate", "--checkpoint", d.base12, "--manifest",
                                         manifest, "--workers", "0"), folder), clean, names)
        return judged(run(deepspeech("data", "check", manifest), folder), clean, names,
                      status=1, where="stdout")
    return case


CONFIGS: dict[str, tuple[str, str]] = {
    # name: (the YAML, what the error must name)
    "YAML syntax error": ("train:\n  epochs: [1, 2\n  seed: 0\n", r"bad\.yaml.*line"),
    "unknown key": ("train:\n  epoch: 3\n", r"train\.epoch\b"),
    "wrong type": ("train:\n  batch_size: eight\n", r"train\.batch_size"),
    "negative batch": ("train:\n  batch_size: -8\n", r"train\.batch_size"),
    "!!python/object": ("train: !!python/object/apply:builtins.open ['MARKER', 'w']\n",
                        r"bad\.yaml"),
}


def config_case(name: str) -> Callable[[Drill], Row]:
    def case(d: Drill) -> Row:
        folder = d.folder(f"config {name}")
        yaml_text, names = CONFIGS[name]
        marker = folder / "marker"
        (folder / "bad.yaml").write_text(yaml_text.replace("MARKER", str(marker)))
        command = deepspeech("train", "-c", folder / "bad.yaml",
                             *d.tiny(folder / "run")[:2], f"train.output_dir={folder / 'run'}")
        row = judged(run(command, folder), names=names)
        if marker.exists():
            row.problems.append("the YAML ran code (marker file written)")
        return row
    return case


def override_case(name: str, command: str, override: str, names: str) -> Callable[[Drill], Row]:
    def case(d: Drill) -> Row:
        folder = d.folder(name)
        if command == "train":
            argv = d.train(folder / "run", override)
        else:
            argv = deepspeech("evaluate", "--checkpoint", d.base12, "--manifest",
                              d.corpus["val"], "decode.mode=beam", override)
        return judged(run(argv, folder), names=names)
    return case


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


def nan_behind_worker(tool: str) -> Callable[[Drill], Row]:
    """The hang: a NaN file decoded in a loader worker must end the run, not stall it."""
    def case(d: Drill) -> Row:
        folder = d.folder(f"{tool} NaN worker")
        source = d.corpus["val" if tool == "evaluate" else "train"]
        manifest, names = broken_manifest(folder / "data", source, "NaN samples")
        if tool == "train":
            argv = d.train(folder / "run", "train.max_steps=2",
                           f"data.train_manifest={manifest}", workers=1)
        else:
            argv = deepspeech("evaluate", "--checkpoint", d.base12, "--manifest", manifest,
                              "--workers", "1")
        return judged(run(argv, folder), names=names)
    return case


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


def rank_of(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK=") and \
                    b"deepspeech" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return item.split(b"=", 1)[1].decode()
    return None


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


class Payload:
    """Unpickled, it would open (and so create) the marker file: code run by a load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def payload_case(how: str) -> Callable[[Drill], Row]:
    def case(d: Drill) -> Row:
        folder = d.folder(f"payload {how}")
        marker, evil = folder / "marker", folder / "evil.pt"
        payload = torch.load(d.base12, weights_only=True)
        payload["notes"] = Payload(marker)
        torch.save(payload, evil)
        argv = {"evaluate": deepspeech("evaluate", "--checkpoint", evil, "--manifest",
                                       d.corpus["val"]),
                "transcribe": deepspeech("transcribe", "--checkpoint", evil,
                                         json.loads(d.corpus["val"].read_text().splitlines()[0])
                                         ["audio_filepath"]),
                "resume": d.train(folder / "run", f"train.resume={evil}"),
                "init_from": d.train(folder / "run", f"train.init_from={evil}")}[how]
        row = judged(run(argv, folder), names=r"evil\.pt")
        if marker.exists():
            row.problems.append("the checkpoint ran code (marker file written)")
        return row
    return case


ARPAS: dict[str, str] = {
    "empty": "",
    "no \\data\\": "\\1-grams:\n-1.0\tyes\n-1.0\tno\n\\end\\\n",
    "counts disagree": ("\\data\\\nngram 1=5\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n"
                        "-1.0\tyes\n\n\\end\\\n"),
    "bad probability": ("\\data\\\nngram 1=4\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n"
                        "-1.0\tyes\nabc\tno\n\n\\end\\\n"),
}


def arpa_case(kind: str, tool: str = "evaluate") -> Callable[[Drill], Row]:
    def case(d: Drill) -> Row:
        folder = d.folder(f"arpa {kind} {tool}")
        (folder / "bad.arpa").write_text(ARPAS[kind])
        if tool == "evaluate":
            argv = deepspeech("evaluate", "--checkpoint", d.base12, "--manifest",
                              d.corpus["val"], "decode.mode=beam",
                              f"decode.lm={folder / 'bad.arpa'}")
        else:
            argv = deepspeech("decode", "tune", "--checkpoint", d.base12, "--manifest",
                              d.corpus["val"], "--lm", folder / "bad.arpa",
                              "-o", folder / "decode.yaml")
        return judged(run(argv, folder), names=r"bad\.arpa")
    return case


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
    return cases


# ---------------------------------------------------------------------------- output

def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


COLUMNS = (("case", 30), ("what was said", 60), ("exit", 4), ("secs", 5), ("intact", 6))


def header() -> str:
    line = "  ".join(f"{name:<{width}}" for name, width in COLUMNS) + "  verdict"
    return line + "\n" + "-" * len(line)


def table_row(row: Row) -> str:
    cells = (shorten(row.case, 30), shorten(row.said, 60), str(row.status),
             f"{row.seconds:.1f}", row.intact)
    return "  ".join(f"{cell:<{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True)) \
        + "  " + row.verdict


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
    global BOUND
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the cases' files here")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILL drills (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--only", metavar="PATTERN",
                        help="run the cases whose name contains PATTERN (or matches it as "
                             "a glob)")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    parser.add_argument("--bound", type=float, default=BOUND,
                        help=f"seconds before a case counts as a hang (default {BOUND:.0f})")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args()
    cases = all_cases(args.kills)
    if args.only:
        cases = {name: case for name, case in cases.items()
                 if args.only.lower() in name.lower() or fnmatch.fnmatch(name, args.only)}
    if args.list or not cases:
        print("\n".join(cases) or f"no case matches {args.only!r}")
        return 0 if cases else 2
    BOUND = args.bound  # read by Job.finish and wait_for
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
        for job in Job.started:
            kill_group(job.proc.pid)
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

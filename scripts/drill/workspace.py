"""The fault drill's folder, its tmpfs mounts, and the corpora and runs cases share."""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from deepspeech.data.synth.tones import write_tone_corpus

from .jobs import deepspeech, run
from .verdicts import digest, first_line

LONG_STEPS = 36  # the kill drills' run: 6 epochs of 6 steps


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
        """The tests' tone corpus, with absolute paths: cases copy its lines elsewhere."""
        folder = self.root / "corpus"
        return {"train": write_tone_corpus(folder, 48, 0, name="train", absolute=True),
                "val": write_tone_corpus(folder, 12, 1, name="val", absolute=True)}

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

    @functools.cached_property
    def package(self) -> Path:
        """base12 exported as a model package: the one that package cases tamper with."""
        path = self.root / "runs" / "package"
        shutil.rmtree(path, ignore_errors=True)  # from an earlier drill in the same --out
        outcome = run(deepspeech("export", "--format", "package", "--checkpoint", self.base12,
                                 "-o", path), self.root / "logs" / "package")
        if outcome.status != 0:
            raise RuntimeError(f"setup export failed: {first_line(outcome)}")
        return path

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

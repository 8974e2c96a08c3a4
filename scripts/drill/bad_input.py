"""Cases where the input is bad: audio, manifests, configs, overrides, checkpoints, LMs.

Each function makes a case: ``case(drill) -> Row``, run by ``fault_drill.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import torch

from .inputs import AUDIO_KINDS, broken_manifest, is_clean
from .jobs import deepspeech, run
from .verdicts import Row, judged
from .workspace import Drill


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

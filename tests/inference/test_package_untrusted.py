"""A model package is untrusted input: special files, paths out of it, non-finite weights,
malformed files and a config that does not fit the weights are refused by name, fast."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from deepspeech.cli import main
from deepspeech.errors import CheckpointError, DeepSpeechError
from deepspeech.inference.package import load_package, write_package
from deepspeech.inference.recognizer import Recognizer
from deepspeech.training.checkpoint import load_checkpoint, save_checkpoint

SMALL = ["model.conv.channels=[4]", "model.conv.kernels=[[11,5]]", "model.conv.strides=[[2,2]]",
         "model.rnn.layers=1", "model.rnn.hidden=16", "features.normalize=global"]


@pytest.fixture(scope="module")
def checkpoint(random_recognizer, save_random_checkpoint, tmp_path_factory) -> Path:
    return save_random_checkpoint(random_recognizer(SMALL),
                                  tmp_path_factory.mktemp("model") / "random.pt")


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    return write_package(checkpoint, tmp_path_factory.mktemp("exported") / "pkg").path


@pytest.fixture
def package(exported, tmp_path) -> Path:
    """A copy to tamper with, beside a file that is not the package's."""
    (tmp_path / "outside.txt").write_text("not the package's\n")
    return Path(shutil.copytree(exported, tmp_path / "pkg"))


def relist(folder: Path, extra: tuple[str, ...] = ()) -> None:
    """Write checksums.sha256 anew over the regular files, as a tamperer would; ``extra``
    names (special files) are listed with the digest of nothing."""
    names = {item.name: hashlib.sha256(item.read_bytes()).hexdigest()
             for item in folder.iterdir()
             if item.is_file() and not item.is_symlink() and item.name != "checksums.sha256"}
    names.update({name: hashlib.sha256(b"").hexdigest() for name in extra})
    (folder / "checksums.sha256").write_text(
        "".join(f"{digest}  {name}\n" for name, digest in sorted(names.items())))


def refusal(folder: Path) -> str:
    """``load_package``'s error, which must come within seconds (a thread, so that a hang
    fails the test instead of stalling it)."""
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_package(folder)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert outcome, f"loading {folder} did not end within 20 s"
    assert isinstance(outcome[0], DeepSpeechError), outcome[0]
    return str(outcome[0])


def edit_yaml(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(("make", "message"), [
    (lambda folder: os.symlink("/dev/zero", folder / "feature_stats.json"),
     "a link to /dev/zero, outside the package; a package holds only files inside its folder"),
    (lambda folder: os.mkfifo(folder / "feature_stats.json"),
     "a FIFO (named pipe), not a regular file; a package holds only regular files"),
    (lambda folder: os.symlink(folder.parent / "outside.txt", folder / "feature_stats.json"),
     "a link to {outside}, outside the package"),
    (lambda folder: os.symlink("missing.json", folder / "feature_stats.json"),
     "a link to nothing, not a regular file"),
])
def test_a_listed_special_file_or_link_out_is_refused_without_reading_it(package, make,
                                                                         message):
    (package / "feature_stats.json").unlink()
    make(package)
    relist(package, ("feature_stats.json",))
    assert refusal(package).startswith(f"{package / 'feature_stats.json'}: " + message.format(
        outside=package.parent / "outside.txt"))


def test_an_unlisted_link_out_is_refused_and_a_link_inside_is_a_file(package, checkpoint):
    os.symlink("/dev/zero", package / "extra.bin")
    assert refusal(package).startswith(f"{package / 'extra.bin'}: a link to /dev/zero, "
                                       "outside the package")
    (package / "extra.bin").unlink()
    os.symlink("vocabulary.json", package / "same.json")  # inside, to a regular file
    relist(package)
    with (package / "checksums.sha256").open("a") as listing:
        listing.write(f"{hashlib.sha256((package / 'vocabulary.json').read_bytes()).hexdigest()}"
                      "  same.json\n")
    assert load_package(package).checkpoint.vocabulary == \
        load_checkpoint(checkpoint).vocabulary


@pytest.mark.parametrize("lm", ["../outside.txt", "{outside}", "/etc/passwd", "."])
def test_decode_files_must_be_the_packages_own(package, lm):
    outside = package.parent / "outside.txt"
    edit_yaml(package / "decode.yaml",
              lambda data: data["decode"].update(mode="beam", lm=lm.format(outside=outside)))
    relist(package)
    message = refusal(package)
    assert message.startswith(f"{package / 'decode.yaml'}: decode.lm leads to ")
    assert "not a file of the package; a package names only files inside its folder" in message


def test_the_training_configs_decode_files_never_apply(package, tmp_path):
    """config.yaml names the training run's LM; a decode.yaml without one means none."""
    edit_yaml(package / "config.yaml",
              lambda data: data["decode"].update(mode="beam", lm="/etc/passwd"))
    edit_yaml(package / "decode.yaml", lambda data: data["decode"].pop("lm"))
    relist(package)
    assert load_package(package).decode["lm"] == ""
    assert Recognizer.from_checkpoint(package, device="cpu").config.decode.lm == ""


def test_non_finite_weights_are_refused_by_name(package, checkpoint, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    weights = load_file(package / "model.safetensors")
    name = sorted(weights)[-1]
    weights[name].view(-1)[:2] = torch.tensor([float("nan"), float("inf")])
    save_file(weights, str(package / "model.safetensors"), metadata={"format": "pt"})
    relist(package)
    expected = f"weight {name} holds 2 of {weights[name].numel()} values that are not finite"
    assert refusal(package) == f"{package / 'model.safetensors'}: {expected} (NaN or " \
        "infinity): a diverged run or a damaged file; use an earlier checkpoint"
    assert main(["transcribe", "--checkpoint", str(package), "--json", "a.wav"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and expected in captured.err
    stored = load_checkpoint(checkpoint)
    stored.model[name] = weights[name]
    save_checkpoint(stored, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'nan.pt'}: {expected}"):
        load_checkpoint(tmp_path / "nan.pt")


def test_audio_that_overflows_the_features_is_named_and_no_nan_reaches_json(exported,
                                                                            tmp_path, capsys):
    loud, quiet = tmp_path / "loud.wav", tmp_path / "quiet.wav"
    sf.write(loud, np.array([3e38, -3e38] * 8000, dtype=np.float32), 16000, subtype="FLOAT")
    sf.write(quiet, 0.1 * np.sin(np.arange(16000) / 5).astype(np.float32), 16000)
    assert main(["transcribe", "--checkpoint", str(exported), "--json", str(loud),
                 str(quiet)]) == 2
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]  # NaN would not parse
    assert lines[0] == {"audio_filepath": str(loud), "error": (
        f"{loud}: the model's output is not finite (NaN or infinity): the audio's features "
        "overflow (samples far beyond full scale, 1.0?)")}
    assert lines[1]["audio_filepath"] == str(quiet) and "confidence" in lines[1]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("feature_stats.json", '{"mean": 1, "std": "x"}', 'must be null or {"mean": [...], '
     '"std": [...]}, a number per feature bin in each'),
    ("feature_stats.json", '{"mean": [NaN], "std": [1]}',
     "unreadable package file: holds NaN, which is not a number"),
    ("feature_stats.json", '{"mean": [1e999], "std": [1]}',
     "mean and std must hold as many finite numbers, the std none below 0"),
    ("feature_stats.json", '{"mean": [0, 0], "std": [1, -1]}',
     "mean and std must hold as many finite numbers, the std none below 0"),
    ("vocabulary.json", '{"a": 1}', "must be a list of the output characters, in order"),
    ("vocabulary.json", '["a", "a"]', "vocabulary has duplicate characters"),
    ("model_card.json", "step", 'step must be a whole number, not "many"'),
    ("model_card.json", "validation", "validation must be an object or null, not [1]"),
    ("model_card.json", "scores", "validation.wer must be a number"),
    ("config.yaml", "- 1\n", "top level: expected a mapping of keys, got list"),
    ("config.yaml", "model:\n  rnn:\n    hiden: 3\n", "model.rnn.hiden: unknown key"),
])
def test_a_malformed_package_file_is_named(package, name, content, message):
    if name == "model_card.json":
        card = json.loads((package / name).read_text())
        card.update({"step": {"step": "many"}, "validation": {"validation": [1]},
                     "scores": {"validation": {"manifest": "m", "utterances": 1, "wer": "x",
                                               "cer": 0}}}[content])
        content = json.dumps(card)
    (package / name).write_text(content)
    relist(package)
    assert refusal(package).startswith(f"{package / name}: {message}")


def test_a_config_that_does_not_fit_the_weights_is_refused_before_building(package):
    edit_yaml(package / "config.yaml",
              lambda data: data["model"]["rnn"].update(hidden=10_000_000))
    relist(package)
    with pytest.raises(CheckpointError) as caught:
        Recognizer.from_checkpoint(package, device="cpu")
    assert str(caught.value).startswith(
        f"{package}: the config's model does not fit the weights: rnns.0.forward_rnn."
        "weight_ih_l0 is [48, ")
    assert "GB); restore the config the weights were trained with" in str(caught.value)


def test_feature_statistics_of_another_size_are_refused(package):
    stats = json.loads((package / "feature_stats.json").read_text())
    (package / "feature_stats.json").write_text(json.dumps(
        {key: values[:-1] for key, values in stats.items()}))
    relist(package)
    bins = len(stats["mean"])
    with pytest.raises(CheckpointError, match=f"feature statistics hold {bins - 1} bins, the "
                                              f"config's features {bins}"):
        Recognizer.from_checkpoint(package, device="cpu")


def test_an_export_removes_what_killed_exports_left_and_nothing_else(checkpoint, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    left = {name: tmp_path / name for name in (
        f".old.abc123.export-{host}-{dead.pid}",  # killed: removed
        f".busy.abc123.export-{host}-{os.getpid()}",  # a live export's: kept
        f".far.abc123.export-elsewhere-{dead.pid}",  # another host's: kept
        f".mine.export-{host}-{dead.pid}.d")}  # not a staging folder's name: kept
    for folder in left.values():
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half written")
    write_package(checkpoint, tmp_path / "new")
    assert sorted(item.name for item in tmp_path.iterdir()) == sorted([*list(left)[1:], "new"])

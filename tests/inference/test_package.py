"""Model packages: plain files and checksums, loaded anywhere, refused when touched."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.errors import CheckpointError
from deepspeech.inference.package import load_package, write_package
from deepspeech.inference.recognizer import Recognizer
from deepspeech.training.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

FILES = {"model.safetensors", "config.yaml", "vocabulary.json", "feature_stats.json",
         "decode.yaml", "model_card.json", "README.md", "checksums.sha256", "lm.arpa"}


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run(tiny_corpus, tiny_overrides, tmp_path_factory):
    """A trained run whose model card holds tuned decode settings (beam + a 2-gram LM)."""
    pytest.importorskip("flashlight.lib.text")
    from deepspeech.lm import build_lm
    from deepspeech.training.trainer import train

    run = tmp_path_factory.mktemp("package-run")
    train(load_config(None, [*tiny_overrides(tiny_corpus, run), "train.epochs=3",
                             "features.normalize=global"]))
    build_lm(tiny_corpus["train"], run / "lm.arpa", order=2)
    assert main(["decode", "tune", "--checkpoint", str(run / "best.pt"), "--manifest",
                 str(tiny_corpus["val"]), "--lm", str(run / "lm.arpa"), "--lm-weights", "0,1",
                 "--word-bonuses=0", "--beam", "8", "-o", str(run / "decode.yaml")]) == 0
    return run


@pytest.fixture(scope="module")
def package(run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported") / "tones"
    assert main(["export", "--format", "package", "--checkpoint", str(run / "best.pt"),
                 "-o", str(folder)]) == 0
    return folder


def test_a_package_is_plain_files_with_the_evaluated_weights(run, package):
    from safetensors.torch import load_file

    assert {item.name for item in package.iterdir()} == FILES
    for item in package.iterdir():  # no pickle (b"\x80"), no torch.save zip (b"PK")
        assert item.read_bytes()[:2] not in (b"\x80\x04", b"\x80\x02", b"PK"), item.name
    checkpoint = load_checkpoint(run / "best.pt")
    weights = load_file(package / "model.safetensors")
    assert weights.keys() == checkpoint.model.keys()
    assert all(torch.equal(weights[key], value) for key, value in checkpoint.model.items())
    assert yaml.safe_load((package / "config.yaml").read_text()) == checkpoint.config
    assert json.loads((package / "vocabulary.json").read_text()) == checkpoint.vocabulary
    listed = [line.split("  ")[1] for line in
              (package / "checksums.sha256").read_text().splitlines()]
    assert sorted(listed) == sorted(FILES - {"checksums.sha256"})
    # The tuned settings from the model card, the LM copied in and named relatively.
    decode = yaml.safe_load((package / "decode.yaml").read_text())["decode"]
    tuned = yaml.safe_load((run / "decode.yaml").read_text())["decode"]
    assert decode["lm"] == "lm.arpa" and tuned["lm"] == "lm.arpa"
    assert decode == tuned
    assert (package / "lm.arpa").read_bytes() == (run / "lm.arpa").read_bytes()
    # Meant for others: readable by all, as a plain open or mkdir would have made it.
    umask = os.umask(0)
    os.umask(umask)
    assert all(item.stat().st_mode & 0o777 == (0o777 if item.is_dir() else 0o666) & ~umask
               for item in (package, *package.iterdir()))


def test_the_readme_is_a_hugging_face_model_card(run, package, tiny_corpus):
    text = (package / "README.md").read_text()
    _, front, prose = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "deepspeech2" and meta["license"] == "other"
    assert "automatic-speech-recognition" in meta["tags"]
    card = json.loads((run / "model_card.json").read_text())
    validation, tuned = meta["model-index"][0]["results"]
    assert validation["dataset"]["name"] == str(tiny_corpus["val"])
    assert validation["dataset"]["args"] == {"utterances": 12}
    assert validation["metrics"][0] == {"type": "wer", "name": "WER % (greedy)",
                                        "value": round(100 * card["validation"]["wer"], 2)}
    assert tuned["metrics"][0]["value"] == round(100 * card["decode_tuned_on"]["wer"], 2)
    assert "## How to use it" in prose and "deepspeech transcribe --checkpoint tones" in prose


def test_a_moved_package_transcribes_and_evaluates_as_its_checkpoint(run, package, tiny_corpus,
                                                                      tmp_path, monkeypatch,
                                                                      capsys):
    moved = tmp_path / "far" / "away"
    moved.parent.mkdir()
    shutil.copytree(package, tmp_path / "copy")
    shutil.move(tmp_path / "copy", moved)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    audio = [str(tiny_corpus["val"].parent / f"val00{i}.flac") for i in range(3)]
    ckpt = ["--checkpoint", str(run / "best.pt"), "--decode-config", str(run / "decode.yaml")]
    assert main(["transcribe", *ckpt, "--json", *audio]) == 0
    expected = capsys.readouterr().out
    assert main(["transcribe", "--checkpoint", str(moved), "--json", *audio]) == 0
    assert capsys.readouterr().out == expected
    evaluate = ["evaluate", "--manifest", str(tiny_corpus["val"]), "--workers", "0", "--json"]
    assert main([*evaluate, *ckpt]) == 0
    from_checkpoint = last_json(capsys)
    assert main([*evaluate, "--checkpoint", "../far/away"]) == 0  # relative to the new cwd
    from_package = last_json(capsys)
    assert from_package["decode"] == "beam"
    for key in ("wer", "cer", "utterances", "speakers"):
        assert from_package[key] == from_checkpoint[key]
    recognizer = Recognizer.from_checkpoint(moved, device="cpu")
    assert recognizer.config.decode.lm == str(moved / "lm.arpa")
    info = recognizer.describe()
    assert info["decode"]["lm"] == str(moved / "lm.arpa") and info["step"] > 0


def test_loading_a_package_takes_no_pickle_path(package, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    recognizer = Recognizer.from_checkpoint(package, device="cpu")
    assert recognizer.config.decode.mode == "beam"


@pytest.mark.parametrize(("touch", "message"), [
    (lambda folder: (folder / "config.yaml").write_text(
        (folder / "config.yaml").read_text() + "\n"),
     "config.yaml: changed since the package was written (its SHA-256 differs from "
     "checksums.sha256); restore the file or export the package again"),
    (lambda folder: (folder / "vocabulary.json").unlink(),
     "vocabulary.json: missing from the package (listed in checksums.sha256); copy the "
     "whole folder"),
    (lambda folder: (folder / "notes.txt").write_text("mine"),
     "notes.txt: not part of the package (not in checksums.sha256); remove it, or export "
     "the package again"),
    (lambda folder: (folder / "checksums.sha256").unlink(),
     "a folder, but not a model package (no checksums.sha256; deepspeech export --format "
     "package writes one)"),
])
def test_a_changed_missing_or_extra_file_is_refused_by_name(package, tmp_path, touch, message,
                                                            capsys):
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    touch(copy)
    with pytest.raises(CheckpointError, match="^" + str(copy)):
        load_package(copy)
    assert main(["transcribe", "--checkpoint", str(copy), "--info"]) == 2
    assert message in capsys.readouterr().err


def test_export_options_and_refusals(run, package, tmp_path, capsys):
    # A package re-exported with another license and explicit settings: same weights.
    again = tmp_path / "again"
    assert main(["export", "--format", "package", "--checkpoint", str(package), "-o", str(again),
                 "--decode-config", str(run / "decode.yaml"), "--lm", str(run / "lm.arpa"),
                 "--license", "cc-by-4.0", "--json"]) == 0
    summary = last_json(capsys)
    assert summary["decode_from"] == str(run / "decode.yaml")
    assert summary["bytes"] == sum(item.stat().st_size for item in again.iterdir())
    assert "license: cc-by-4.0" in (again / "README.md").read_text()
    assert (again / "model.safetensors").read_bytes() == \
        (package / "model.safetensors").read_bytes()
    # The training config's greedy settings cannot take an LM without tuned ones.
    bare = tmp_path / "bare.pt"
    shutil.copy(run / "best.pt", bare)  # no model card beside it
    assert main(["export", "--format", "package", "--checkpoint", str(bare), "-o",
                 str(tmp_path / "x"), "--lm", str(run / "lm.arpa")]) == 2
    assert ("the decode settings (from the training config) are greedy; give --decode-config "
            "with beam settings") in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.*"))
    assert main(["export", "--format", "package", "--checkpoint", str(bare), "-o",
                 str(tmp_path / "greedy")]) == 0
    assert "decode settings from the training config (greedy)" in capsys.readouterr().out
    assert {item.name for item in (tmp_path / "greedy").iterdir()} == FILES - {"lm.arpa"}
    # An existing folder, and package options on another format, are refused.
    with pytest.raises(SystemExit):  # by argparse, before any work
        main(["export", "--format", "package", "--checkpoint", str(bare), "-o", str(again)])
    assert f"{again} is a folder; give a file name (or, with --format package" in \
        capsys.readouterr().err
    assert main(["export", "--checkpoint", str(bare), "-o", str(tmp_path / "m.pt"), "--lm",
                 str(run / "lm.arpa")]) == 2
    assert "--lm: only --format package takes it" in capsys.readouterr().err


def test_decode_tune_on_a_package_writes_its_settings_and_leaves_the_package(
        run, package, tiny_corpus, tmp_path, capsys):
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    output = tmp_path / "tuned" / "decode.yaml"
    assert main(["decode", "tune", "--checkpoint", str(copy), "--manifest",
                 str(tiny_corpus["val"]), "--lm", str(run / "lm.arpa"), "--lm-weights", "0,1",
                 "--word-bonuses=0", "--beam", "8", "-o", str(output)]) == 0
    text = capsys.readouterr().out
    assert f"{copy} is a package, left as exported (its files are checksummed)" in text
    load_package(copy)  # checksums still hold
    written = yaml.safe_load(output.read_text())["decode"]
    tuned = yaml.safe_load((run / "decode.yaml").read_text())["decode"]
    assert {**written, "lm": ""} == {**tuned, "lm": ""}  # the same model, the same pair
    assert not Path(written["lm"]).is_absolute()
    assert (output.parent / written["lm"]).resolve() == (run / "lm.arpa").resolve()


def test_the_package_is_under_half_a_checkpoints_size(run, package):
    weights = (package / "model.safetensors").stat().st_size
    total = sum(item.stat().st_size for item in package.iterdir()
                if item.name != "lm.arpa")
    assert total < (run / "best.pt").stat().st_size / 2
    assert weights < total


def test_write_package_refuses_a_non_empty_folder(run, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(Exception, match="already exists; give a new folder"):
        write_package(run / "best.pt", tmp_path / "full")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = write_package(run / "best.pt", empty)
    assert result.path == empty and (empty / "checksums.sha256").is_file()


def test_a_run_folder_given_as_checkpoint_points_at_its_best_pt(run, capsys):
    assert main(["evaluate", "--checkpoint", str(run), "--manifest", "m.jsonl"]) == 2
    assert (f"{run}: a folder, but not a model package (no checksums.sha256; deepspeech export "
            f"--format package writes one); for a run folder give its checkpoint, "
            f"{run / 'best.pt'}") in capsys.readouterr().err

"""A run whose pre-flight comes from the probe cache trains the same bits as a cold one, and
a file that the cache called sound but fails to decode is checked again."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.data import probe
from deepspeech.training.checkpoint import load_checkpoint
from deepspeech.training.determinism import state_dict_digest
from deepspeech.training.trainer import train

pytestmark = pytest.mark.slow


def test_warm_pre_flight_trains_bitwise_the_same(tiny_corpus, tiny_overrides, tmp_path,
                                                 monkeypatch, probe_cache_folder):
    checkpoints = []
    for name in ("cold", "warm"):
        if name == "warm":
            assert list(probe_cache_folder.glob("*.json"))

            def no_probing(path, *args, **kwargs):
                raise AssertionError(f"{path} probed although the cache holds it")

            monkeypatch.setattr(probe, "probe_audio", no_probing)
        config = load_config(None, [*tiny_overrides(tiny_corpus, tmp_path / name),
                                    "train.epochs=1"])
        train(config)
        checkpoints.append(load_checkpoint(tmp_path / name / "last.pt"))
    cold, warm = checkpoints
    assert cold.train_data["digest"] == warm.train_data["digest"]
    assert state_dict_digest(cold.model) == state_dict_digest(warm.model)


def test_the_check_that_a_decode_failure_recommends_finds_the_file(
        tiny_corpus, tiny_overrides, with_nan_audio, tmp_path, capsys):
    # Checked while sound, then NaN written in place with size, mtime and inode kept.
    manifest = with_nan_audio(tiny_corpus["train"], 3, tmp_path)
    bad = tmp_path / "bad.wav"
    corrupted = bad.read_bytes()
    sf.write(bad, np.nan_to_num(sf.read(bad, dtype="float32")[0]), 16000, subtype="FLOAT")
    assert len(corrupted) == bad.stat().st_size
    assert main(["data", "check", str(manifest)]) == 0
    before = bad.stat()
    with bad.open("r+b") as handle:
        handle.write(corrupted)
    os.utime(bad, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (bad.stat().st_mtime_ns, bad.stat().st_ino) == (before.st_mtime_ns, before.st_ino)
    capsys.readouterr()

    config = tmp_path / "empty.yaml"
    config.write_text("")
    assert main(["train", "-c", str(config), *tiny_overrides(tiny_corpus, tmp_path / "run"),
                 f"data.train_manifest={manifest}"]) == 2
    error = capsys.readouterr().err
    assert f"{bad}: audio contains NaN" in error
    assert f"`deepspeech data check {manifest}` decodes every file" in error
    assert main(["data", "check", str(manifest)]) == 1
    assert f"{manifest}:4: bad.wav: contains NaN or infinite samples" in capsys.readouterr().out

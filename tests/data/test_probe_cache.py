"""The pre-flight's probe cache: reused while valid, invalidated by what changes a probe."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.data import probe, probe_cache
from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.probe import find_unreadable
from deepspeech.data.probe_cache import cache_path, probe_settings, shared_probe


@pytest.fixture(autouse=True)
def cache_folder(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DEEPSPEECH_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The paths ``probe_audio`` opens, in no particular order."""
    opened: list[str] = []
    real = probe.probe_audio

    def counting(path, *args, **kwargs):
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(probe, "probe_audio", counting)
    return opened


def _corpus(folder: Path, count: int = 6) -> Path:
    """``count`` short tones, one of them cut short, and one line on a missing file."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        path = folder / f"a{i}.wav"
        sf.write(path, np.full(1600 * (i + 1), 0.1, dtype=np.float32), 16000)
        lines.append({"audio_filepath": path.name, "text": "a b", "duration": 0.1 * (i + 1)})
    (folder / "a0.wav").write_bytes((folder / "a0.wav").read_bytes()[:-2000])  # truncated
    lines.append({"audio_filepath": "gone.wav", "text": "a", "duration": 1.0})
    manifest = folder / "m.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return manifest


def _probe(manifest: Path, **kwargs):
    paths = [u.audio_filepath for u in read_manifest(manifest)]
    return paths, shared_probe(paths, str(manifest), **kwargs)


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(a[k] == b[k] for k in a)


def test_second_run_opens_no_file_and_finds_the_same(tmp_path, counted):
    manifest = _corpus(tmp_path / "c")
    paths, cold = _probe(manifest)
    assert len(counted) == len(paths)
    counted.clear()
    _, warm = _probe(manifest)
    assert counted == [str(tmp_path / "c" / "gone.wav")]  # missing files are never cached
    assert _same(cold, warm)
    assert _same(cold, probe.probe_files(paths))
    utterances = read_manifest(manifest)
    counted.clear()
    verdict = find_unreadable(utterances, facts=warm)
    assert counted == []
    assert verdict == find_unreadable(utterances)
    assert [p.kind for p in verdict] == ["truncated", "missing"]


def test_a_rewritten_file_is_probed_again(tmp_path, counted):
    manifest = _corpus(tmp_path / "c")
    _probe(manifest)
    grown, touched = tmp_path / "c" / "a2.wav", tmp_path / "c" / "a3.wav"
    sf.write(grown, np.full(800, 0.1, dtype=np.float32), 16000)  # other size
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same size, new mtime
    counted.clear()
    _, facts = _probe(manifest)
    assert sorted(counted) == sorted(map(str, [grown, touched, tmp_path / "c" / "gone.wav"]))
    assert facts[str(grown)].frames == 800


def test_a_line_added_probes_only_its_file(tmp_path, counted, caplog):
    manifest = _corpus(tmp_path / "c")
    _probe(manifest)
    new = tmp_path / "c" / "new.wav"
    sf.write(new, np.full(3200, 0.1, dtype=np.float32), 16000)
    with manifest.open("a") as handle:
        handle.write(json.dumps({"audio_filepath": "new.wav", "text": "a", "duration": 0.2})
                     + "\n")
    counted.clear()
    with caplog.at_level(logging.INFO, logger="deepspeech.data.probe_cache"):
        _, facts = _probe(manifest)
    assert sorted(counted) == sorted(map(str, [new, tmp_path / "c" / "gone.wav"]))
    assert facts[str(new)].frames == 3200
    assert "manifest changed" in caplog.text


def test_another_setting_does_not_use_the_cache(tmp_path, counted):
    manifest = _corpus(tmp_path / "c")
    paths, _ = _probe(manifest)
    counted.clear()
    _, decoded = _probe(manifest, decode=True)
    assert len(counted) == len(paths)
    assert decoded[paths[1]].peak == pytest.approx(0.1, abs=1e-3)
    counted.clear()
    _probe(manifest, decode=True)
    assert len(counted) == 1  # now cached too, beside the headers-only cache


@pytest.mark.parametrize("damage", ["truncate", "flip", "format", "not json"])
def test_a_damaged_cache_file_is_ignored_with_a_warning(tmp_path, counted, caplog, damage,
                                                        cache_folder):
    manifest = _corpus(tmp_path / "c")
    paths, cold = _probe(manifest)
    target = cache_path(str(manifest), probe_settings(False), cache_folder)
    data = target.read_bytes()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":  # a digit of a frame count: still valid JSON, wrong facts
        at = data.index(b'"entries"') + 40
        data = data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]
    elif damage == "format":
        data = data.replace(b'"version": 1', b'"version": 99', 1)
    else:
        data = b"\x00garbage"
    target.write_bytes(data)
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="deepspeech.data.probe_cache"):
        _, again = _probe(manifest)
    assert "ignored" in caplog.text
    assert len(counted) == len(paths)
    assert _same(cold, again)
    counted.clear()
    _probe(manifest)  # and it was written anew
    assert len(counted) == 1


def test_an_unwritable_cache_only_warns(tmp_path, counted, caplog, monkeypatch):
    manifest = _corpus(tmp_path / "c")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "cache")

    monkeypatch.setattr(probe_cache, "atomic_write", refuse)
    with caplog.at_level(logging.WARNING, logger="deepspeech.data.probe_cache"):
        paths, facts = _probe(manifest)
    assert "not saved" in caplog.text and len(facts) == len(paths)


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("DEEPSPEECH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache.cache_dir() == tmp_path / "xdg" / "deepspeech" / "probes"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert probe_cache.cache_dir() == tmp_path / "home" / ".cache" / "deepspeech" / "probes"


def test_probes_split_over_processes_find_the_same(tmp_path, monkeypatch):
    manifest = _corpus(tmp_path / "c")
    monkeypatch.setattr(probe_cache, "PROCESS_THRESHOLD", 1)
    monkeypatch.setattr(probe_cache, "_own_cores", lambda: 3)
    paths, facts = _probe(manifest, use_cache=False)
    assert _same(facts, probe.probe_files(paths))


def test_data_check_keeps_its_findings_and_shares_training_s_headers(tmp_path, counted, capsys):
    manifest = _corpus(tmp_path / "c")
    gone = str(tmp_path / "c" / "gone.wav")
    assert main(["data", "check", str(manifest)]) == 1
    cold = capsys.readouterr().out
    assert len(counted) == 7 and "truncated" in cold and "missing" in cold
    counted.clear()
    assert main(["data", "check", str(manifest)]) == 1
    assert counted == [gone] and capsys.readouterr().out == cold
    counted.clear()
    assert main(["data", "check", str(manifest), "--no-cache"]) == 1
    assert len(counted) == 7 and capsys.readouterr().out == cold
    # training's pre-flight reads headers only: `--quick` is the same check mode
    _probe(manifest)
    counted.clear()
    assert main(["data", "check", str(manifest), "--quick"]) == 1
    assert counted == [gone]


def test_check_manifest_probes_through_the_cache_itself(tmp_path, counted):
    manifest = _corpus(tmp_path / "c")
    cold = check_manifest(manifest)
    assert len(counted) == 7
    counted.clear()
    assert check_manifest(manifest).to_dict() == cold.to_dict()
    assert counted == [str(tmp_path / "c" / "gone.wav")]  # a missing file is probed every time
    counted.clear()
    assert check_manifest(manifest, use_cache=False).to_dict() == cold.to_dict()
    assert len(counted) == 7

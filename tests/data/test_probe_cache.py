"""The pre-flight's probe cache: reused while valid, invalidated by what changes a probe."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.config import FeaturesConfig
from deepspeech.data import probe, probe_cache
from deepspeech.data.check import check_manifest
from deepspeech.data.dataset import SpeechDataset
from deepspeech.data.manifest import read_manifest
from deepspeech.data.probe import find_unreadable
from deepspeech.data.probe_cache import cache_path, probe_settings, shared_probe
from deepspeech.errors import AudioError
from deepspeech.features import FeatureExtractor


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


def _valid_checksum(target: Path, change) -> None:
    """Rewrite cache file ``target`` with ``change(content)`` applied and a valid checksum."""
    header, body = target.read_bytes().split(b"\n", 1)
    content = change(json.loads(body))
    body = json.dumps(content).encode()
    meta = {**json.loads(header), "sha256": hashlib.sha256(body).hexdigest()}
    target.write_bytes(json.dumps(meta).encode() + b"\n" + body)


def _first(content: dict) -> list:
    return next(iter(content["entries"].values()))


MALFORMED = {
    "a short entry": lambda c: _first(c).pop(),
    "a short facts row": lambda c: _first(c)[3].pop(),
    "a string for frames": lambda c: _first(c)[3].__setitem__(0, "many"),
    "a string for the size": lambda c: _first(c).__setitem__(0, "big"),
    "true for the rate": lambda c: _first(c)[3].__setitem__(1, True),
    "a string for the peak": lambda c: _first(c)[3].__setitem__(3, "loud"),
    "a number for the problems": lambda c: _first(c)[3].__setitem__(4, 3),
    "a list for the entries": lambda c: c.__setitem__("entries", list(c["entries"].items())),
    "a number for the manifest digest": lambda c: c.__setitem__("manifest_sha256", 1),
}


@pytest.mark.parametrize("malformed", MALFORMED)
def test_a_malformed_cache_with_a_valid_checksum_is_ignored_with_a_warning(
        tmp_path, counted, caplog, cache_folder, malformed):
    manifest = _corpus(tmp_path / "c")
    paths, cold = _probe(manifest)
    target = cache_path(str(manifest), probe_settings(False), cache_folder)

    def change(content: dict) -> dict:
        MALFORMED[malformed](content)
        return content

    _valid_checksum(target, change)
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="deepspeech.data.probe_cache"):
        _, again = _probe(manifest)
    assert f"probe cache {target} ignored" in caplog.text
    assert len(counted) == len(paths)
    assert _same(cold, again)


def test_a_body_that_is_not_an_object_is_ignored_with_a_warning(tmp_path, caplog,
                                                                cache_folder):
    manifest = _corpus(tmp_path / "c")
    _probe(manifest)
    target = cache_path(str(manifest), probe_settings(False), cache_folder)
    _valid_checksum(target, lambda content: list(content))
    with caplog.at_level(logging.WARNING, logger="deepspeech.data.probe_cache"):
        _probe(manifest)
    assert f"probe cache {target} ignored: the body is not a JSON object" in caplog.text


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a reader of /dev/zero fails


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "folder"])
def test_a_cache_that_is_no_regular_file_is_ignored_with_a_warning(tmp_path, cache_folder,
                                                                   kind):
    manifest = _corpus(tmp_path / "c")
    target = cache_path(str(manifest), probe_settings(False), cache_folder)
    cache_folder.mkdir()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to("/dev/zero")
    check = subprocess.run([sys.executable, "-m", "deepspeech", "data", "check", "--quick",
                            str(manifest)], capture_output=True, text=True, timeout=120,
                           preexec_fn=_limited_memory)
    assert check.returncode == 1, check.stderr[-2000:]  # the corpus's truncated and missing
    assert (f"probe cache {target} ignored: not a regular file (a FIFO, a device or a "
            "folder); probing again") in check.stderr
    assert "truncated" in check.stdout and "missing" in check.stdout


def _float_corpus(folder: Path) -> tuple[Path, Path]:
    """A manifest of three float WAVs: NaN can be written into one in place."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(3):
        sf.write(folder / f"f{i}.wav", np.full(3200, 0.1, dtype=np.float32), 16000,
                 subtype="FLOAT")
        lines.append({"audio_filepath": f"f{i}.wav", "text": "a b", "duration": 0.2})
    manifest = folder / "m.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return manifest, folder / "f1.wav"


def _corrupt_in_place(path: Path) -> None:
    """NaN samples written over the end of ``path``, its size, mtime and inode kept."""
    before = path.stat()
    with path.open("r+b") as handle:
        handle.seek(before.st_size - 400)
        handle.write(b"\x00\x00\xc0\x7f" * 100)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)


def _decode(manifest: Path, index: int, skip: bool = False):
    utterances = read_manifest(manifest)
    dataset = SpeechDataset(utterances, [[1]] * len(utterances),
                            FeatureExtractor(FeaturesConfig(normalize="none"), 16000),
                            skip_unreadable=skip)
    return dataset[index]


def test_a_file_that_fails_to_decode_is_checked_again_in_every_mode(tmp_path, counted):
    manifest, bad = _float_corpus(tmp_path / "c")
    assert check_manifest(manifest).ok
    _probe(manifest)  # training's pre-flight: the headers-only cache too
    _corrupt_in_place(bad)
    assert check_manifest(manifest).ok  # what the cache says: nothing changed
    with pytest.raises(AudioError, match="NaN") as failure:
        _decode(manifest, 1)
    assert "--no-cache" not in str(failure.value)
    counted.clear()
    _probe(manifest)
    assert counted == [str(bad)]  # no longer taken from the headers-only cache
    counted.clear()
    report = check_manifest(manifest)
    assert counted == [str(bad)]
    assert [(p.kind, p.audio) for p in report.problems] == [("nan", str(bad))]
    assert check_manifest(manifest).to_dict() == report.to_dict()  # and every time after

    # Fixed (rewritten: a new mtime), it is taken from the cache again, the mark gone.
    sf.write(bad, np.full(3200, 0.1, dtype=np.float32), 16000, subtype="FLOAT")
    assert check_manifest(manifest).ok
    counted.clear()
    assert check_manifest(manifest).ok and counted == []
    assert list((probe_cache.cache_dir() / probe_cache.DISTRUSTED).iterdir()) == []


def test_a_decode_failure_under_skip_marks_the_file_once(tmp_path, counted, caplog):
    manifest, bad = _float_corpus(tmp_path / "c")
    assert check_manifest(manifest).ok
    _corrupt_in_place(bad)
    for _ in range(3):  # every epoch meets it
        assert _decode(manifest, 1, skip=True)[1] is None
    assert len(list((probe_cache.cache_dir() / probe_cache.DISTRUSTED).iterdir())) == 1
    counted.clear()
    assert [p.kind for p in check_manifest(manifest).problems] == ["nan"]


def test_where_the_cache_cannot_be_told_the_error_says_to_check_without_it(
        tmp_path, monkeypatch, caplog):
    manifest, bad = _float_corpus(tmp_path / "c")
    assert check_manifest(manifest).ok
    _corrupt_in_place(bad)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "cache")

    monkeypatch.setattr(probe_cache, "atomic_write", refuse)  # a read-only cache folder
    with pytest.raises(AudioError, match="NaN") as failure:
        _decode(manifest, 1)
    assert "give `deepspeech data check` --no-cache" in str(failure.value)
    assert "not told that" in caplog.text
    assert check_manifest(manifest).ok  # hence the advice:
    assert [p.kind for p in check_manifest(manifest, use_cache=False).problems] == ["nan"]


def test_loader_processes_marking_files_at_once_lose_no_mark(tmp_path):
    manifest, _ = _float_corpus(tmp_path / "c")
    paths = [u.audio_filepath for u in read_manifest(manifest)]
    shared_probe(paths, str(manifest))
    context = multiprocessing.get_context("fork")
    with context.Pool(6) as pool:  # each file marked by two processes at the same moment
        pool.starmap(probe_cache.distrust, [(p, AudioError("x")) for p in paths * 4])
    markers = probe_cache.cache_dir() / probe_cache.DISTRUSTED
    assert len(list(markers.iterdir())) == len(paths)  # no temporary files left either
    target = cache_path(str(manifest), probe_settings(False))
    assert probe_cache.read_cache(target, probe_settings(False))[0] == {}

"""Tar shards: written with the original bytes, read back by byte range, resumed after an
interruption, and refused by name when missing, cut short or corrupt."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
import torch

from deepspeech.cli import main
from deepspeech.data import shard_writer, shards
from deepspeech.data.audio import audio_info, load_audio
from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.probe import probe_audio
from deepspeech.data.shard_writer import shard_manifest
from deepspeech.data.shards import member_ref, read_member
from deepspeech.data.synth.tones import write_tone_corpus
from deepspeech.errors import AudioError, ManifestError

SHARD_MB = 0.06  # about three tone clips a shard
QUICKSTART = Path(__file__).parents[2] / "configs" / "quickstart.yaml"


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_tone_corpus(tmp_path / "loose", 10, seed=0, name="train")


@pytest.fixture(autouse=True)
def fresh_handles():
    """Every test starts and ends with no shard held open by this process."""
    shards.close_shards()
    yield
    shards.close_shards()


def test_round_trip_keeps_bytes_order_and_fields(corpus, tmp_path):
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    loose, sharded = read_manifest(corpus), read_manifest(summary.manifest)
    assert summary.shards == 4 and summary.written == 4 and summary.kept == 0
    assert [(u.text, u.duration, u.speaker) for u in sharded] == \
        [(u.text, u.duration, u.speaker) for u in loose]
    for before, after in zip(loose, sharded, strict=True):
        ref = member_ref(after.audio_filepath)
        assert ref is not None and Path(ref.shard).parent == tmp_path / "s"
        assert read_member(ref) == Path(before.audio_filepath).read_bytes()
        # The raw range, with no tar parsing, is the member.
        with open(ref.shard, "rb") as handle:
            handle.seek(ref.offset)
            assert handle.read(ref.size) == Path(before.audio_filepath).read_bytes()
        assert torch.equal(load_audio(after.audio_filepath, 16000),
                           load_audio(before.audio_filepath, 16000))
        assert audio_info(after.audio_filepath) == audio_info(before.audio_filepath)


@pytest.mark.parametrize("whole_member_bytes", [0, 1 << 20], ids=["on_demand", "one_read"])
def test_members_probe_as_their_loose_files(corpus, tmp_path, monkeypatch, whole_member_bytes):
    """Long members are read as the header asks, short ones in one read: the same facts."""
    monkeypatch.setattr(shards, "WHOLE_MEMBER_BYTES", whole_member_bytes)
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    for before, after in zip(read_manifest(corpus), read_manifest(summary.manifest),
                             strict=True):
        loose, member = probe_audio(before.audio_filepath), probe_audio(after.audio_filepath)
        assert (member.frames, member.sample_rate, member.problems) == \
            (loose.frames, loose.sample_rate, loose.problems) and member.frames > 0
        assert audio_info(after.audio_filepath) == audio_info(before.audio_filepath)


def test_shards_are_tars_that_tarfile_reads_with_index_and_checksums(corpus, tmp_path):
    shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    lines = [json.loads(line) for line in corpus.read_text().splitlines()]
    sums = dict(reversed(line.split("  ")) for line in
                (tmp_path / "s" / "SHA256SUMS").read_text().splitlines())
    position = 0
    for number in range(4):
        shard = tmp_path / "s" / f"{number:06d}.tar"
        index = json.loads((tmp_path / "s" / f"{number:06d}.index.json").read_text())
        assert sums[shard.name] == index["sha256"] == shards.file_sha256(shard)
        assert index["size"] == shard.stat().st_size
        with tarfile.open(shard) as tar:
            members = tar.getmembers()
            for member in index["members"]:
                audio = tar.getmember(member["audio"])
                assert (audio.offset_data, audio.size) == (member["offset"], member["size"])
                stem = member["audio"].split(".")[0]
                assert stem == f"{position:08d}"
                assert tar.extractfile(audio).read() == Path(member["source"]).read_bytes()
                assert json.loads(tar.extractfile(f"{stem}.json").read()) == lines[position]
                position += 1
        assert len(members) == 2 * len(index["members"])
    assert position == 10


def test_a_file_repeated_in_a_shard_is_stored_once(tmp_path):
    corpus = write_tone_corpus(tmp_path / "loose", 1, seed=0, name="one")
    record = json.loads(corpus.read_text())
    segments = [{**record, "offset": start, "duration": 0.2} for start in (0.0, 0.3, 0.6)]
    corpus.write_text("".join(json.dumps(s) + "\n" for s in segments))
    summary = shard_manifest(corpus, tmp_path / "s")
    paths = {u.audio_filepath for u in read_manifest(summary.manifest)}
    assert len(paths) == 1 and summary.shards == 1
    with tarfile.open(tmp_path / "s" / "000000.tar") as tar:
        assert sorted(tar.getnames()) == ["00000000.flac", "00000000.json", "00000001.json",
                                          "00000002.json"]


def test_an_interrupted_run_leaves_no_manifest_and_resumes(corpus, tmp_path, monkeypatch):
    write, calls = shard_writer._write_shard, []

    def dies_on_the_third(folder, plan, entries):
        calls.append(plan.number)
        if plan.number == 2:
            raise KeyboardInterrupt
        return write(folder, plan, entries)

    monkeypatch.setattr(shard_writer, "_write_shard", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    left = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert left == ["000000.index.json", "000000.tar", "000001.index.json", "000001.tar"]
    first = (tmp_path / "s" / "000000.tar").stat().st_mtime_ns
    # A shard cut short since (a full disk, a bad copy) is written again, not trusted.
    with open(tmp_path / "s" / "000001.tar", "r+b") as handle:
        handle.truncate(1000)
    monkeypatch.setattr(shard_writer, "_write_shard", write)
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    assert (summary.written, summary.kept) == (3, 1)
    assert (tmp_path / "s" / "000000.tar").stat().st_mtime_ns == first
    fresh = shard_manifest(corpus, tmp_path / "fresh", SHARD_MB)
    assert (tmp_path / "s" / "manifest.jsonl").read_text() == fresh.manifest.read_text()
    for number in range(4):
        name = f"{number:06d}.tar"
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()


def test_a_changed_source_file_rewrites_its_shard(corpus, tmp_path):
    shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    source = read_manifest(corpus)[4].audio_filepath
    os.utime(source, ns=(1, 1))
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    assert (summary.written, summary.kept) == (1, 3)


def test_missing_source_and_sharded_input_are_refused_by_line(corpus, tmp_path):
    shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    with pytest.raises(ManifestError, match=r"line 1: already a shard member"):
        shard_manifest(tmp_path / "s" / "manifest.jsonl", tmp_path / "again")
    Path(read_manifest(corpus)[2].audio_filepath).unlink()
    with pytest.raises(AudioError, match=r"train.jsonl line 3: audio file missing: .*train002"):
        shard_manifest(corpus, tmp_path / "t")
    assert not (tmp_path / "t" / "manifest.jsonl").exists()


def _broken(corpus: Path, tmp_path: Path) -> list[str]:
    """A sharded manifest whose shard 1 is cut short, 2 has a flipped byte, 3 is gone."""
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    folder = tmp_path / "s"
    with open(folder / "000001.tar", "r+b") as handle:
        handle.truncate(30_000)
    data = bytearray((folder / "000002.tar").read_bytes())
    data[3000] ^= 1
    (folder / "000002.tar").write_bytes(bytes(data))
    (folder / "000003.tar").unlink()
    return [u.audio_filepath for u in read_manifest(summary.manifest)]


def test_loading_from_a_broken_shard_names_shard_and_member(corpus, tmp_path):
    paths = _broken(corpus, tmp_path)
    with pytest.raises(AudioError) as missing:
        load_audio(paths[9], 16000)
    assert str(missing.value) == f"{paths[9]}: shard file missing"
    assert "000003.tar#00000009.flac@" in paths[9]
    cut = next(p for p in paths[3:6] if member_ref(p).offset + member_ref(p).size > 30_000)
    with pytest.raises(AudioError, match=r"000001\.tar#0000000\d\.flac@\d+\+\d+: shard cut "
                                         r"short: the member ends at byte \d+ but the shard "
                                         r"holds 30000 bytes"):
        load_audio(cut, 16000)


def test_data_check_names_every_broken_shard(corpus, tmp_path):
    paths = _broken(corpus, tmp_path)
    report = check_manifest(tmp_path / "s" / "manifest.jsonl", use_cache=False, workers=1)
    by_line = {}
    for problem in report.problems:
        by_line.setdefault(problem.line, []).append(problem.kind)
    assert by_line[10] == ["missing"]
    assert "checksum" in by_line[7] and "checksum" in by_line[4]
    assert any("truncated" in kinds for kinds in by_line.values())
    checksum = next(p for p in report.problems if p.kind == "checksum")
    assert "shard fails its checksum: SHA256SUMS says" in checksum.message
    assert checksum.audio in paths
    text = report.format()
    assert "shards that fail their checksum" in text and "shard file missing" in text
    # --quick does not hash shards.
    quick = check_manifest(tmp_path / "s" / "manifest.jsonl", quick=True, use_cache=False)
    assert "checksum" not in quick.counts()


def test_data_check_passes_a_sound_sharded_manifest(corpus, tmp_path, capsys):
    assert main(["data", "shard", str(corpus), "-o", str(tmp_path / "s"),
                 "--shard-mb", str(SHARD_MB)]) == 0
    assert "10 utterances in 4 shard(s)" in capsys.readouterr().out
    assert main(["data", "check", str(tmp_path / "s" / "manifest.jsonl")]) == 0
    assert "no problems found" in capsys.readouterr().out


def test_a_process_keeps_a_few_shards_open(corpus, tmp_path, monkeypatch):
    summary = shard_manifest(corpus, tmp_path / "s", SHARD_MB)
    paths = [u.audio_filepath for u in read_manifest(summary.manifest)]
    opened = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(shards.os, "open", counting_open)
    for _ in range(3):
        for path in paths:
            load_audio(path, 16000)
    assert sorted(opened) == sorted({member_ref(p).shard for p in paths})  # once each
    monkeypatch.setattr(shards, "_OPEN", shards._OpenShards(2))
    for path in paths + paths:
        read_member(member_ref(path))
    assert len(shards._OPEN.shards) == 2


@pytest.mark.slow
def test_training_from_shards_gives_the_same_bits(tiny_corpus, tiny_overrides, tmp_path):
    from deepspeech.config import load_config
    from deepspeech.training.checkpoint import load_checkpoint
    from deepspeech.training.determinism import state_dict_digest
    from deepspeech.training.trainer import train

    sharded = {name: shard_manifest(path, tmp_path / f"shards-{name}", 0.2).manifest
               for name, path in tiny_corpus.items()}
    digests = []
    for name, corpus, workers in (("loose", tiny_corpus, 0), ("sharded", sharded, 2)):
        train(load_config(None, [*tiny_overrides(corpus, tmp_path / name),
                                 f"data.num_workers={workers}"]))
        digests.append(state_dict_digest(load_checkpoint(tmp_path / name / "last.pt").model))
    assert digests[0] == digests[1]


@pytest.mark.slow
def test_quickstart_from_shards_gives_the_same_bits(tmp_path):
    """configs/quickstart.yaml's model and settings (mel features, LSTMs, AdamW, one
    worker), a few steps on a tone corpus: weights from shards read by byte offset equal
    those from the loose files, bit for bit."""
    from deepspeech.config import load_config
    from deepspeech.training.checkpoint import load_checkpoint
    from deepspeech.training.determinism import state_dict_digest
    from deepspeech.training.trainer import train

    loose = {"train": write_tone_corpus(tmp_path / "loose", 32, seed=0, name="train"),
             "val": write_tone_corpus(tmp_path / "loose", 8, seed=1, name="val")}
    sharded = {name: shard_manifest(path, tmp_path / f"shards-{name}", 0.1).manifest
               for name, path in loose.items()}
    assert all(member_ref(u.audio_filepath) for u in read_manifest(sharded["train"]))
    digests = []
    for name, corpus in (("loose", loose), ("sharded", sharded)):
        train(load_config(QUICKSTART, [
            f"data.train_manifest={corpus['train']}", f"data.val_manifest={corpus['val']}",
            f"train.output_dir={tmp_path / name}", "train.max_steps=3", "train.epochs=1",
            "train.checkpoint_every=3"]))
        digests.append(state_dict_digest(load_checkpoint(tmp_path / name / "last.pt").model))
    assert digests[0] == digests[1]

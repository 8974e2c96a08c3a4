"""Folder preparer: audio + .txt pairs in any format soundfile reads."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.folder import prepare_folder


def noise(seconds: float, rate: int) -> np.ndarray:
    return (0.1 * np.random.default_rng(0).standard_normal(int(seconds * rate))).astype(np.float32)


def ten_utterances(root):
    """``u0.wav`` ... ``u9.wav`` with their transcripts, no speakers."""
    root.mkdir()
    for n in range(10):
        sf.write(root / f"u{n}.wav", noise(0.2, 8000), 8000)
        (root / f"u{n}.txt").write_text(f"utterance {n}")
    return root


def test_pairs_in_any_format_with_speakers_from_sub_folders(tmp_path):
    root = tmp_path / "mine"
    (root / "alice").mkdir(parents=True)
    sf.write(root / "a.wav", noise(0.5, 16000), 16000)
    (root / "a.txt").write_text("Hello there\n")
    sf.write(root / "alice" / "b.flac", noise(1.0, 22050), 22050)
    (root / "alice" / "b.txt").write_text("  second\n  line ")
    sf.write(root / "alice" / "c.ogg", noise(0.25, 48000), 48000)
    (root / "alice" / "c.txt").write_text("vorbis")
    sf.write(root / "orphan.wav", noise(0.1, 16000), 16000)
    (root / "no_audio.txt").write_text("nothing")

    result = prepare_folder(root, tmp_path / "out")
    assert result.left_out == 2  # orphan.wav and no_audio.txt
    utterances = {u.text: u for u in read_manifest(tmp_path / "out" / "all.jsonl")}
    assert set(utterances) == {"Hello there", "second line", "vorbis"}
    assert utterances["Hello there"].speaker is None
    assert utterances["second line"].speaker == "alice"
    assert abs(utterances["second line"].duration - 1.0) < 1e-3
    assert abs(utterances["vorbis"].duration - 0.25) < 0.01


def test_split_by_file_when_there_are_no_speakers(tmp_path):
    root = ten_utterances(tmp_path / "mine")
    result = prepare_folder(root, tmp_path / "out", dev=0.2, test=0.1, seed=3)
    assert {s: len(u) for s, u in result.splits.items()} == {"train": 7, "dev": 2, "test": 1}


def test_transcripts_that_are_empty_or_not_utf8_are_left_out_by_name(tmp_path, caplog):
    root = tmp_path / "mine"
    root.mkdir()
    for name, transcript in (("good", b"kept"), ("blank", b" \n"), ("latin1", b"caf\xe9")):
        sf.write(root / f"{name}.wav", noise(0.2, 16000), 16000)
        (root / f"{name}.txt").write_bytes(transcript)
    result = prepare_folder(root, tmp_path / "out")
    assert result.left_out == 2
    assert [u.text for u in read_manifest(tmp_path / "out" / "all.jsonl")] == ["kept"]
    assert "blank.txt: empty transcript" in caplog.text
    assert "latin1.txt line 1: not UTF-8 text (unexpected end of data)" in caplog.text


def test_suffixes_in_capitals_pair_and_two_audio_files_for_one_transcript_are_named(
        tmp_path, caplog):
    root = tmp_path / "mine"
    root.mkdir()
    sf.write(root / "ZOOM0001.WAV", noise(0.2, 16000), 16000, format="WAV")
    (root / "ZOOM0001.TXT").write_text("from a recorder")
    sf.write(root / "take.wav", noise(0.2, 16000), 16000)
    sf.write(root / "take.flac", noise(0.2, 16000), 16000)
    (root / "take.txt").write_text("which one")
    result = prepare_folder(root, tmp_path / "out")
    assert [u.text for u in read_manifest(tmp_path / "out" / "all.jsonl")] == ["from a recorder"]
    assert result.left_out == 1
    assert "take: one utterance, several files (take.flac, take.wav, take.txt)" in caplog.text


def test_splitting_again_without_fractions_leaves_only_all(tmp_path):
    root = ten_utterances(tmp_path / "mine")
    prepare_folder(root, tmp_path / "out", dev=0.2, test=0.1)
    prepare_folder(root, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").glob("*.jsonl")) == ["all.jsonl"]
    prepare_folder(root, tmp_path / "out", dev=0.2)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.jsonl")) == ["dev.jsonl",
                                                                         "train.jsonl"]

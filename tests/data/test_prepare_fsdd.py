"""FSDD preparer: single digits and connected-digit sequences, speakers never shared."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.fsdd import WORDS, prepare_fsdd

SPEAKERS = ["george", "jackson", "lucas", "nicolas", "theo", "yweweler"]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdd") / "recordings"
    folder.mkdir()
    for s, speaker in enumerate(SPEAKERS):
        for digit in range(10):
            for take in range(2):
                t = np.arange(800 + 40 * digit) / 8000
                audio = 0.3 * np.sin(2 * np.pi * (200 + 50 * digit + 10 * s) * t)
                sf.write(folder / f"{digit}_{speaker}_{take}.wav", audio, 8000, subtype="PCM_16")
    return folder


def speakers(manifest):
    return {u.speaker for u in read_manifest(manifest)}


def test_single_digits_split_4_1_1_by_speaker(recordings, tmp_path):
    result = prepare_fsdd(recordings.parent, tmp_path)
    counts = {split: len(u) for split, u in result.splits.items()}
    assert counts == {"train": 80, "dev": 20, "test": 20}
    groups = [speakers(tmp_path / f"{s}.jsonl") for s in ("train", "dev", "test")]
    assert [len(g) for g in groups] == [4, 1, 1] and set().union(*groups) == set(SPEAKERS)
    first = read_manifest(tmp_path / "train.jsonl")[0]
    assert first.text in WORDS and first.duration == pytest.approx(0.1 + 0.005 * WORDS.index(first.text))


def test_sequences_are_connected_digits_deterministic_and_speaker_disjoint(recordings, tmp_path):
    options = dict(sequences=30, max_digits=3, seed=0, sample_rate=16000)
    result = prepare_fsdd(recordings, tmp_path / "a", **options)
    assert {s: len(u) for s, u in result.splits.items()} == {"train": 20, "dev": 5, "test": 5}
    train = read_manifest(tmp_path / "a" / "train.jsonl")
    for utterance in train:
        words = utterance.text.split()
        assert 1 <= len(words) <= 3 and set(words) <= set(WORDS)
        samples, rate = sf.read(utterance.audio_filepath)
        assert rate == 16000 and len(samples) / rate == pytest.approx(utterance.duration, abs=1e-5)
        # At least the digits themselves (0.1 s or more each) plus gaps.
        assert utterance.duration > 0.1 * len(words) + 0.1
    groups = [speakers(tmp_path / "a" / f"{s}.jsonl") for s in ("train", "dev", "test")]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    assert '"audio/train/' in (tmp_path / "a" / "train.jsonl").read_text()

    prepare_fsdd(recordings, tmp_path / "b", **options)
    for split in ("train", "dev", "test"):
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == \
            (tmp_path / "b" / f"{split}.jsonl").read_bytes()
    a_files = sorted((tmp_path / "a" / "audio").rglob("*.wav"))
    assert a_files and all(p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes()
                           for p in a_files)
    # Preparing again replaces the audio folder: no stale files from a bigger run.
    prepare_fsdd(recordings, tmp_path / "a", **{**options, "sequences": 6})
    assert len(list((tmp_path / "a" / "audio").rglob("*.wav"))) == 6


def test_command_prints_the_summary(recordings, tmp_path, capsys):
    from deepspeech.cli import main

    assert main(["data", "prepare", "fsdd", "--root", str(recordings), "-o", str(tmp_path),
                 "--sequences", "12", "--max-digits", "2"]) == 0
    out = capsys.readouterr().out
    assert "fsdd: 12 utterances" in out and "train" in out and "1 speakers" in out

"""LibriSpeech preparer on a miniature copy of its layout (FLAC + *.trans.txt)."""

from __future__ import annotations

import soundfile as sf

from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.librispeech import prepare_librispeech
from deepspeech.data.synth.tones import tone


def write_subset(root, subset, speakers, missing=()):
    for speaker in speakers:
        chapter = root / "LibriSpeech" / subset / speaker / "100"
        chapter.mkdir(parents=True)
        lines = []
        for n in range(3):
            utterance = f"{speaker}-100-{n:04d}"
            lines.append(f"{utterance} HELLO WORLD NUMBER {['ONE', 'TWO', 'THREE'][n]}")
            if utterance not in missing:
                sf.write(chapter / f"{utterance}.flac", tone(0.5 + 0.25 * n, 440), 16000)
        (chapter / f"{speaker}-100.trans.txt").write_text("\n".join(lines) + "\n")


def test_one_manifest_per_subset_with_relative_paths_durations_and_speakers(tmp_path):
    write_subset(tmp_path, "train-clean-100", ["19", "26"], missing={"26-100-0002"})
    write_subset(tmp_path, "dev-clean", ["84"])
    output = tmp_path / "out"
    result = prepare_librispeech(tmp_path, output, subsets=["train-clean-100", "dev-clean"])

    assert result.left_out == 1  # the transcript line without audio
    train = read_manifest(output / "train-clean-100.jsonl")
    dev = read_manifest(output / "dev-clean.jsonl")
    assert len(train) == 5 and len(dev) == 3
    assert {u.speaker for u in train} == {"19", "26"} and {u.speaker for u in dev} == {"84"}
    assert sorted(round(u.duration, 3) for u in dev) == [0.5, 0.75, 1.0]
    assert train[0].text == "HELLO WORLD NUMBER ONE"
    raw = (output / "dev-clean.jsonl").read_text()
    assert '"audio_filepath": "source/dev-clean/84/100/84-100-0000.flac"' in raw
    assert check_manifest(output / "dev-clean.jsonl").ok
    summary = result.format()
    assert "train-clean-100" in summary and "5 utterances" in summary

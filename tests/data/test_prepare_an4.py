"""AN4 preparer on miniature copies of its SPHERE and raw layouts."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.an4 import prepare_an4
from deepspeech.data.synth.tones import tone
from deepspeech.errors import DeepSpeechError

TRAIN_SPEAKERS = ["fash", "fbbh", "fclc", "mblw", "mcen"]


def write_an4(root, raw=False, with_test=True):
    parts = [("an4_train", "an4_clstk", TRAIN_SPEAKERS)]
    if with_test:
        parts.append(("an4_test", "an4test_clstk", ["fcaw"]))
    (root / "etc").mkdir(parents=True)
    for stem, folder, speakers in parts:
        fileids, transcription = [], []
        for s, speaker in enumerate(speakers):
            (root / "wav" / folder / speaker).mkdir(parents=True)
            for n in range(2):
                utterance = f"an{250 + 10 * s + n}-{speaker}-b"
                audio = tone(0.4 + 0.1 * n, 300)
                path = root / "wav" / folder / speaker / utterance
                if raw:
                    (root / "wav" / folder / speaker / f"{utterance}.raw").write_bytes(
                        (audio * 32767).astype(">i2").tobytes())
                else:
                    sf.write(f"{path}.sph", audio, 16000, format="NIST", subtype="PCM_16")
                fileids.append(f"{folder}/{speaker}/{utterance}")
                transcription.append(f"<s> RUBOUT G M E F {'XY'[n]} </s> ({utterance})")
        (root / "etc" / f"{stem}.fileids").write_text("\n".join(fileids) + "\n")
        (root / "etc" / f"{stem}.transcription").write_text("\n".join(transcription) + "\n")


def test_sphere_layout_gives_speaker_disjoint_train_dev_and_test(tmp_path):
    write_an4(tmp_path / "an4")
    result = prepare_an4(tmp_path, tmp_path / "out", dev_speakers=1, seed=0)
    train, dev, test = (read_manifest(tmp_path / "out" / f"{s}.jsonl")
                        for s in ("train", "dev", "test"))
    assert (len(train), len(dev), len(test)) == (8, 2, 2)
    assert not {u.speaker for u in train} & {u.speaker for u in dev}
    assert {u.speaker for u in test} == {"fcaw"}
    assert train[0].text.startswith("RUBOUT G M E F")  # <s>, </s> and the id are gone
    assert {round(u.duration, 3) for u in train} == {0.4, 0.5}
    assert '"source/wav/an4_clstk/' in (tmp_path / "out" / "train.jsonl").read_text()
    assert check_manifest(tmp_path / "out" / "train.jsonl").ok
    # Same seed, same split; the test part may be absent.
    again = prepare_an4(tmp_path / "an4", tmp_path / "again", dev_speakers=1, seed=0)
    assert {u.speaker for u in again.splits["dev"]} == {u.speaker for u in dev}
    assert set(result.splits) == {"train", "dev", "test"}


def test_raw_distribution_is_converted_and_test_part_is_optional(tmp_path):
    write_an4(tmp_path / "an4", raw=True, with_test=False)
    result = prepare_an4(tmp_path / "an4", tmp_path / "out", dev_speakers=0.2)
    assert set(result.splits) == {"train", "dev"}
    utterances = read_manifest(tmp_path / "out" / "train.jsonl")
    assert all(u.audio_filepath.endswith(".flac") and "/out/audio/an4_clstk/" in u.audio_filepath
               for u in utterances)
    samples, rate = sf.read(utterances[0].audio_filepath)
    assert rate == 16000 and abs(np.abs(samples).max() - 0.3) < 1e-3


def test_a_transcription_that_is_not_utf8_is_named_by_line(tmp_path):
    write_an4(tmp_path / "an4", with_test=False)
    transcription = tmp_path / "an4" / "etc" / "an4_train.transcription"
    lines = transcription.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"RUBOUT", b"RUB\xd6UT")
    transcription.write_bytes(b"".join(lines))
    with pytest.raises(DeepSpeechError, match=r"an4_train.transcription line 4: not UTF-8 text"):
        prepare_an4(tmp_path / "an4", tmp_path / "out")


def test_unusable_lines_are_left_out_and_named(tmp_path, caplog):
    write_an4(tmp_path / "an4", with_test=False)
    transcription = tmp_path / "an4" / "etc" / "an4_train.transcription"
    lines = transcription.read_text().splitlines()
    lines[1] = "<s> RUBOUT </s>"  # no id
    lines[2] = lines[0].replace("RUBOUT", "ENTER")  # the first line's id again
    lines.append("<s> YES </s> (an999-fash-b)")  # no such recording
    transcription.write_text("\n".join(lines) + "\n")
    result = prepare_an4(tmp_path / "an4", tmp_path / "out", dev_speakers=1)
    assert result.left_out == 3
    kept = [u for split in result.splits.values() for u in split]
    assert len(kept) == 10 - 2
    assert [u.text for u in kept if u.audio_filepath.endswith("an250-fash-b.sph")] == [
        "RUBOUT G M E F X"]
    warning = caplog.text
    assert "an4_train.transcription line 2: no (utterance-id) at the end" in warning
    assert "an4_train.transcription line 3: an250-fash-b again (first at line 1)" in warning
    assert "line 11: no audio for an999-fash-b" in warning


def test_a_split_an_earlier_run_wrote_and_this_one_lacks_is_removed(tmp_path, caplog):
    write_an4(tmp_path / "with" / "an4")
    write_an4(tmp_path / "without" / "an4", with_test=False)
    prepare_an4(tmp_path / "with" / "an4", tmp_path / "out", dev_speakers=1)
    assert (tmp_path / "out" / "test.jsonl").is_file()
    prepare_an4(tmp_path / "without" / "an4", tmp_path / "out", dev_speakers=1)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.jsonl")) == ["dev.jsonl",
                                                                         "train.jsonl"]
    assert "removing" in caplog.text and "test.jsonl, left by an earlier run" in caplog.text

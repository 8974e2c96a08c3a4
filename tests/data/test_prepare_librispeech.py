"""LibriSpeech preparer on miniature copies of its layout, written here: parts, audio
formats, SPEAKERS.TXT, dev speakers carved out, and damaged copies named by file and line."""

from __future__ import annotations

import re

import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.librispeech import prepare_librispeech
from deepspeech.data.synth.tones import tone
from deepspeech.errors import DeepSpeechError

WORDS = ["ONE", "TWO", "THREE"]
SPEAKERS_HEADER = """\
; Some pipe(|) separated metadata about all LibriVox readers
;
;ID  |SEX| SUBSET           |MINUTES| NAME
"""


def write_subset(root, subset, speakers, missing=(), suffix="flac", chapter="100"):
    """``root/LibriSpeech/subset/<speaker>/<chapter>/``: three utterances per speaker."""
    for speaker in speakers:
        folder = root / "LibriSpeech" / subset / speaker / chapter
        folder.mkdir(parents=True)
        lines = []
        for n in range(3):
            utterance = f"{speaker}-{chapter}-{n:04d}"
            lines.append(f"{utterance} HELLO WORLD NUMBER {WORDS[n]}")
            if utterance not in missing:
                write_audio(folder / f"{utterance}.{suffix}", 0.5 + 0.25 * n)
        (folder / f"{speaker}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")


def write_audio(path, seconds):
    if path.suffix == ".ogg":
        sf.write(path, tone(seconds, 440), 16000, format="OGG", subtype="OPUS")
    else:
        sf.write(path, tone(seconds, 440), 16000)


def write_speakers(root, genders, extra_lines=()):
    """LibriSpeech's SPEAKERS.TXT: comments, then padded ``|``-separated fields."""
    lines = [f"{speaker:<5}| {sex} | train-clean-100  | 25.19 | Reader {speaker}"
             for speaker, sex in genders.items()]
    text = SPEAKERS_HEADER + "\n".join([*lines, *extra_lines]) + "\n"
    (root / "LibriSpeech" / "SPEAKERS.TXT").write_text(text)


def chapter(root, subset, speaker, number="100"):
    return root / "LibriSpeech" / subset / speaker / number


def test_one_manifest_per_subset_with_relative_paths_durations_and_speakers(tmp_path):
    write_subset(tmp_path, "train-clean-100", ["19", "26"], missing={"26-100-0002"})
    write_subset(tmp_path, "dev-clean", ["84"])
    output = tmp_path / "out"
    result = prepare_librispeech(tmp_path, output, subsets=["train-clean-100", "dev-clean"],
                                 bad_input="skip")

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
    assert not (output / "dev.jsonl").exists()  # a dev part is there: nothing carved out


def test_without_subsets_every_part_is_taken(tmp_path):
    write_subset(tmp_path, "train-clean-100", ["19", "26"])
    write_subset(tmp_path, "train-other-500", ["20"])
    write_subset(tmp_path, "dev-clean", ["84"])
    write_subset(tmp_path, "test-other", ["61"])
    (tmp_path / "LibriSpeech" / "notes").mkdir()  # not a part: left alone
    result = prepare_librispeech(tmp_path / "LibriSpeech", tmp_path / "out")
    assert list(result.manifests) == ["dev-clean", "test-other", "train-clean-100",
                                      "train-other-500"]
    assert {part: len(us) for part, us in result.splits.items()} == {
        "dev-clean": 3, "test-other": 3, "train-clean-100": 6, "train-other-500": 3}


def test_mini_librispeech_parts_with_ogg_audio(tmp_path):
    write_subset(tmp_path, "train-clean-5", ["19", "26"], suffix="ogg")
    write_subset(tmp_path, "dev-clean-2", ["84"], suffix="ogg")
    output = tmp_path / "out"
    result = prepare_librispeech(tmp_path, output)
    assert list(result.manifests) == ["dev-clean-2", "train-clean-5"]
    dev = read_manifest(output / "dev-clean-2.jsonl")
    assert [u.audio_filepath.endswith(f"84-100-000{n}.ogg") for n, u in enumerate(dev)] == [
        True] * 3
    assert sorted(round(u.duration, 2) for u in dev) == [0.5, 0.75, 1.0]
    assert check_manifest(output / "train-clean-5.jsonl").ok


def test_speakers_txt_gives_every_line_its_gender(tmp_path):
    write_subset(tmp_path, "train-clean-100", ["19", "26", "60"])
    write_subset(tmp_path, "dev-clean", ["84", "7"])
    write_speakers(tmp_path, {"19": "F", "26": "M", "84": "F"},
                   extra_lines=["60   | M | train-clean-100  | 20.18 | |CBW|Simon"])
    output = tmp_path / "out"
    prepare_librispeech(tmp_path, output)
    train = read_manifest(output / "train-clean-100.jsonl")
    assert {(u.speaker, u.extra["gender"]) for u in train} == {("19", "f"), ("26", "m"),
                                                                ("60", "m")}
    dev = read_manifest(output / "dev-clean.jsonl")
    assert {u.speaker: u.extra.get("gender") for u in dev} == {"84": "f", "7": None}
    line = (output / "train-clean-100.jsonl").read_text().splitlines()[0]
    assert line.endswith('"speaker": "19", "gender": "f"}')


def write_mini(root):
    """train-clean-5 alone: six women and four men, no dev part."""
    genders = {str(s): "F" for s in range(10, 16)} | {str(s): "M" for s in range(20, 24)}
    write_subset(root, "train-clean-5", list(genders))
    write_speakers(root, genders)
    return genders


def test_without_a_dev_part_dev_speakers_are_carved_out_by_gender(tmp_path):
    genders = write_mini(tmp_path)

    def dev_of(seed, run):
        result = prepare_librispeech(tmp_path, tmp_path / run, dev_speakers=4, seed=seed)
        train = {u.speaker for u in read_manifest(tmp_path / run / "train-clean-5.jsonl")}
        dev = {u.speaker for u in read_manifest(tmp_path / run / "dev.jsonl")}
        assert not train & dev and train | dev == set(genders)
        assert sum(len(us) for us in result.splits.values()) == 30
        return dev

    first = dev_of(0, "a")
    assert sorted(genders[s] for s in first) == ["F", "F", "M", "M"]
    assert dev_of(0, "b") == first
    assert (tmp_path / "a" / "dev.jsonl").read_bytes() == (tmp_path / "b" / "dev.jsonl").read_bytes()
    assert any(dev_of(seed, f"s{seed}") != first for seed in range(1, 6))


def test_the_default_share_is_a_tenth_and_zero_carves_out_nothing(tmp_path):
    write_mini(tmp_path)
    result = prepare_librispeech(tmp_path, tmp_path / "out")
    assert len({u.speaker for u in result.splits["dev"]}) == 1  # a tenth of 10 speakers
    result = prepare_librispeech(tmp_path, tmp_path / "out", dev_speakers=0)
    assert list(result.manifests) == ["train-clean-5"]
    assert not (tmp_path / "out" / "dev.jsonl").exists()  # the earlier run's is removed


def test_too_many_dev_speakers_are_refused(tmp_path):
    write_subset(tmp_path, "train-clean-5", ["19", "26"])
    write_speakers(tmp_path, {"19": "F", "26": "M"})
    with pytest.raises(DeepSpeechError, match="2 training speakers cannot give 1 dev speakers "
                       "and keep each gender in training"):
        prepare_librispeech(tmp_path, tmp_path / "out")


def test_subsets_restrict_and_an_absent_one_lists_the_parts_found(tmp_path):
    write_subset(tmp_path, "train-clean-5", ["19", "26"])
    write_subset(tmp_path, "dev-clean-2", ["84"])
    result = prepare_librispeech(tmp_path, tmp_path / "out", subsets=["dev-clean-2"])
    assert list(result.manifests) == ["dev-clean-2"]
    with pytest.raises(DeepSpeechError, match=r"LibriSpeech: part\(s\) train-clean-100 not "
                       r"found; found dev-clean-2, train-clean-5; fix --subsets or --root"):
        prepare_librispeech(tmp_path, tmp_path / "out", subsets=["train-clean-100", "dev-clean-2"])


def test_a_folder_without_parts_is_refused(tmp_path):
    (tmp_path / "LibriSpeech" / "notes").mkdir(parents=True)
    with pytest.raises(DeepSpeechError, match="no LibriSpeech parts found"):
        prepare_librispeech(tmp_path, tmp_path / "out")


def test_the_cli_prepares_every_part_with_its_options(tmp_path, capsys):
    write_mini(tmp_path)
    assert main(["data", "prepare", "librispeech", "--root", str(tmp_path), "-o",
                 str(tmp_path / "out"), "--dev-speakers", "2", "--seed", "3",
                 "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"train-clean-5 +24 utterances", out)
    assert re.search(r"dev +6 utterances .* 2 speakers", out)


def damage(root, case):
    """Write a small corpus, then damage it one way; returns the file to be named."""
    write_subset(root, "train-clean-5", ["19", "26"])
    write_subset(root, "dev-clean-2", ["84"])
    write_speakers(root, {"19": "F", "26": "M", "84": "F"})
    folder = chapter(root, "train-clean-5", "19")
    transcript = folder / "19-100.trans.txt"
    lines = transcript.read_text().splitlines()
    if case == "line-without-audio":
        (folder / "19-100-0001.flac").unlink()
    elif case == "audio-without-line":
        write_audio(folder / "19-100-0007.flac", 0.5)
    elif case == "no-id":
        transcript.write_text("\n".join([lines[0], "", "HELLO", *lines[1:]]) + "\n")
    elif case == "other-chapter":
        transcript.write_text("\n".join([*lines, "26-100-0000 SOMEONE ELSE"]) + "\n")
    elif case == "no-text":
        transcript.write_text("\n".join([lines[0], "19-100-0001", lines[2]]) + "\n")
    elif case == "unreadable":
        (folder / "19-100-0002.flac").write_bytes(b"not audio at all")
    elif case == "two-files":
        write_audio(folder / "19-100-0000.ogg", 0.5)
    elif case == "no-transcript-file":
        transcript.unlink()
    elif case in ("speakers-fields", "speakers-sex"):
        text = (root / "LibriSpeech" / "SPEAKERS.TXT").read_text().splitlines()
        text[4] = "26   | M" if case == "speakers-fields" else "26   | X | train-clean-100 | 1 | Y"
        (root / "LibriSpeech" / "SPEAKERS.TXT").write_text("\n".join(text) + "\n")
        return root / "LibriSpeech" / "SPEAKERS.TXT"
    return transcript


DAMAGE = [
    ("line-without-audio", "{transcript} line 2: 19-100-0001: audio file missing (no "
     "19-100-0001.flac or other audio in {folder})"),
    ("audio-without-line", "{folder}/19-100-0007.flac: no line for 19-100-0007 in {transcript}"),
    ("no-id", "{transcript} line 3: expected '19-100-NNNN TEXT', got 'HELLO'"),
    ("other-chapter", "{transcript} line 4: 26-100-0000 is not of this chapter (its ids start "
     "19-100-)"),
    ("no-text", "{transcript} line 2: 19-100-0001 has no transcript"),
    ("unreadable", "{transcript} line 3: 19-100-0002: {folder}/19-100-0002.flac: unreadable "
     "audio"),
    ("two-files", "{transcript} line 1: 19-100-0000: several audio files (19-100-0000.flac, "
     "19-100-0000.ogg); keep one"),
    ("no-transcript-file", "{folder}: 19-100.trans.txt missing; its 3 audio file(s) have no "
     "transcript"),
    ("speakers-fields", "{transcript} line 5: expected 'ID | SEX | SUBSET | MINUTES | NAME', "
     "got '26   | M'"),
    ("speakers-sex", "{transcript} line 5: speaker 26: sex 'X' is not F or M"),
]


@pytest.mark.parametrize("case, expected", DAMAGE, ids=[case for case, _ in DAMAGE])
def test_a_damaged_copy_is_named_by_file_and_line_and_nothing_is_written(tmp_path, case,
                                                                        expected):
    transcript = damage(tmp_path, case)
    folder = chapter(tmp_path, "train-clean-5", "19")
    output = tmp_path / "out"
    with pytest.raises(DeepSpeechError) as error:
        prepare_librispeech(tmp_path, output)
    message = str(error.value)
    assert message.startswith(f"librispeech {tmp_path / 'LibriSpeech'}: 1 problem(s), nothing "
                              "written:\n  ")
    assert expected.format(transcript=transcript, folder=folder) in message
    assert message.endswith("or pass --bad-input skip to leave these out.")
    assert not list(output.glob("*.jsonl"))


def test_skip_leaves_the_damage_out_with_a_warning(tmp_path, caplog):
    damage(tmp_path, "unreadable")
    result = prepare_librispeech(tmp_path, tmp_path / "out", bad_input="skip")
    assert result.left_out == 1 and len(result.splits["train-clean-5"]) == 5
    assert "left out 1 item(s)" in caplog.text and "19-100.trans.txt line 3" in caplog.text
    with pytest.raises(DeepSpeechError, match="bad_input must be one of error, skip"):
        prepare_librispeech(tmp_path, tmp_path / "out", bad_input="ignore")

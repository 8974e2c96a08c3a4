"""speechocean762 preparer on a miniature copy of its layout (Kaldi directories, Ogg Opus)."""

from __future__ import annotations

import pytest
import soundfile as sf

from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.speechocean762 import ADULT_AGE, age_group, prepare_speechocean762
from deepspeech.data.synth.tones import tone
from deepspeech.errors import DeepSpeechError

# Speaker id -> (age, gender): four children, six adults.
TRAIN = {"0001": (7, "m"), "0005": (9, "f"), "0006": (11, "f"), "0026": (14, "m"),
         "1027": (37, "f"), "1029": (31, "m"), "1033": (30, "f"), "1042": (20, "m"),
         "1044": (25, "f"), "1050": (22, "m")}
TEST = {"0002": (8, "f"), "1030": (40, "m")}


def write_part(root, part, speakers):
    data = root / part
    data.mkdir(parents=True)
    tables = {name: [] for name in ("text", "wav.scp", "utt2spk", "spk2age", "spk2gender")}
    for s, (speaker, (age, gender)) in enumerate(speakers.items()):
        (root / "WAVE" / f"SPEAKER{speaker}").mkdir(parents=True, exist_ok=True)
        for n in range(2):
            utterance = f"0{speaker}{n:04d}"
            path = f"WAVE/SPEAKER{speaker}/{utterance}.ogg"
            sf.write(root / path, tone(0.5 + 0.1 * n, 200 + 20 * s), 16000, format="OGG",
                     subtype="OPUS")
            tables["text"].append(f"{utterance}\t{('WE CALL IT BEAR', 'ZERO THREE FIVE')[n]}")
            tables["wav.scp"].append(f"{utterance}\t{path}")
            tables["utt2spk"].append(f"{utterance} {speaker}")
        tables["spk2age"].append(f"{speaker}\t{age}")
        tables["spk2gender"].append(f"{speaker}\t{gender}")
    for name, lines in tables.items():
        (data / name).write_text("\n".join(lines) + "\n")


def write_corpus(root, with_test=True):
    write_part(root, "train", TRAIN)
    if with_test:
        write_part(root, "test", TEST)
    return root


def test_dev_speakers_hold_children_and_adults_and_lines_keep_age_group_and_gender(tmp_path):
    write_corpus(tmp_path / "speechocean762")
    result = prepare_speechocean762(tmp_path, tmp_path / "out", dev_speakers=0.2)
    train, dev, test = (read_manifest(tmp_path / "out" / f"{s}.jsonl")
                        for s in ("train", "dev", "test"))
    assert (len(train), len(dev), len(test)) == (16, 4, 4)
    dev_ages = sorted({u.extra["age"] for u in dev})
    assert len(dev_ages) == 2 and dev_ages[0] < ADULT_AGE <= dev_ages[1]
    assert not {u.speaker for u in train} & {u.speaker for u in dev}
    assert {u.speaker for u in test} == set(TEST)
    for utterance in train + dev:
        assert (utterance.extra["age"], utterance.extra["gender"]) == TRAIN[utterance.speaker]
    # Each line says which group its speaker is in, for `deepspeech evaluate --group-by`.
    groups = {u.speaker: u.extra["age_group"] for u in train + dev + test}
    assert groups == {"0001": "child", "0005": "child", "0006": "child", "0026": "child",
                      "0002": "child", "1027": "adult", "1029": "adult", "1033": "adult",
                      "1042": "adult", "1044": "adult", "1050": "adult", "1030": "adult"}
    lines = "".join((tmp_path / "out" / f"{s}.jsonl").read_text() for s in ("train", "dev"))
    assert '"age": 7, "age_group": "child", "gender": "m"' in lines
    assert (age_group(ADULT_AGE - 1), age_group(ADULT_AGE)) == ("child", "adult")
    assert '"source/WAVE/SPEAKER' in (tmp_path / "out" / "dev.jsonl").read_text()
    assert {round(u.duration, 3) for u in train} == {0.5, 0.6}
    assert check_manifest(tmp_path / "out" / "dev.jsonl").ok
    assert set(result.splits) == {"train", "dev", "test"}


def test_two_dev_speakers_are_one_child_and_one_adult_whatever_the_seed(tmp_path):
    write_corpus(tmp_path / "so", with_test=False)
    for seed in range(6):
        result = prepare_speechocean762(tmp_path / "so", tmp_path / "out", dev_speakers=2,
                                        seed=seed)
        ages = sorted({u.extra["age"] for u in result.splits["dev"]})
        assert len(ages) == 2 and ages[0] < ADULT_AGE <= ages[1], seed
        assert set(result.splits) == {"train", "dev"}
    again = prepare_speechocean762(tmp_path / "so", tmp_path / "again", dev_speakers=2, seed=5)
    assert [(u.speaker, u.text) for u in again.splits["dev"]] == [
        (u.speaker, u.text) for u in result.splits["dev"]]


def test_dev_speakers_change_with_the_seed_and_may_be_none(tmp_path):
    write_corpus(tmp_path / "so", with_test=False)
    chosen = {frozenset(u.speaker for u in prepare_speechocean762(
        tmp_path / "so", tmp_path / f"out{seed}", dev_speakers=4, seed=seed).splits["dev"])
        for seed in range(4)}
    assert len(chosen) > 1
    result = prepare_speechocean762(tmp_path / "so", tmp_path / "all", dev_speakers=0)
    assert set(result.splits) == {"train"} and len(result.splits["train"]) == 20


def test_one_dev_speaker_cannot_hold_both_groups(tmp_path):
    write_corpus(tmp_path / "so", with_test=False)
    with pytest.raises(DeepSpeechError, match="1 dev speaker.*cannot hold both children and "
                                              "adults; ask for at least 2"):
        prepare_speechocean762(tmp_path / "so", tmp_path / "out", dev_speakers=1)


def test_speaker_tables_with_gaps_or_bad_ages_are_named_by_file_and_line(tmp_path):
    root = write_corpus(tmp_path / "so", with_test=False)
    ages = (root / "train" / "spk2age").read_text().splitlines()
    ages[1] = "0005\tnine"
    (root / "train" / "spk2age").write_text("\n".join(ages) + "\n")
    genders = (root / "train" / "spk2gender").read_text().splitlines()
    (root / "train" / "spk2gender").write_text("\n".join(genders[:-1]) + "\n")
    with pytest.raises(DeepSpeechError) as error:
        prepare_speechocean762(root, tmp_path / "out")
    message = str(error.value)
    assert message.startswith(f"{root / 'train'}: 2 problem(s), nothing written")
    assert "train/spk2age line 2: 0005: age 'nine' is not a whole number of years" in message
    assert "train/spk2gender: no line for speaker 1050" in message
    assert not (tmp_path / "out" / "train.jsonl").exists()


def test_a_folder_without_the_layout_is_refused(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(DeepSpeechError, match=r"x: not a speechocean762 folder \(train/wav.scp"):
        prepare_speechocean762(tmp_path / "x", tmp_path / "out")
    root = write_corpus(tmp_path / "so", with_test=False)
    (root / "train" / "spk2age").unlink()
    with pytest.raises(DeepSpeechError, match=r"so/train: spk2age missing"):
        prepare_speechocean762(root, tmp_path / "out")

"""The espeak-ng corpus: text generators, voice split, and tiny end-to-end synth runs."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from deepspeech.cli import main as cli_main
from deepspeech.data.manifest import read_manifest
from deepspeech.data.synth import mandarin, numbers
from deepspeech.data.synth import synthesize as synthesize_module
from deepspeech.data.synth.espeak import SynthesisError, get_engine
from deepspeech.data.synth.lexicon import article, past, plural, third_person, vocabulary_size
from deepspeech.data.synth.sentences import MAX_WORDS, MIN_WORDS, english_sentence
from deepspeech.data.synth.synthesize import synthesize_corpus
from deepspeech.data.synth.voices import split_variants, usable_variants
from deepspeech.data.text import ENGLISH_CHARACTERS

TINY_HOURS = 0.005  # 18 s: a handful of utterances per split


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*")) if path.is_file()
    }


# -- text ----------------------------------------------------------------------------


def test_english_sentences_are_deterministic_and_in_the_default_vocabulary():
    first = [english_sentence(random.Random(7)) for _ in range(3)]
    rng_a, rng_b = random.Random(11), random.Random(11)
    batch_a = [english_sentence(rng_a) for _ in range(400)]
    batch_b = [english_sentence(rng_b) for _ in range(400)]
    assert batch_a == batch_b
    assert len(set(first)) == 1
    allowed = set(ENGLISH_CHARACTERS)
    for sentence in batch_a:
        assert set(sentence) <= allowed, sentence
        assert sentence == " ".join(sentence.split()), sentence  # no stray spaces
        assert MIN_WORDS <= len(sentence.split()) <= MAX_WORDS, sentence
    assert len(set(batch_a)) > 390  # varied, not a few templates repeated


def test_word_list_has_a_few_thousand_words():
    assert vocabulary_size() >= 2500


def test_numbers_dates_and_times_are_spelled_out():
    assert numbers.cardinal(0) == "zero"
    assert numbers.cardinal(342) == "three hundred forty two"
    assert numbers.cardinal(12_005) == "twelve thousand five"
    assert numbers.ordinal(21) == "twenty first"
    assert numbers.ordinal(40) == "fortieth"
    assert numbers.year(1984) == "nineteen eighty four"
    assert numbers.year(2005) == "two thousand five"
    assert numbers.year(1905) == "nineteen oh five"
    assert numbers.clock(7, 5) == "seven oh five"
    assert numbers.clock(19, 0) == "seven o'clock"
    assert numbers.clock(7, 45, "past") == "a quarter to eight"
    assert numbers.clock(12, 0) == "noon"
    assert numbers.date(3, 21) == "march twenty first"
    assert numbers.date(2, 29, "of") == "the twenty ninth of february"
    assert numbers.duration(1, 30) == "one hour and thirty minutes"
    assert numbers.money(12, 50) == "twelve dollars and fifty cents"
    assert numbers.digits("4071") == "four zero seven one"


def test_inflection_rules():
    assert [plural(w) for w in ("box", "city", "day", "living room")] == [
        "boxes", "cities", "days", "living rooms"]
    assert [past(w) for w in ("bake", "cry", "play", "walk")] == [
        "baked", "cried", "played", "walked"]
    assert [third_person(w) for w in ("go", "fix", "carry", "have")] == [
        "goes", "fixes", "carries", "has"]
    assert [article(w) for w in ("apple", "book", "hour", "university")] == ["an", "a", "an", "a"]


def test_mandarin_sentences_are_chinese_and_espeak_knows_every_character():
    rng_a, rng_b = random.Random(3), random.Random(3)
    batch = [mandarin.mandarin_sentence(rng_a) for _ in range(300)]
    assert batch == [mandarin.mandarin_sentence(rng_b) for _ in range(300)]
    assert all(re.fullmatch(r"[\u4e00-\u9fff]{6,24}", text) for text in batch), batch[:5]
    assert mandarin.cardinal(205) == "二百零五"
    assert mandarin.cardinal(120_000) == "十二万"
    assert mandarin.count(2) == "两" and mandarin.count(22) == "二十二"
    assert mandarin.clock(14, 30) == "下午两点半"
    # A character missing from espeak's cmn dictionary is read in English ("(en)...").
    engine = get_engine()
    unknown = [ch for ch in sorted(set("".join(batch))) if "(en)" in engine.phonemes(ch, "cmn")]
    assert unknown == []


# -- voices --------------------------------------------------------------------------


def test_unintelligible_variants_are_dropped_and_splits_are_disjoint():
    variants = usable_variants()
    names = {variant.name for variant in variants}
    assert len(variants) >= 40
    assert not names & {"whisper", "whisperf", "caleb", "robosoft", "Demonic"}
    assert {"m1", "f2", "klatt3"} <= names
    splits = split_variants(variants, seed=0, dev_fraction=0.1, test_fraction=0.1)
    assert splits == split_variants(variants, seed=0, dev_fraction=0.1, test_fraction=0.1)
    assert splits != split_variants(variants, seed=1, dev_fraction=0.1, test_fraction=0.1)
    train, dev, test = (set(splits[name]) for name in ("train", "dev", "test"))
    assert not (train & dev or train & test or dev & test)
    assert train | dev | test == names
    groups = {variant.name: variant.group for variant in variants}
    assert {groups[name] for name in test} == {"klatt", "high", "low"}  # stratified


# -- end to end ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny corpora: seed 0 twice (2 and 1 workers), seed 1 (wav, clean) over a copy of seed 0."""
    root = tmp_path_factory.mktemp("synth")
    first = synthesize_corpus(root / "a", hours=TINY_HOURS, seed=0, progress=False, workers=2)
    second = synthesize_corpus(root / "b", hours=TINY_HOURS, seed=0, progress=False, workers=1)
    shutil.copytree(root / "a", root / "c")
    other = synthesize_corpus(root / "c", hours=TINY_HOURS, seed=1, audio_format="wav",
                              noise_snr=None, progress=False)
    return {"a": first, "b": second, "c": other, "root": root}


def test_tiny_run_writes_readable_16k_audio_matching_the_manifests(runs):
    summary = runs["a"]
    assert set(summary.manifests) == {"train", "dev", "test"}
    assert summary.hours >= TINY_HOURS
    for split, path in summary.manifests.items():
        utterances = read_manifest(path)
        assert len(utterances) == summary.splits[split].utterances >= 1
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert all(record["audio_filepath"].startswith("audio-") for record in records)
        for utterance in utterances:
            audio, rate = sf.read(utterance.audio_filepath, dtype="int16")
            assert rate == 16_000 and audio.ndim == 1
            assert utterance.audio_filepath.endswith(".flac")
            assert abs(len(audio) / rate - utterance.duration) < 1e-5
            assert 0.5 < utterance.duration < 12
            assert set(utterance.text) <= set(ENGLISH_CHARACTERS)
            assert abs(audio).max() > 1000  # not silence


def test_splits_have_disjoint_voices(runs):
    speakers = {split: {u.speaker for u in read_manifest(path)}
                for split, path in runs["a"].manifests.items()}
    variants = {split: {s.split("+", 1)[1] for s in names} for split, names in speakers.items()}
    assert not variants["train"] & variants["dev"]
    assert not variants["train"] & variants["test"]
    assert not variants["dev"] & variants["test"]


def test_same_seed_gives_byte_identical_files_whatever_the_workers(runs):
    first, second = _tree_digest(runs["root"] / "a"), _tree_digest(runs["root"] / "b")
    assert len(first) > 5
    assert first == second


def test_a_new_corpus_replaces_the_old_one_in_place(runs):
    folder = runs["root"] / "c"
    digest = _tree_digest(folder)
    assert digest != _tree_digest(runs["root"] / "a")
    assert len([p for p in folder.iterdir() if p.name.startswith(("audio-", ".audio-"))]) == 1
    utterances = read_manifest(folder / "train.jsonl")
    assert all(u.audio_filepath.endswith(".wav") for u in utterances)
    assert all(Path(u.audio_filepath).is_file() for u in utterances)
    assert sf.info(utterances[0].audio_filepath).samplerate == 16_000


def test_rerunning_the_same_options_reproduces_the_corpus_in_place(runs, tmp_path):
    folder = tmp_path / "corpus"
    shutil.copytree(runs["root"] / "a", folder)
    before = _tree_digest(folder)
    synthesize_corpus(folder, hours=TINY_HOURS, seed=0, progress=False)
    assert _tree_digest(folder) == before


def test_an_interrupted_run_leaves_the_existing_corpus_intact(runs, tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    shutil.copytree(runs["root"] / "a", folder)
    before = _tree_digest(folder)
    calls = []
    real = synthesize_module._finish_audio

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(synthesize_module, "_finish_audio", interrupted)
    with pytest.raises(KeyboardInterrupt):
        synthesize_corpus(folder, hours=TINY_HOURS, seed=5, progress=False)
    assert _tree_digest(folder) == before
    assert not [p for p in folder.iterdir() if p.name.startswith(".audio-")]


def test_mandarin_run_has_chinese_transcripts(tmp_path):
    summary = synthesize_corpus(tmp_path, hours=0.002, seed=0, language="cmn",
                                dev_fraction=0.0, test_fraction=0.2, progress=False)
    assert set(summary.manifests) == {"train", "test"}
    for path in summary.manifests.values():
        for utterance in read_manifest(path):
            assert re.fullmatch(r"[\u4e00-\u9fff]+", utterance.text), utterance.text
            assert utterance.speaker.startswith("cmn+")
            assert sf.info(utterance.audio_filepath).samplerate == 16_000


def test_given_sentences_are_spoken_instead_of_generated(tmp_path):
    manifest = tmp_path / "real.jsonl"
    texts = ["one two three", "seven eight", "nine"]
    manifest.write_text("".join(json.dumps({"audio_filepath": "x.wav", "text": text,
                                            "duration": 1.0}) + "\n" for text in texts))
    assert cli_main(["data", "synth", "-o", str(tmp_path / "out"), "--hours", "0.003",
                     "--text", str(manifest), "--test-fraction", "0"]) == 0
    spoken = [u.text for split in ("train", "dev")
              for u in read_manifest(tmp_path / "out" / f"{split}.jsonl")]
    assert len(spoken) >= 3 and set(spoken) <= set(texts)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(SystemExit, match="no sentences to speak"):
        cli_main(["data", "synth", "-o", str(tmp_path / "other"), "--text", str(empty)])


def test_given_sentences_outside_the_english_vocabulary_are_warned_of_first(tmp_path, caplog):
    text = tmp_path / "text.txt"
    text.write_text("Room 42 is free\nplain words, fine!\n")
    assert cli_main(["data", "synth", "-o", str(tmp_path / "out"), "--hours", "0.001",
                     "--text", str(text), "--dev-fraction", "0", "--test-fraction", "0"]) == 0
    assert ("1 of 2 sentences hold characters outside the English vocabulary (first: '4', '2' "
            "in 'Room 42 is free')") in caplog.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hours": -1}, "--hours"),
        ({"hours": 0}, "--hours"),
        ({"language": "fr"}, "'fr'"),
        ({"audio_format": "mp3"}, "--format"),
        ({"dev_fraction": 0.5, "test_fraction": 0.5}, "training"),
        ({"noise_snr": (30, 10)}, "--noise-snr"),
    ],
)
def test_bad_options_are_clear_errors(tmp_path, options, message):
    with pytest.raises(SynthesisError, match=re.escape(message)):
        synthesize_corpus(tmp_path / "out", progress=False, **options)
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_cli_reports_bad_arguments(tmp_path, capsys):
    assert cli_main(["data", "synth", "-o", str(tmp_path), "--hours", "-2"]) == 2
    assert "--hours must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["data", "synth", "-o", str(tmp_path), "--language", "klingon"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'klingon'" in capsys.readouterr().err

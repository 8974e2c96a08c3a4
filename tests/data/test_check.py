"""``deepspeech data check`` on a folder of deliberately broken files, and ``skip`` training."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.config import DataConfig, FeaturesConfig, ModelConfig
from deepspeech.data.check import check_manifest
from deepspeech.data.corpus import Corpus, ctc_frames_needed, load_corpus
from deepspeech.data.manifest import Utterance
from deepspeech.data.probe import find_unreadable, probe_audio, without_unreadable
from deepspeech.data.synth.tones import RATE, manifest_line, tone, truncate
from deepspeech.data.text import TextNormalizer, Vocabulary
from deepspeech.errors import ManifestError
from deepspeech.features import FeatureExtractor
from deepspeech.model import DeepSpeech2
from deepspeech.model.frames import output_frames_counter


def broken_folder(folder):
    """A manifest with one line per kind of problem (and good lines); returns path, expected."""
    folder.mkdir(parents=True, exist_ok=True)
    sf.write(folder / "good.wav", tone(1.0, seed=0), RATE)
    sf.write(folder / "good2.flac", tone(1.0, seed=1), RATE)
    (folder / "empty.wav").write_bytes(b"")
    (folder / "junk.wav").write_bytes(b"this is not audio at all" * 20)
    sf.write(folder / "cut.wav", tone(2.0, seed=0), RATE)
    truncate(folder / "cut.wav")
    sf.write(folder / "cut.flac", tone(2.0, seed=0), RATE)
    truncate(folder / "cut.flac")
    sf.write(folder / "zero.wav", np.zeros(0, np.float32), RATE)
    sf.write(folder / "silent.wav", np.zeros(RATE, np.float32), RATE)
    nan = tone(1.0, seed=0)
    nan[100] = np.nan
    sf.write(folder / "nan.wav", nan, RATE, subtype="FLOAT")
    sf.write(folder / "short.wav", tone(0.1, seed=0), RATE)
    lines = [
        manifest_line("good.wav", "yes", 1.0),                 # 1 fine
        manifest_line("missing.wav", "no", 1.0),               # 2 missing
        manifest_line("empty.wav", "no", 1.0),                 # 3 empty_file
        manifest_line("junk.wav", "no", 1.0),                  # 4 unreadable
        manifest_line("cut.wav", "no", 2.0),                   # 5 truncated (WAV header)
        manifest_line("cut.flac", "no", 2.0),                  # 6 truncated (FLAC decode)
        manifest_line("zero.wav", "no", 1.0),                  # 7 no_samples
        manifest_line("silent.wav", "no", 1.0),                # 8 silent
        manifest_line("nan.wav", "no", 1.0),                   # 9 nan
        manifest_line("good2.flac", "yes", 2.5),               # 10 duration
        manifest_line("short.wav", "a very long transcript", 0.1),  # 11 ctc
        manifest_line("good2.flac", "café", 1.0, offset=0.0),  # 12 vocabulary
        manifest_line("good2.flac", "?!", 0.5, offset=0.5),    # 13 empty_text (after normalizing)
        '{"audio_filepath": "good.wav", "text": ',             # 14 malformed JSON
        json.dumps({"audio_filepath": "good.wav", "text": "x"}),  # 15 malformed (no duration)
        manifest_line("good.wav", "yes", 1.0),                 # 16 duplicate of line 1
        manifest_line("good.wav", "no", 0.5, offset=5.0),      # 17 offset past the end
        "",                                                    # 18 blank: ignored
    ]
    manifest = folder / "broken.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    with manifest.open("ab") as handle:
        handle.write(b'{"audio_filepath": "good.wav", "text": "\xff", "duration": 1}\n')  # 19
    expected = {
        "malformed": [14, 15, 19], "duplicate": [16], "missing": [2], "empty_file": [3],
        "unreadable": [4], "truncated": [5, 6], "no_samples": [7], "offset": [17], "nan": [9],
        "silent": [8], "duration": [10], "empty_text": [13], "vocabulary": [12], "ctc": [11],
    }
    return manifest, expected


def test_every_kind_of_problem_is_found_with_its_line(tmp_path):
    manifest, expected = broken_folder(tmp_path / "broken")
    report = check_manifest(manifest)
    found = {}
    for problem in report.problems:
        found.setdefault(problem.kind, []).append(problem.line)
    assert {kind: sorted(lines) for kind, lines in found.items()} == expected
    assert report.lines == 19 and report.utterances == 15
    text = report.format()
    assert "missing audio files (1)" in text and "truncated audio (2)" in text
    assert f"{manifest}:2: missing.wav: audio file missing" in text
    assert "line 1" in text  # the duplicate names the first occurrence
    assert "'é'" in text and "20 ms output frame" in text
    assert "17 problem(s) on 17 line(s)" in text


def test_quick_mode_reads_headers_only(tmp_path):
    manifest, expected = broken_folder(tmp_path / "broken")
    kinds = {p.kind for p in check_manifest(manifest, quick=True).problems}
    assert kinds == set(expected) - {"nan", "silent"}  # only a full decode finds those


def test_command_exit_status_text_and_json(tmp_path, capsys):
    manifest, expected = broken_folder(tmp_path / "broken")
    assert main(["data", "check", str(manifest)]) == 1
    assert "characters outside the vocabulary (1)" in capsys.readouterr().out
    assert main(["data", "check", str(manifest), "--json", "--vocabulary", "build"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert "vocabulary" not in result["counts"]  # built from the manifest: é is in it
    assert result["counts"]["malformed"] == 3 and result["ok"] is False

    clean = tmp_path / "clean.jsonl"
    clean.write_text(manifest_line(str(tmp_path / "broken" / "good.wav"), "yes", 1.0) + "\n")
    assert main(["data", "check", str(clean)]) == 0
    assert "no problems found" in capsys.readouterr().out


def test_write_clean_keeps_the_usable_lines_with_durations_from_the_audio(tmp_path, capsys):
    manifest, _ = broken_folder(tmp_path / "broken")
    assert main(["data", "check", str(manifest), "--write-clean"]) == 1
    clean = tmp_path / "broken" / "broken.clean.jsonl"
    assert (f"wrote {clean}: 2 of 15 utterances, durations from the audio"
            in capsys.readouterr().out)
    entries = [json.loads(line) for line in clean.read_text().splitlines()]
    # line 1, and line 10 with the audio's duration for its manifest's 2.5 s; the
    # repeat of line 1 and the silent file are left out with the unusable ones
    assert [(e["audio_filepath"], e["text"], e["duration"]) for e in entries] == [
        ("good.wav", "yes", 1.0), ("good2.flac", "yes", 1.0)]
    assert main(["data", "check", str(clean)]) == 0


def test_config_gives_the_models_own_output_frames(tmp_path, capsys):
    folder = tmp_path / "c"
    folder.mkdir()
    sf.write(folder / "a.wav", tone(0.3, seed=0), RATE)
    manifest = folder / "m.jsonl"
    # 0.3 s: 15 frames at 20 ms; with a time stride of 4 only about 7.
    manifest.write_text(manifest_line("a.wav", "abcdefghij", 0.3) + "\n")
    config = tmp_path / "cfg.yaml"
    config.write_text("model:\n  conv:\n    strides: [[2, 2], [2, 2]]\n")
    assert main(["data", "check", str(manifest)]) == 0
    capsys.readouterr()
    assert main(["data", "check", str(manifest), "--config", str(config)]) == 1
    assert "10 characters need 10 output frames, 0.30 s gives 8" in capsys.readouterr().out


def test_audio_too_short_for_the_features_gives_no_output_frames():
    extractor = FeatureExtractor(FeaturesConfig(), RATE)  # 320-sample window: 161 at least
    frames = output_frames_counter(DeepSpeech2(ModelConfig(), extractor.num_bins, 29), extractor)
    assert frames(161 / RATE) > 0
    assert frames(160 / RATE) == 0


def test_ctc_needs_a_blank_between_repeated_characters():
    assert ctc_frames_needed("abc") == 3
    assert ctc_frames_needed("hello  moon") == 14


def test_a_folder_given_as_audio_is_called_a_folder(tmp_path, capsys):
    (tmp_path / "clips").mkdir()
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(manifest_line("clips", "yes", 1.0) + "\n")
    assert main(["data", "check", str(manifest)]) == 1
    text = capsys.readouterr().out
    assert f"{manifest}:1: clips: a folder, not an audio file" in text
    assert "missing" not in text


@pytest.mark.parametrize("content, what", [(b"", "0 bytes"), (b"\n  \n\n", "3 blank line(s)")])
def test_an_empty_manifest_is_a_problem_not_a_pass(tmp_path, capsys, content, what):
    manifest = tmp_path / "empty.jsonl"
    manifest.write_bytes(content)
    assert main(["data", "check", str(manifest)]) == 1
    text = capsys.readouterr().out
    assert f"empty manifest (1)\n  {manifest}: no utterances ({what})" in text
    assert "no problems found" not in text and "1 problem(s): empty_manifest 1" in text
    assert main(["data", "check", str(manifest), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is False and result["counts"] == {"empty_manifest": 1}


@pytest.mark.parametrize("suffix, kind", [("mp3", "MP3"), ("sph", "NIST"), ("ogg", "OGG")])
def test_headers_catch_cut_files_of_other_formats(tmp_path, suffix, kind):
    path = tmp_path / f"a.{suffix}"
    sf.write(path, tone(2.0, seed=0), RATE, format=kind)
    assert probe_audio(str(path)).usable
    truncate(path)
    assert [k for k, _ in probe_audio(str(path)).problems][0] in ("truncated", "no_samples")


def test_unreadable_utterances_are_reported_or_dropped_for_training(tmp_path):
    manifest, _ = broken_folder(tmp_path / "broken")
    folder = tmp_path / "broken"
    names = ["good.wav", "missing.wav", "junk.wav", "cut.flac", "nan.wav", "good2.flac"]
    utterances = [Utterance(str(folder / name), "yes", 1.0) for name in names]
    utterances.append(Utterance(str(folder / "good.wav"), "yes", 0.5, offset=3.0))
    problems = find_unreadable(utterances)
    assert [p.index for p in problems] == [1, 2, 3, 6]  # headers: NaN needs a decode
    assert [p.index for p in find_unreadable(utterances, decode=True)] == [1, 2, 3, 4, 6]

    corpus = Corpus(str(manifest), utterances, [[1]] * len(utterances))
    with pytest.raises(ManifestError, match=r"4 unusable utterance.*\n.*line 2 \(.*missing.wav\)"):
        without_unreadable(corpus, "error")
    kept = without_unreadable(corpus, "skip")
    assert [u.audio_filepath for u in kept.utterances] == [
        str(folder / n) for n in ("good.wav", "nan.wav", "good2.flac")]
    assert kept.skipped == 4 and len(kept.labels) == 3


def test_manifest_durations_that_miss_the_audio_are_named_before_training(tmp_path, caplog):
    """Durations computed at the wrong sample rate skew batches and length checks."""
    sf.write(tmp_path / "a.wav", tone(1.0, seed=0), RATE)
    sf.write(tmp_path / "b.wav", tone(2.0, seed=0), RATE)
    utterances = [Utterance(str(tmp_path / "a.wav"), "yes", 0.5),
                  Utterance(str(tmp_path / "b.wav"), "no", 2.02),  # within tolerance
                  Utterance(str(tmp_path / "b.wav"), "no", 0.5, offset=1.0)]  # a segment
    corpus = Corpus("m.jsonl", utterances, [[1], [2], [2]])
    assert without_unreadable(corpus, "error") is corpus  # still usable: a warning only
    assert "m.jsonl: 1 of 3 utterance(s) last other than the manifest says" in caplog.text
    assert "a.wav: manifest says 0.500 s, the audio lasts 1.000 s" in caplog.text
    caplog.clear()
    find_unreadable(utterances)  # no manifest named (noise files): no warning
    assert not caplog.records


@pytest.mark.slow
def test_skip_policy_trains_on_the_rest(tmp_path, tiny_overrides):
    """Acceptance: broken entries of every kind in the training manifest, skipped."""
    from deepspeech.config import load_config
    from deepspeech.training.trainer import train

    def good_manifest(name: str, count: int):
        lines = []
        for n in range(count):
            sf.write(tmp_path / "corpus" / f"{name}{n}.flac", tone(0.6 + 0.05 * n, seed=n), RATE)
            lines.append(manifest_line(f"{name}{n}.flac", ["yes", "no go", "up"][n % 3],
                                       0.6 + 0.05 * n))
        (tmp_path / "corpus" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        return tmp_path / "corpus" / f"{name}.jsonl"

    (tmp_path / "corpus").mkdir()
    train_manifest, val_manifest = good_manifest("train", 20), good_manifest("val", 4)
    broken, _ = broken_folder(tmp_path / "corpus" / "broken")
    good = train_manifest.read_text()
    # Every broken line that parses (malformed lines stop any run: fix the manifest first).
    lines = broken.read_bytes().decode("utf-8", "replace").splitlines()
    bad = [json.loads(line) for n, line in enumerate(lines, 1) if n in (2, 3, 4, 5, 6, 7, 11, 12,
                                                                         13, 17)]
    for record in bad:
        record["audio_filepath"] = f"broken/{record['audio_filepath']}"
    train_manifest.write_text(good + "".join(json.dumps(r) + "\n" for r in bad))
    config = load_config(None, [*tiny_overrides({"train": train_manifest, "val": val_manifest},
                                                tmp_path / "run"),
                                "data.bad_input=skip", "train.epochs=1"])
    result = train(config)
    assert result.steps == 3  # 20 good utterances, batches of 8: nothing broken was kept


def test_training_and_data_check_find_the_same_transcript_problems(tmp_path, capsys):
    """One rule, two callers: the corpus that training loads and ``data check``."""
    clip = tmp_path / "a.wav"
    sf.write(clip, np.zeros(RATE // 2, dtype=np.float32), RATE)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": "a.wav", "text": "zürich " * 9,
                                    "duration": 0.5}) + "\n")
    output_frames = lambda seconds: 25  # noqa: E731 (20 ms frames)
    report = check_manifest(manifest, output_frames=output_frames, quick=True)
    checked = sorted(problem.message for problem in report.problems)
    with pytest.raises(ManifestError) as error:
        load_corpus(str(manifest), Vocabulary.english(), TextNormalizer(), DataConfig(),
                    max_labels=output_frames)
    assert len(checked) == 2 and all(message in str(error.value) for message in checked)
    assert "1 unusable utterance(s)" in str(error.value)
    assert any("outside the vocabulary: 'ü'" in message for message in checked)
    assert any("CTC cannot align" in message for message in checked)

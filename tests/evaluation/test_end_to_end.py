"""Train a few steps, then evaluate and transcribe through the command line."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from itertools import pairwise

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.cli import build_parser, main
from deepspeech.config import load_config
from deepspeech.data.audio import load_audio
from deepspeech.data.manifest import Utterance, read_manifest, write_manifest
from deepspeech.decoding.vtln import transcript_log_likelihood
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.transcribe import transcribe_file, window_log_probs
from deepspeech.training.trainer import train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tiny_corpus, tiny_overrides, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    train(load_config(None, [*tiny_overrides(tiny_corpus, run), "train.epochs=3",
                             "features.dynamic_range_db=80"]))
    return run / "best.pt"


def test_evaluate_writes_summary_and_report(checkpoint, tiny_corpus, tmp_path, capsys):
    report = tmp_path / "report.jsonl"
    status = main(["evaluate", "--checkpoint", str(checkpoint), "--manifest",
                   str(tiny_corpus["val"]), "--report", str(report), "--json",
                   "--workers", "0"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["utterances"] == 12
    assert summary["cer"] >= 0.0 and summary["real_time_factor"] > 0
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 12
    assert {"reference", "hypothesis", "word_errors", "char_errors"} <= set(lines[0])
    words = sum(line["word_errors"] for line in lines)
    total = sum(line["reference_words"] for line in lines)
    assert summary["wer"] == pytest.approx(words / total)
    assert {line["speaker"] for line in lines} == {"s0", "s1", "s2"}
    assert set(summary["speakers"]) == {"s0", "s1", "s2"}
    assert sum(row["words"] for row in summary["speakers"].values()) == total
    errors = [row["word_errors"] for row in summary["speakers"].values()]
    assert errors == sorted(errors, reverse=True) and sum(errors) == words
    # each hypothesis word: its confidence and whether the alignment found it right
    for line in lines:
        assert [w["word"] for w in line["words"]] == line["hypothesis"].split()
        assert all(0.0 <= w["confidence"] <= 1.0 for w in line["words"])
        assert line["confidence"] == pytest.approx(
            math.prod(w["confidence"] for w in line["words"]), abs=1e-5)
        if line["hypothesis"] == line["reference"]:
            assert all(w["correct"] for w in line["words"])
    scored = [w for line in lines for w in line["words"]]
    confidence = summary["confidence"]
    assert confidence["words"] == len(scored)
    assert confidence["wrong"] == sum(not w["correct"] for w in scored)
    assert sum(row["count"] for row in confidence["bins"]) == len(scored)
    assert confidence["auc"] is None or 0.0 <= confidence["auc"] <= 1.0


def test_evaluate_compares_with_an_earlier_report(checkpoint, tiny_corpus, tmp_path, capsys):
    report = tmp_path / "report.jsonl"
    manifest = str(tiny_corpus["val"])
    main(["evaluate", "--checkpoint", str(checkpoint), "--manifest", manifest, "--report",
          str(report), "--workers", "0"])
    first = capsys.readouterr().out
    assert "95% bootstrap interval over 12 utterances" in first
    status = main(["evaluate", "--checkpoint", str(checkpoint), "--manifest", manifest,
                   "--compare", str(report), "--json", "--workers", "0"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    interval = summary["wer_interval"]
    assert interval["low"] <= summary["wer"] <= interval["high"]
    # The same model on the same utterances: no difference in any resample.
    compared = summary["compare"]
    assert compared["wer_a"] == compared["wer_b"] == pytest.approx(summary["wer"])
    assert compared["probability_b_better"] == 0.0
    assert compared["difference"]["low"] == compared["difference"]["high"] == 0.0
    status = main(["evaluate", "--checkpoint", str(checkpoint), "--manifest",
                   str(tiny_corpus["train"]), "--compare", str(report), "--workers", "0"])
    assert status == 2
    assert f"{report}: does not score" in capsys.readouterr().err


def test_too_short_audio_is_named_in_transcribe_and_evaluate(checkpoint, tmp_path, capsys):
    clip = tmp_path / "click.wav"
    sf.write(clip, np.full(40, 0.1, dtype=np.float32), 16000)
    assert main(["transcribe", "--checkpoint", str(checkpoint), str(clip)]) == 2
    assert f"{clip}: 40 samples (2.5 ms) are too few" in capsys.readouterr().err
    manifest = tmp_path / "short.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": str(clip), "text": "a",
                                    "duration": 0.0025}) + "\n")
    evaluate = ["evaluate", "--checkpoint", str(checkpoint), "--manifest", str(manifest),
                "--workers", "1"]
    assert main(evaluate) == 2  # named before any decoding, like an unreadable file
    error = capsys.readouterr().err.strip()
    assert f"{manifest}: 1 unusable utterance(s)" in error
    assert f"line 1 ({clip}): 2.5 ms of audio, shorter than the 10.0625 ms the features take" \
        in error
    assert "Traceback" not in error
    assert main([*evaluate, "--skip-bad"]) == 2
    assert f"{manifest}: no usable utterances" in capsys.readouterr().err


def test_unreadable_audio_is_listed_before_decoding_and_skip_bad_skips_it(checkpoint,
                                                                         tiny_corpus, tmp_path,
                                                                         capsys):
    garbage, nan = tmp_path / "garbage.wav", tmp_path / "nan.wav"
    garbage.write_bytes(b"not audio at all")
    sf.write(nan, np.array([0.1, np.nan] * 4000, dtype=np.float32), 16000, subtype="FLOAT")
    manifest = tmp_path / "mixed.jsonl"
    utterances = [*read_manifest(tiny_corpus["val"])[:3],
                  *(Utterance(str(path), "a", 0.5) for path in (garbage, nan))]
    write_manifest(manifest, utterances)
    evaluate = ["evaluate", "--checkpoint", str(checkpoint), "--manifest", str(manifest),
                "--workers", "0", "--json"]
    assert main(evaluate) == 2
    error = capsys.readouterr().err
    assert "1 unusable utterance(s) (data.bad_input=skip in training, --skip-bad in " in error
    assert f"line 4 ({garbage}): not readable as audio" in error
    assert main([*evaluate, "--skip-bad"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["utterances"] == 3  # the NaN file is found by decoding the audio once


def test_a_bad_file_among_many_is_reported_and_the_others_transcribed(checkpoint, tiny_corpus,
                                                                     tmp_path, capsys):
    good = [u.audio_filepath for u in read_manifest(tiny_corpus["val"])[:2]]
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    status = main(["transcribe", "--checkpoint", str(checkpoint), "--json", good[0], str(bad),
                   good[1]])
    assert status == 2
    captured = capsys.readouterr()
    results = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["audio_filepath"] for r in results] == [good[0], str(bad), good[1]]
    assert "text" in results[0] and "text" in results[2]
    assert results[1]["error"].startswith(f"{bad}: unreadable audio")
    assert "1 of 3 files could not be transcribed" in captured.err


def test_a_folder_stands_for_the_audio_files_under_it(checkpoint, tiny_corpus, tmp_path, capsys):
    clips = [u.audio_filepath for u in read_manifest(tiny_corpus["val"])[:3]]
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "b" / "deeper").mkdir(parents=True)
    outside.mkdir()
    shutil.copy(clips[0], tree / "b" / "deeper" / "one.FLAC")
    shutil.copy(clips[1], tree / "a.flac")
    shutil.copy(clips[2], outside / "two.flac")
    (tree / "a.txt").write_text("a transcript, not audio")
    # A linked folder is followed, and a link back up does not loop.
    (tree / "linked").symlink_to(outside)
    (tree / "b" / "deeper" / "up").symlink_to(tree / "b")
    assert main(["transcribe", "--checkpoint", str(checkpoint), "--json", str(tree)]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["audio_filepath"] for r in results] == [
        str(tree / "a.flac"), str(tree / "b" / "deeper" / "one.FLAC"),
        str(tree / "linked" / "two.flac")]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["transcribe", "--checkpoint", str(checkpoint), str(empty)]) == 2
    assert f"{empty}: a folder without audio files" in capsys.readouterr().err


def test_transcribe_refuses_training_settings_by_name(checkpoint, tiny_corpus, capsys):
    clip = read_manifest(tiny_corpus["val"])[0].audio_filepath
    status = main(["transcribe", "--checkpoint", str(checkpoint), "train.epochs=3", clip])
    assert status == 2
    assert "'train.epochs=3': only decode.* can change" in capsys.readouterr().err


def test_a_missing_report_to_compare_with_is_named_before_decoding(checkpoint, tmp_path, capsys):
    status = main(["evaluate", "--checkpoint", str(checkpoint), "--manifest", "absent.jsonl",
                   "--compare", str(tmp_path / "old.jsonl")])
    assert status == 2
    assert "old.jsonl: cannot read" in capsys.readouterr().err


def test_evaluate_prints_the_speakers_with_the_most_errors(checkpoint, tiny_corpus, capsys):
    main(["evaluate", "--checkpoint", str(checkpoint), "--manifest", str(tiny_corpus["val"]),
          "--workers", "0"])
    out = capsys.readouterr().out
    assert "by speaker, most word errors first (3 speakers)" in out
    assert "  word confidence: ROC AUC " in out and "    confidence    words  mean conf  right" in out
    assert all(f"    s{index} " in out for index in range(3))


def test_evaluate_tables_error_rates_by_manifest_fields(checkpoint, tiny_corpus, tmp_path,
                                                       capsys):
    manifest, report = tmp_path / "val.jsonl", tmp_path / "report.jsonl"
    write_manifest(manifest, [dataclasses.replace(u, extra={"band": ("high", "low")[i % 2]})
                              for i, u in enumerate(read_manifest(tiny_corpus["val"]))])
    evaluate = ["evaluate", "--checkpoint", str(checkpoint), "--manifest", str(manifest),
                "--workers", "0", "--group-by", "band", "--group-by", "speaker+band"]
    assert main([*evaluate, "--json", "--report", str(report)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    groups = summary["groups"]
    assert list(groups) == ["band", "speaker+band"]
    assert list(groups["speaker+band"]) == [f"s{s}+{band}" for s in range(3)
                                            for band in ("high", "low")]
    assert all(row["utterances"] == 2 for row in groups["speaker+band"].values())
    # The report keeps each line's fields: its words give each group's rate again.
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    for band in ("high", "low"):
        mine = [line for line in lines if line["extra"] == {"band": band}]
        assert groups["band"][band] == {
            "utterances": 6, "word_errors": sum(line["word_errors"] for line in mine),
            "words": sum(line["reference_words"] for line in mine),
            "wer": pytest.approx(sum(line["word_errors"] for line in mine)
                                 / sum(line["reference_words"] for line in mine)),
            "cer": pytest.approx(sum(line["char_errors"] for line in mine)
                                 / sum(line["reference_chars"] for line in mine))}
    assert main(evaluate) == 0
    out = capsys.readouterr().out
    assert "  by band:\n    band  utterances     words      WER      CER\n    high  " in out
    row = groups["band"]["low"]
    assert (f"    low            6  {row['words']:8d}  {100 * row['wer']:6.2f}%  "
            f"{100 * row['cer']:6.2f}%\n") in out
    assert "  by speaker+band:\n    speaker+band  utterances" in out


def test_a_field_missing_from_a_line_is_named_before_decoding(checkpoint, tiny_corpus, tmp_path,
                                                              capsys, monkeypatch):
    def decode_nothing(*args, **kwargs):
        raise AssertionError("decoding started")

    monkeypatch.setattr("deepspeech.evaluation.evaluate.evaluate_dataset", decode_nothing)
    manifest = tmp_path / "val.jsonl"
    write_manifest(manifest, [dataclasses.replace(u, extra={} if i == 4 else {"gender": "f"})
                              for i, u in enumerate(read_manifest(tiny_corpus["val"]))])
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--manifest", str(manifest),
                 "--workers", "0", "--group-by", "gender"]) == 2
    assert (f"{manifest} line 5: no value for field 'gender' to group by; the line has "
            "speaker beside audio_filepath, text and duration") in capsys.readouterr().err


@pytest.mark.parametrize("field, message", [
    ("duration", "'duration' differs from utterance to utterance; group by a field that "
                 "utterances share"),
    ("age_group+", "an empty field name in 'age_group+'"),
])
def test_group_by_refuses_what_is_no_grouping(field, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["evaluate", "--checkpoint", "c.pt", "--manifest", "m.jsonl",
                                   "--group-by", field])
    assert exit_info.value.code == 2
    assert f"argument --group-by: {message}" in capsys.readouterr().err


def test_transcribe_any_rate_and_channels_with_word_times(checkpoint, tiny_corpus, tmp_path,
                                                          capsys):
    audio, rate = sf.read(tiny_corpus["val"].parent / "val000.flac")
    stereo = tmp_path / "stereo44k.wav"
    resampled = np.interp(np.arange(0, len(audio), rate / 44100), np.arange(len(audio)), audio)
    sf.write(stereo, np.stack([resampled, resampled], axis=1), 44100)
    status = main(["transcribe", "--checkpoint", str(checkpoint), str(stereo),
                   str(tiny_corpus["val"].parent / "val000.flac"), "--json"])
    assert status == 0
    outputs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(outputs) == 2
    for output in outputs:
        assert output["duration"] == pytest.approx(len(audio) / rate, abs=0.01)
        assert [w["word"] for w in output["words"]] == output["text"].split()
        assert all(0 <= w["start"] <= w["end"] <= output["duration"] + 0.05
                   for w in output["words"])


@pytest.mark.parametrize(("rate", "channels", "gain_db", "agreement"), [
    (8000, 1, 0.0, 0.6), (22050, 1, 0.0, 0.95), (44100, 1, 0.0, 0.95), (48000, 1, 0.0, 0.95),
    (16000, 2, 0.0, 0.95), (16000, 1, -30.0, 0.95), (16000, 1, 6.0, 0.95),
], ids=["8k", "22.05k", "44.1k", "48k", "stereo", "quiet", "loud"])
def test_other_rates_channels_and_levels_give_the_same_frames(
        checkpoint, tiny_corpus, tmp_path, rate, channels, gain_db, agreement):
    """The model's frames barely change; 8 kHz loses the band above 4 kHz (here: noise)."""
    recognizer = Recognizer.from_checkpoint(checkpoint, device="cpu")
    original = tiny_corpus["val"].parent / "val002.flac"
    audio = load_audio(original, rate).numpy()
    audio = np.clip(audio * 10 ** (gain_db / 20), -1.0, 1.0)
    variant = tmp_path / "variant.wav"
    sf.write(variant, np.stack([audio] * channels, axis=1), rate, subtype="PCM_16")
    frames = [window_log_probs(recognizer, load_audio(path, 16000), window_s=1e9,
                               overlap_s=0).argmax(1) for path in (original, variant)]
    length = min(len(frames[0]), len(frames[1]))
    assert abs(len(frames[0]) - len(frames[1])) <= 1
    assert (frames[0][:length] == frames[1][:length]).float().mean() >= agreement
    if agreement > 0.9:
        assert (transcribe_file(recognizer, str(variant)).text
                == transcribe_file(recognizer, str(original)).text)


def test_long_files_are_windowed_and_stitched(checkpoint, tiny_corpus):
    recognizer = Recognizer.from_checkpoint(checkpoint, device="cpu")
    audio, rate = sf.read(tiny_corpus["val"].parent / "val001.flac")
    waveform = torch.from_numpy(np.tile(audio, 6).astype(np.float32))
    whole = window_log_probs(recognizer, waveform, window_s=1e9, overlap_s=0)
    windowed = window_log_probs(recognizer, waveform, window_s=2.0, overlap_s=0.6)
    assert abs(whole.shape[0] - windowed.shape[0]) <= 2
    agree = (whole[: windowed.shape[0]].argmax(1) == windowed[: whole.shape[0]].argmax(1))
    assert agree.float().mean() > 0.9
    long_file = tiny_corpus["val"].parent / "long.wav"
    sf.write(long_file, waveform.numpy(), rate)
    assert transcribe_file(recognizer, str(long_file), window_s=2.0, overlap_s=0.6).text


def test_vtln_decodes_the_most_confident_warp_in_transcribe_and_evaluate(
        checkpoint, tiny_corpus, capsys):
    vtln = ["decode.vtln=[0.9,1.1]", "decode.vtln_step=0.1"]
    recognizer = Recognizer.from_checkpoint(checkpoint, vtln, device="cpu")
    clip = tiny_corpus["val"].parent / "val003.flac"
    waveform = load_audio(clip, 16000)
    outputs = {warp: window_log_probs(recognizer, waveform, 1e9, 0, (warp,))
               for warp in (0.9, 1.0, 1.1)}
    assert not torch.equal(outputs[0.9], outputs[1.1])
    scores = {warp: float(transcript_log_likelihood(out[None], torch.tensor([len(out)])))
              for warp, out in outputs.items()}
    best = outputs[max(scores, key=scores.get)]
    expected = recognizer.decode(best[None], torch.tensor([len(best)]))[0]
    assert transcribe_file(recognizer, str(clip)).text == expected
    # a long file: every window keeps one warp's output
    long_audio = torch.cat([waveform, load_audio(tiny_corpus["val"].parent / "val001.flac",
                                                 16000)] * 2)
    singles = [window_log_probs(recognizer, long_audio, 1.0, 0.3, (warp,)) for warp in (0.9, 1.1)]
    chosen = window_log_probs(recognizer, long_audio, 1.0, 0.3, (0.9, 1.1))
    assert chosen.shape == singles[0].shape == singles[1].shape
    from_warp = [(chosen == single).all(1) for single in singles]
    assert (from_warp[0] | from_warp[1]).all()
    # ... and the source changes only between windows, not frame by frame
    sources = [int(second) for first, second in zip(*from_warp, strict=True) if first != second]
    windows = len(range(0, len(long_audio) - 4800, 16000 - 4800))
    assert sum(a != b for a, b in pairwise(sources)) <= windows - 1
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--manifest",
                 str(tiny_corpus["val"]), "--json", "--workers", "0", *vtln]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["utterances"] == 12 and summary["vtln"] == [0.9, 1.1]


def test_info_prints_the_model_card(checkpoint, capsys):
    status = main(["transcribe", "--checkpoint", str(checkpoint), "--info"])
    card = json.loads(capsys.readouterr().out)
    assert status == 0
    assert card == {**json.loads((checkpoint.parent / "model_card.json").read_text()),
                    "decode": card["decode"]}
    assert card["parameters"] > 0 and card["validation"]["cer"] >= 0
    # Every setting that the features need, and none of training's masks.
    assert card["features"]["dynamic_range_db"] == 80 and "spec_augment" not in card["features"]


def test_corrupt_checkpoint_is_a_clear_error(tmp_path, capsys):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"\x80\x02not a checkpoint")
    status = main(["evaluate", "--checkpoint", str(broken), "--manifest", "x.jsonl"])
    assert status == 2
    assert "broken.pt: not a readable checkpoint" in capsys.readouterr().err


def test_a_checkpoint_works_where_its_training_files_are_not(checkpoint, tiny_corpus, tmp_path,
                                                            monkeypatch, capsys):
    state = torch.load(checkpoint, weights_only=True)
    state["config"]["data"]["train_manifest"] = "data/gone/train.jsonl"
    state["config"]["train"]["init_from"] = "runs/gone/pretrain/last.pt"
    moved = tmp_path / "moved.pt"
    torch.save(state, moved)
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--checkpoint", str(moved), "--manifest",
                 str(tiny_corpus["val"]), "--workers", "0"]) == 0
    status = main(["evaluate", "--checkpoint", str(moved), "--manifest", str(tiny_corpus["val"]),
                   "decode.mode=beam", "decode.lm=missing.arpa"])
    assert status == 2
    assert "decode.lm: file not found: missing.arpa" in capsys.readouterr().err

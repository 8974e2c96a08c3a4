"""Kaldi data directories: wav.scp, text, utt2spk and segments, on tiny ones the tests write."""

from __future__ import annotations

import re

import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.data.check import check_manifest
from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare import PREPARERS
from deepspeech.data.prepare.common import SHOWN_PROBLEMS
from deepspeech.data.prepare.kaldi import prepare_kaldi
from deepspeech.data.synth.tones import tone
from deepspeech.errors import DeepSpeechError


def write_kaldi(corpus, wav_scp=None, text=None, utt2spk=None, segments=None):
    """``corpus/data/train`` over three recordings in ``corpus/wav``: WAV, FLAC, Ogg Opus.

    Each table is written as given (lines without the newline), else the default one.
    """
    (corpus / "wav").mkdir(parents=True, exist_ok=True)
    sf.write(corpus / "wav" / "a.wav", tone(0.5, 300), 16000)
    sf.write(corpus / "wav" / "b.flac", tone(1.0, 400, rate=22050), 22050)
    sf.write(corpus / "wav" / "c.ogg", tone(2.0, 500, rate=48000), 48000, format="OGG",
             subtype="OPUS")
    data = corpus / "data" / "train"
    data.mkdir(parents=True, exist_ok=True)
    tables = {
        "wav.scp": wav_scp or ["u1 wav/a.wav", "u2\twav/b.flac", "u3 wav/c.ogg"],
        "text": text or ["u1 HELLO   THERE", "u2\tsecond line", "u3 third"],
        "utt2spk": utt2spk or ["u1 alice", "u2 bob", "u3 alice"],
        "segments": segments,
    }
    for name, lines in tables.items():
        if lines is not None:
            (data / name).write_text("\n".join(lines) + "\n")
    return data


def problems_of(data, output, **options):
    with pytest.raises(DeepSpeechError) as error:
        prepare_kaldi(data.parent.parent, output, dir=str(data), **options)
    assert not output.exists() or not list(output.glob("*.jsonl"))  # nothing written
    return str(error.value)


def test_relative_paths_resolve_against_root_and_speakers_are_kept(tmp_path):
    data = write_kaldi(tmp_path / "corpus")
    result = prepare_kaldi(tmp_path / "corpus", tmp_path / "out", dir=str(data))
    assert list(result.manifests) == ["train"]
    manifest = tmp_path / "out" / "train.jsonl"
    assert '"source/wav/a.wav"' in manifest.read_text()
    utterances = {u.text: u for u in read_manifest(manifest)}
    assert {text: (u.speaker, round(u.duration, 3)) for text, u in utterances.items()} == {
        "HELLO THERE": ("alice", 0.5), "second line": ("bob", 1.0), "third": ("alice", 2.0)}
    assert all(u.offset is None for u in utterances.values())
    assert check_manifest(manifest).ok
    assert "kaldi: 3 utterances" in result.format() and "2 speakers" in result.format()


def test_without_root_relative_paths_resolve_against_the_working_folder(tmp_path, monkeypatch):
    data = write_kaldi(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path / "corpus")
    result = PREPARERS["kaldi"].run(None, tmp_path / "out", dir="data/train", split="all")
    assert list(result.manifests) == ["all"]
    assert (tmp_path / "out" / "source").resolve() == (tmp_path / "corpus").resolve()
    assert check_manifest(tmp_path / "out" / "all.jsonl").ok
    assert not PREPARERS["kaldi"].root_required and PREPARERS["folder"].root_required
    with pytest.raises(DeepSpeechError, match="give the data directory with --dir"):
        prepare_kaldi(None, tmp_path / "out")
    assert data.is_dir()


def test_absolute_paths_and_paths_above_root_need_no_link(tmp_path):
    corpus = tmp_path / "corpus"
    write_kaldi(corpus)
    data = write_kaldi(corpus, wav_scp=[f"u1 {corpus / 'wav' / 'a.wav'}", "u2 ../wav/b.flac",
                                        f"u3 {corpus / 'wav' / 'c.ogg'}"])
    prepare_kaldi(corpus / "data", tmp_path / "out", dir=str(data))
    assert not (tmp_path / "out" / "source").exists()
    utterances = read_manifest(tmp_path / "out" / "train.jsonl")
    assert [u.audio_filepath for u in utterances] == [
        str((corpus / "wav" / name).resolve()) for name in ("a.wav", "b.flac", "c.ogg")]


def test_segments_become_offset_and_duration(tmp_path):
    data = write_kaldi(
        tmp_path / "corpus", wav_scp=["long wav/c.ogg", "short wav/a.wav"],
        text=["s1 first", "s2 second", "s3 rest", "s4 trimmed"],
        utt2spk=["s1 x", "s2 x", "s3 y", "s4 y"],
        # -1: to the end of the recording; 0.2 s past the end is trimmed, as Kaldi does.
        segments=["s1 long 0.0 0.75", "s2 long 0.75 1.5", "s3 long 1.5 -1", "s4 short 0.1 0.7"])
    prepare_kaldi(tmp_path / "corpus", tmp_path / "out", dir=str(data), split="dev")
    utterances = {u.text: u for u in read_manifest(tmp_path / "out" / "dev.jsonl")}
    assert {text: (u.offset, round(u.duration, 6)) for text, u in utterances.items()} == {
        "first": (0.0, 0.75), "second": (0.75, 0.75), "rest": (1.5, 0.5),
        "trimmed": (0.1, 0.4)}
    assert check_manifest(tmp_path / "out" / "dev.jsonl").ok


def test_the_cli_prepares_a_directory(tmp_path, capsys):
    data = write_kaldi(tmp_path / "corpus")
    assert main(["data", "prepare", "kaldi", "--root", str(tmp_path / "corpus"), "--dir",
                 str(data), "-o", str(tmp_path / "out"), "--workers", "2"]) == 0
    assert re.search(r"train +3 utterances", capsys.readouterr().out)


def test_the_cli_takes_a_directory_without_root_as_kaldi_does(tmp_path, capsys, monkeypatch):
    write_kaldi(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path / "corpus")
    assert main(["data", "prepare", "kaldi", "--dir", "data/train", "-o",
                 str(tmp_path / "out")]) == 0
    assert re.search(r"train +3 utterances", capsys.readouterr().out)


@pytest.mark.parametrize("tables, expected", [
    ({"text": ["u1 a", "u2 b", "u3 c", "u9 no audio"], "utt2spk": ["u1 s", "u2 s", "u3 s", "u9 s"]},
     "data/train/text line 4: u9 has no audio (not in wav.scp)"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 wav/b.flac", "u3 wav/c.ogg", "u4 wav/a.wav"],
      "utt2spk": ["u1 s", "u2 s", "u3 s"]},
     "data/train/wav.scp line 4: u4 has no transcript (not in text)"),
    ({"text": ["u1 a", "u2 b", "u3 c", "u1 again"]},
     "data/train/text line 4: u1 again (first at line 1)"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 wav/b.flac", "u2 wav/b.flac", "u3 wav/c.ogg"]},
     "data/train/wav.scp line 3: u2 again (first at line 2)"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 wav/gone.flac", "u3 wav/c.ogg"]},
     "data/train/wav.scp line 2: u2: {corpus}/wav/gone.flac: audio file missing (relative to "
     "{corpus}; --root sets that folder)"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 wav/b.flac", "u3 wav/junk.wav"]},
     "data/train/wav.scp line 3: u3: {corpus}/wav/junk.wav: unreadable audio"),
    ({"text": ["u1 a", "u2", "u3 c"]}, "data/train/text line 2: u2 has no transcript"),
    ({"utt2spk": ["u1 s", "u2 s t", "u3 s"]},
     "data/train/utt2spk line 2: u2: 's t' is not one speaker id"),
    ({"utt2spk": ["u1 s", "u3 s"]}, "data/train/text line 2: u2 has no speaker (not in utt2spk)"),
    ({"utt2spk": ["u1 s", "u2 s", "u3 s", "u7 s"]},
     "data/train/utt2spk line 4: u7 has no transcript (not in text)"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 sox wav/b.flac -t wav - |", "u3 wav/c.ogg"]},
     "data/train/wav.scp line 2: u2: a command ('sox wav/b.flac -t wav - |'), not an audio file"),
    ({"wav_scp": ["u1 wav/a.wav", "u2 wav/b.flac", "u3 data/wav.ark:1234"]},
     "data/train/wav.scp line 3: u3: an archive offset ('data/wav.ark:1234'), not an audio file"),
    ({"segments": ["u1 rec 0 0.4", "u2 rec 0.4 0.9", "u3 rec 0.9 3.0"],
      "wav_scp": ["rec wav/b.flac"]},
     "data/train/segments line 3: u3: 0.9-3 s runs past the end of recording rec (1.000 s, "
     "wav.scp line 1)"),
    ({"segments": ["u1 rec 0 0.4", "u2 rec 0.4", "u3 rec 0.5 0.9"], "wav_scp": ["rec wav/b.flac"]},
     "data/train/segments line 2: u2: expected '<segment> <recording> <start> <end>' (seconds), "
     "got 'u2 rec 0.4'"),
    ({"segments": ["u1 rec 0 0.4", "u2 rec 0.4 zero", "u3 rec 0.5 0.9"],
      "wav_scp": ["rec wav/b.flac"]},
     "data/train/segments line 2: u2: expected '<segment> <recording> <start> <end>'"),
    ({"segments": ["u1 rec 0 0.4", "u2 rec 0.6 0.5", "u3 rec 0.5 0.9"],
      "wav_scp": ["rec wav/b.flac"]},
     "data/train/segments line 2: u2: start 0.6 s and end 0.5 s do not make a segment"),
    ({"segments": ["u1 rec 0 0.4", "u2 other 0.4 0.5", "u3 rec 0.5 0.9"],
      "wav_scp": ["rec wav/b.flac"]},
     "data/train/segments line 2: u2: recording other is not in {corpus}/data/train/wav.scp"),
    ({"segments": ["u1 rec 0 0.4", "u3 rec 0.5 0.9"], "wav_scp": ["rec wav/b.flac"]},
     "data/train/text line 2: u2 has no segment (not in segments)"),
], ids=["text-without-audio", "audio-without-text", "duplicate-text", "duplicate-wav",
        "missing-file", "unreadable-file", "empty-transcript", "two-speakers",
        "no-speaker", "speaker-without-text", "pipe", "ark-offset", "segment-past-end",
        "segment-three-fields", "segment-not-a-number", "segment-backwards",
        "segment-unknown-recording", "text-without-segment"])
def test_bad_input_is_named_by_file_and_line(tmp_path, tables, expected):
    corpus = tmp_path / "corpus"
    data = write_kaldi(corpus, **tables)
    (corpus / "wav" / "junk.wav").write_bytes(b"not audio at all")
    message = problems_of(data, tmp_path / "out")
    assert message.startswith(f"{data}: 1 problem(s), nothing written:\n  ")
    assert expected.format(corpus=corpus) in message


def test_a_transcript_that_is_not_utf8_is_named_by_line(tmp_path):
    data = write_kaldi(tmp_path / "corpus")
    (data / "text").write_bytes(b"u1 a\nu2 caf\xe9\nu3 c\n")
    with pytest.raises(DeepSpeechError, match=r"data/train/text line 2: not UTF-8 text"):
        prepare_kaldi(tmp_path / "corpus", tmp_path / "out", dir=str(data))


def test_every_problem_is_collected_into_one_error(tmp_path):
    count = SHOWN_PROBLEMS + 3
    data = write_kaldi(tmp_path / "corpus",
                       text=["u1 a", "u2 b", "u3 c"] + [f"x{n} lost" for n in range(count)])
    message = problems_of(data, tmp_path / "out")
    assert message.startswith(f"{data}: {count + count} problem(s), nothing written:")
    # Each orphan twice: no audio, no speaker; the first ten shown, then how many more.
    assert message.count("\n  ") == SHOWN_PROBLEMS + 1
    assert message.endswith(f"... and {count + count - SHOWN_PROBLEMS} more")


def test_a_folder_that_is_not_a_data_directory_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeepSpeechError, match=r"empty: not a Kaldi data directory \(wav.scp"):
        prepare_kaldi(tmp_path, tmp_path / "out", dir=str(tmp_path / "empty"))
    with pytest.raises(DeepSpeechError, match="nowhere: Kaldi data directory not found"):
        prepare_kaldi(tmp_path, tmp_path / "out", dir=str(tmp_path / "nowhere"))

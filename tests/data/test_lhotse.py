"""lhotse manifests in and out, on a small corpus the tests write (tones and noise).

The round trip manifest -> lhotse files -> manifest runs without lhotse; that lhotse
itself loads what is exported, and that its own files (cuts, Shar) import, runs where the
``lhotse`` extra is installed and is skipped elsewhere.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import numpy as np
import pytest
import soundfile as sf

from deepspeech.cli import main
from deepspeech.data.lhotse.exporter import export_lhotse
from deepspeech.data.lhotse.importer import import_lhotse
from deepspeech.data.manifest import Utterance, read_manifest, write_manifest
from deepspeech.data.synth.tones import tone
from deepspeech.errors import DeepSpeechError


def lhotse_or_skip():
    return pytest.importorskip("lhotse", reason="lhotse is not installed (pip install "
                               "'deepspeech2[lhotse]'); the round trip without it still runs")


@pytest.fixture
def corpus(tmp_path):
    """``corpus/train.jsonl``: two whole files (mono WAV, stereo FLAC) and two segments of
    an 8 kHz WAV, with speakers and extra fields."""
    root = tmp_path / "corpus"
    (root / "clips").mkdir(parents=True)
    sf.write(root / "clips" / "a.wav", tone(1.0, 300, seed=1), 16000)
    stereo = np.stack([tone(2.0, 400, seed=2), tone(2.0, 500, seed=3)], axis=1)
    sf.write(root / "clips" / "b.flac", stereo, 16000)
    sf.write(root / "clips" / "c.wav", tone(3.0, 600, rate=8000, seed=4), 8000)
    clips = root / "clips"
    utterances = [
        Utterance(str(clips / "a.wav"), "yes no", 1.0, speaker="alice",
                  extra={"language": "en", "emotion": "calm"}),
        Utterance(str(clips / "b.flac"), "up", 2.0, speaker="bob"),
        Utterance(str(clips / "c.wav"), "left", 1.0, offset=0.5, speaker="alice"),
        Utterance(str(clips / "c.wav"), "right", 1.0, offset=1.75, extra={"score": 0.5}),
    ]
    write_manifest(root / "train.jsonl", utterances)
    return root / "train.jsonl"


def jsonl_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def ordered(utterances):
    return sorted(utterances, key=lambda u: (u.audio_filepath, u.offset or 0.0))


def test_export_then_import_gives_the_manifest_back(corpus, tmp_path):
    export_lhotse(corpus, tmp_path / "lhotse")
    original = ordered(read_manifest(corpus))
    from_cuts = import_lhotse([tmp_path / "lhotse" / "cuts.jsonl.gz"], tmp_path / "a")
    assert list(from_cuts.manifests) == ["cuts"]
    assert ordered(read_manifest(tmp_path / "a" / "cuts.jsonl")) == original
    import_lhotse([tmp_path / "lhotse" / "recordings.jsonl.gz",
                   tmp_path / "lhotse" / "supervisions.jsonl.gz"], tmp_path / "b", split="train")
    assert ordered(read_manifest(tmp_path / "b" / "train.jsonl")) == original
    # the extra fields come back as they were, not only as equal dicts
    assert read_manifest(tmp_path / "b" / "train.jsonl")[0].extra == {"language": "en",
                                                                     "emotion": "calm"}


def test_export_takes_rates_and_channels_from_the_headers_with_stable_ids(corpus, tmp_path):
    export_lhotse(corpus, tmp_path / "one")
    recordings = {r["id"]: r for r in jsonl_gz(tmp_path / "one" / "recordings.jsonl.gz")}
    assert set(recordings) == {"clips/a", "clips/b", "clips/c"}
    assert (recordings["clips/b"]["channel_ids"], recordings["clips/b"]["num_samples"]) == (
        [0, 1], 32000)
    assert (recordings["clips/c"]["sampling_rate"], recordings["clips/c"]["duration"]) == (
        8000, 3.0)
    assert recordings["clips/a"]["sources"] == [
        {"type": "file", "channels": [0], "source": str(corpus.parent / "clips" / "a.wav")}]
    supervisions = jsonl_gz(tmp_path / "one" / "supervisions.jsonl.gz")
    assert [s["id"] for s in supervisions] == [
        "clips/a", "clips/b", "clips/c-0000500-0001500", "clips/c-0001750-0002750"]
    assert supervisions[0]["language"] == "en" and supervisions[0]["custom"] == {
        "emotion": "calm"}
    assert supervisions[3]["custom"] == {"score": 0.5} and "speaker" not in supervisions[3]
    cuts = jsonl_gz(tmp_path / "one" / "cuts.jsonl.gz")
    assert [(c["type"], c["start"], c["supervisions"][0]["start"]) for c in cuts] == [
        ("MonoCut", 0.0, 0.0), ("MultiCut", 0.0, 0.0), ("MonoCut", 0.5, 0.0),
        ("MonoCut", 1.75, 0.0)]
    export_lhotse(corpus, tmp_path / "two")
    for name in ("recordings", "supervisions", "cuts"):
        assert ((tmp_path / "one" / f"{name}.jsonl.gz").read_bytes()
                == (tmp_path / "two" / f"{name}.jsonl.gz").read_bytes())


def test_export_keeps_ids_unique_when_two_files_differ_only_in_suffix(tmp_path):
    sf.write(tmp_path / "a.wav", tone(0.5), 16000)
    sf.write(tmp_path / "a.flac", tone(0.5), 16000)
    write_manifest(tmp_path / "m.jsonl", [Utterance(str(tmp_path / "a.wav"), "x", 0.5),
                                          Utterance(str(tmp_path / "a.flac"), "y", 0.5)])
    export_lhotse(tmp_path / "m.jsonl", tmp_path / "out")
    assert [r["id"] for r in jsonl_gz(tmp_path / "out" / "recordings.jsonl.gz")] == [
        "a.wav", "a.flac"]


def test_export_names_the_line_of_missing_audio(corpus, tmp_path):
    lines = corpus.read_text().splitlines()
    lines[1] = lines[1].replace("b.flac", "gone.flac")
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(DeepSpeechError, match=r"train.jsonl line 2: .*gone.flac: audio file "
                                              "missing"):
        export_lhotse(corpus, tmp_path / "out")
    assert not (tmp_path / "out" / "cuts.jsonl.gz").exists()


def recording(key, source, seconds=3.0, rate=16000, channels=(0,), kind="file"):
    return {"id": key, "sources": [{"type": kind, "channels": list(channels), "source": source}],
            "sampling_rate": rate, "num_samples": int(seconds * rate), "duration": seconds,
            "channel_ids": list(channels)}


def cut(key, rec, supervisions, start=0.0, duration=2.0, channel=0, kind="MonoCut"):
    return {"id": key, "start": start, "duration": duration, "channel": channel,
            "supervisions": supervisions, "recording": rec, "type": kind}


def supervision(key, start, duration, text="hello", **fields):
    return {"id": key, "recording_id": "r", "start": start, "duration": duration, "channel": 0,
            "text": text, **fields}


@pytest.fixture
def audio(tmp_path):
    """``tmp_path/wav/r.wav``: 3 s of noise, referred to relatively (from ``tmp_path``)."""
    (tmp_path / "wav").mkdir()
    noise = np.random.default_rng(0).uniform(-0.1, 0.1, 48000).astype(np.float32)
    sf.write(tmp_path / "wav" / "r.wav", noise, 16000)
    return recording("r", "wav/r.wav")


def test_import_places_supervisions_by_cut_start_and_keeps_fields(tmp_path, audio):
    cuts = write_jsonl(tmp_path / "cuts.jsonl", [
        cut("c1", audio, [supervision("s1", 0.25, 1.5, speaker="sp1", language="de",
                                      gender="f", custom={"snr": 20})], start=1.0),
        cut("c2", audio, [supervision("s2", 0.0, 3.0, text="all of it")], duration=3.0),
    ])
    import_lhotse([cuts], tmp_path / "out", root=tmp_path)
    text = (tmp_path / "out" / "cuts.jsonl").read_text()
    assert '"source/wav/r.wav"' in text  # relative, through the output's link to the root
    second, first = read_manifest(tmp_path / "out" / "cuts.jsonl")  # by offset
    assert (first.text, first.offset, first.duration, first.speaker) == (
        "hello", 1.25, 1.5, "sp1")
    assert first.extra == {"snr": 20, "language": "de", "gender": "f"}
    assert first.audio_filepath == str(tmp_path / "out" / "source" / "wav" / "r.wav")
    assert (second.text, second.offset, second.duration) == ("all of it", None, 3.0)


def test_several_supervisions_in_a_cut_are_named_and_nothing_is_written(tmp_path, audio):
    cuts = write_jsonl(tmp_path / "cuts.jsonl", [
        cut("fine", audio, [supervision("s0", 0, 1)]),
        cut("two-speakers", audio, [supervision("s1", 0, 1), supervision("s2", 1, 1)]),
    ])
    with pytest.raises(DeepSpeechError, match=r"cuts.jsonl line 2: cut two-speakers: 2 "
                                              r"supervisions in one cut.*trim_to_supervisions"):
        import_lhotse([cuts], tmp_path / "out", root=tmp_path)
    assert not (tmp_path / "out").exists()  # not even the link to the root


def test_skip_leaves_out_what_cannot_be_imported_naming_each(tmp_path, audio, caplog):
    stereo = recording("st", "wav/r.wav", channels=(0, 1))
    cuts = write_jsonl(tmp_path / "cuts.jsonl", [
        cut("fine", audio, [supervision("s0", 0, 1)]),
        cut("online", recording("u", "https://example.org/u.flac", kind="url"),
            [supervision("s1", 0, 1)]),
        cut("piped", recording("p", "sox a.sph -t wav -", kind="command"),
            [supervision("s2", 0, 1)]),
        cut("left-only", stereo, [supervision("s3", 0, 1)], kind="MonoCut", channel=0),
        {"id": "mixed", "type": "MixedCut", "tracks": []},
        cut("silent", audio, []),
        cut("too-long", audio, [supervision("s4", 2.5, 1.0)], start=0.5),
        cut("in-memory", recording("m", "", kind="memory"), [supervision("s5", 0, 1)]),
        cut("faster", {**audio, "transforms": [{"name": "Speed", "kwargs": {"factor": 1.1}}]},
            [supervision("s6", 0, 1)]),
    ])
    with caplog.at_level("WARNING"):
        result = import_lhotse([cuts], tmp_path / "out", root=tmp_path, bad_input="skip")
    assert result.left_out == 8
    assert [u.text for u in read_manifest(tmp_path / "out" / "cuts.jsonl")] == ["hello"]
    for named in ("line 2: cut online: recording u is at a URL (https://example.org/u.flac)",
                  "line 3: cut piped: recording p comes from a command",
                  "line 4: cut left-only: uses channel(s) 0 of recording st, which has "
                  "channels 0, 1",
                  "line 5: cut mixed: a MixedCut", "line 6: cut silent: no supervision",
                  "line 7: cut too-long: supervision 3.000-4.000 s runs past the end",
                  "line 8: cut in-memory: recording m is held in memory",
                  "line 9: cut faster: recording r has transforms (Speed)"):
        assert named in caplog.text


def test_recordings_and_supervisions_import_one_utterance_per_supervision(tmp_path, audio):
    recordings = write_jsonl(tmp_path / "recordings.jsonl", [audio])
    supervisions = write_jsonl(tmp_path / "supervisions.jsonl", [
        supervision("s1", 0.5, 1.0, text="one"), supervision("s2", 1.5, 1.5, text="two"),
        {**supervision("s3", 0, 1), "recording_id": "nowhere"}])
    with pytest.raises(DeepSpeechError, match="supervisions.jsonl line 3: supervision s3: "
                                              "recording nowhere is not in the recordings"):
        import_lhotse([recordings, supervisions], tmp_path / "out", root=tmp_path)
    supervisions.write_text("\n".join(supervisions.read_text().splitlines()[:2]) + "\n")
    import_lhotse([supervisions, recordings], tmp_path / "out", root=tmp_path)
    assert [(u.text, u.offset, u.duration) for u in
            read_manifest(tmp_path / "out" / "supervisions.jsonl")] == [
        ("one", 0.5, 1.0), ("two", 1.5, 1.5)]


def tar_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_shar_audio_members_are_written_out_as_files(tmp_path):
    shar = tmp_path / "shar"
    shar.mkdir()
    audio = io.BytesIO()
    sf.write(audio, tone(2.0, 440, seed=5), 16000, format="FLAC")
    in_shar = recording("r", "", seconds=2.0, kind="shar")
    cuts = [cut("u1", in_shar, [supervision("u1", 0.5, 1.0, text="in the tar")]),
            cut("u2", in_shar, [supervision("u2", 0.0, 1.0, text="no audio")])]
    with gzip.open(shar / "cuts.000000.jsonl.gz", "wt") as handle:
        handle.writelines(json.dumps(c) + "\n" for c in cuts)
    with tarfile.open(shar / "recording.000000.tar", "w") as tar:
        tar_member(tar, "u1.flac", audio.getvalue())
        tar_member(tar, "u1.json", json.dumps(in_shar).encode())
        tar_member(tar, "u2.nodata", b"")
        tar_member(tar, "u2.nometa", b"")
    with pytest.raises(DeepSpeechError, match=r"cuts.000000.jsonl.gz line 2: cut u2: no audio "
                                              r"in recording.000000.tar"):
        import_lhotse([shar], tmp_path / "out")
    assert not (tmp_path / "out" / "shar").exists()  # nothing extracted before the verdict
    result = import_lhotse([shar], tmp_path / "out", bad_input="skip")
    assert result.left_out == 1
    (utterance,) = read_manifest(tmp_path / "out" / "shar.jsonl")
    assert utterance.audio_filepath == str(tmp_path / "out" / "shar" / "shar" /
                                           "recording.000000" / "u1.flac")
    assert (utterance.text, utterance.offset, utterance.duration) == ("in the tar", 0.5, 1.0)
    assert sf.info(utterance.audio_filepath).frames == 32000


def test_cli_exports_and_imports(corpus, tmp_path, capsys):
    assert main(["data", "export", "lhotse", str(corpus), "-o", str(tmp_path / "lh")]) == 0
    assert "4 supervisions" in capsys.readouterr().out
    assert main(["data", "import", "lhotse", str(tmp_path / "lh" / "cuts.jsonl.gz"), "-o",
                 str(tmp_path / "back"), "--split", "train"]) == 0
    assert ordered(read_manifest(tmp_path / "back" / "train.jsonl")) == ordered(
        read_manifest(corpus))
    write_jsonl(tmp_path / "bad.jsonl", [{"id": "m", "type": "MixedCut", "tracks": []}])
    assert main(["data", "import", "lhotse", str(tmp_path / "bad.jsonl"), "-o",
                 str(tmp_path / "x")]) == 2
    assert "cut m: a MixedCut" in capsys.readouterr().err


def test_lhotse_loads_the_export_and_its_own_files_import(corpus, tmp_path):
    lhotse = lhotse_or_skip()
    from lhotse.qa import validate

    export_lhotse(corpus, tmp_path / "lh")
    cuts = lhotse.CutSet.from_file(tmp_path / "lh" / "cuts.jsonl.gz").to_eager()
    validate(cuts, read_data=True)
    recordings = lhotse.RecordingSet.from_file(tmp_path / "lh" / "recordings.jsonl.gz")
    supervisions = lhotse.SupervisionSet.from_file(tmp_path / "lh" / "supervisions.jsonl.gz")
    assert len(recordings) == 3 and len(supervisions) == 4
    segment = cuts["clips/c-0000500-0001500"].load_audio()
    samples, _ = sf.read(corpus.parent / "clips" / "c.wav", start=4000, stop=12000)
    np.testing.assert_allclose(segment[0], samples, atol=1e-4)
    # lhotse's own cuts, and its Shar, come back as the same utterances
    trimmed = lhotse.CutSet.from_manifests(recordings=recordings, supervisions=supervisions
                                           ).trim_to_supervisions(keep_overlapping=False)
    trimmed.to_file(tmp_path / "trimmed.jsonl.gz")
    import_lhotse([tmp_path / "trimmed.jsonl.gz"], tmp_path / "back")
    back = read_manifest(tmp_path / "back" / "trimmed.jsonl")
    assert ordered(back) == ordered(read_manifest(corpus))
    (tmp_path / "shar").mkdir()
    trimmed.to_shar(tmp_path / "shar", fields={"recording": "flac"}, shard_size=2)
    import_lhotse([tmp_path / "shar"], tmp_path / "from_shar")
    from_shar = read_manifest(tmp_path / "from_shar" / "shar.jsonl")
    assert sorted(u.text for u in from_shar) == ["left", "right", "up", "yes no"]
    assert all(u.offset is None and sf.info(u.audio_filepath).duration == pytest.approx(
        u.duration) for u in from_shar)

"""Common Voice preparer on a miniature language folder (MP3 clips + TSV splits)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from deepspeech.data.manifest import read_manifest
from deepspeech.data.prepare.commonvoice import download_commonvoice, prepare_commonvoice
from deepspeech.errors import DeepSpeechError

HEADER = "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender"


def test_mp3_clips_and_tsv_splits(tmp_path):
    root = tmp_path / "cv-corpus-1" / "en"
    (root / "clips").mkdir(parents=True)
    rng = np.random.default_rng(0)
    durations = ["clip\tduration[ms]"]
    for split, clients in (("train", ["c1", "c2"]), ("dev", ["c3"]), ("test", ["c4"])):
        rows = [HEADER]
        for client in clients:
            for n in range(2):
                name = f"common_voice_en_{client}_{n}.mp3"
                sf.write(root / "clips" / name, 0.1 * rng.standard_normal(12000), 24000,
                         format="MP3")
                rows.append(f"{client}\t{name}\tid\t\"Hello,  world\" {n}!\t\t2\t0\t\t")
                if client != "c1":  # the rest is probed from the MP3 header
                    durations.append(f"{name}\t500")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (root / "train.tsv").write_text((root / "train.tsv").read_text()
                                    + "c9\tmissing.mp3\tid\tgone\t\t0\t0\t\t\n")
    (root / "clip_durations.tsv").write_text("\n".join(durations) + "\n")

    result = prepare_commonvoice(root, tmp_path / "out")
    assert result.left_out == 1
    train = read_manifest(tmp_path / "out" / "train.jsonl")
    assert len(train) == 4 and {u.speaker for u in train} == {"c1", "c2"}
    assert all(abs(u.duration - 0.5) < 0.01 for u in train)  # header or clip_durations.tsv
    assert train[0].text == '"Hello, world" 0!'  # quotes kept verbatim (QUOTE_NONE)
    assert len(read_manifest(tmp_path / "out" / "test.jsonl")) == 2
    with pytest.raises(DeepSpeechError, match="by hand"):
        download_commonvoice(tmp_path)


def test_broken_rows_are_left_out_by_line_and_bad_bytes_named(tmp_path, caplog):
    root = tmp_path / "en"
    (root / "clips").mkdir(parents=True)
    sf.write(root / "clips" / "a.wav", np.zeros(8000), 16000)
    rows = [HEADER, "c1\ta.wav\tid\tkept\t\t0\t0\t\t", "c1\ta.wav", "c2\ta.wav\tid\t  \t\t0\t0\t\t"]
    (root / "train.tsv").write_text("\n".join(rows) + "\n")
    result = prepare_commonvoice(root, tmp_path / "out", splits=("train",))
    assert [u.text for u in result.splits["train"]] == ["kept"]
    assert "train.tsv line 3: too few tab-separated fields" in caplog.text
    assert "train.tsv line 4: empty sentence" in caplog.text

    body = "".join(f"c1\ta.wav\tid\tsentence {n}\t\t0\t0\t\t\n" for n in range(2000))
    (root / "dev.tsv").write_bytes(f"{HEADER}\n{body}".encode() + b"c1\ta.wav\tid\tcaf\xe9\n")
    with pytest.raises(DeepSpeechError, match=r"dev.tsv line 2002: not UTF-8 text"):
        prepare_commonvoice(root, tmp_path / "out", splits=("dev",))

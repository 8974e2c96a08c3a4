"""``deepspeech transcribe`` with an untrained checkpoint: what it refuses and what it names.

Each bad argument (a file cut off mid-body, a folder without audio, absurd decode
settings) is named, the others are still transcribed, and the exit status says so.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.data.text import Vocabulary
from deepspeech.features import FeatureExtractor
from deepspeech.model import DeepSpeech2
from deepspeech.training.checkpoint import Checkpoint, save_checkpoint

SMALL = ["model.conv.channels=[4]", "model.conv.kernels=[[11,5]]", "model.conv.strides=[[2,2]]",
         "model.rnn.layers=1", "model.rnn.hidden=16", "features.normalize=none"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A randomly initialized model saved as a checkpoint: transcribes (nonsense), fast."""
    config = load_config(None, SMALL, check_files=False)
    vocabulary = Vocabulary.english()
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    torch.manual_seed(0)
    model = DeepSpeech2(config.model, extractor.num_bins, len(vocabulary))
    path = tmp_path_factory.mktemp("model") / "random.pt"
    save_checkpoint(Checkpoint(config=config.to_dict(), vocabulary=vocabulary.to_list(),
                               model=model.state_dict()), path)
    return str(path)


def clip(path, seconds: float = 1.0) -> str:
    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    return str(path)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


# (decode.beam=100000000 is refused the same way, tests/test_config.py; here it would fill
# the memory of a machine where the bound was lost.)
@pytest.mark.parametrize("override, message", [
    ("decode.lm_weight=1.0e308", "decode.lm_weight: must lie in [0, 100], got 1e+308"),
    ("decode.beam_threshold=-5", "decode.beam_threshold: must be at least 0, got -5"),
])
def test_absurd_decode_overrides_are_refused_by_name(checkpoint, tmp_path, capsys, override,
                                                     message):
    audio = clip(tmp_path / "a.wav")
    status = main(["transcribe", "--checkpoint", checkpoint, "decode.mode=beam", override, audio])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert f"{checkpoint} (with overrides): {message}" in captured.err
    assert "Traceback" not in captured.err


def test_an_absurd_decode_config_file_is_refused_by_name(checkpoint, tmp_path, capsys):
    audio = clip(tmp_path / "a.wav")
    decode = tmp_path / "decode.yaml"
    decode.write_text("decode:\n  mode: beam\n  word_bonus: -1.0e9\n")
    status = main(["transcribe", "--checkpoint", checkpoint, "--decode-config", str(decode),
                   audio])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert (f"{checkpoint} (with {decode} and overrides): decode.word_bonus: must lie in "
            "[-100, 100], got -1e+09") in captured.err
    assert "Traceback" not in captured.err


def test_a_file_cut_off_mid_body_is_named_not_transcribed_in_part(checkpoint, tmp_path, capsys):
    good, cut = clip(tmp_path / "good.wav"), clip(tmp_path / "cut.wav", 2.0)
    data = Path(cut).read_bytes()
    Path(cut).write_bytes(data[: len(data) // 2])  # the header still says 2 s
    status = main(["transcribe", "--checkpoint", checkpoint, "--json", cut, good])
    captured = capsys.readouterr()
    assert status == 2
    results = json_lines(captured.out)
    assert [r["audio_filepath"] for r in results] == [cut, good]
    assert results[0] == {"audio_filepath": cut, "error": (
        f"{cut}: cut off: header declares 2.000 s but the file holds 0.999 s (an interrupted "
        "copy or download?)")}
    assert "text" in results[1] and results[1]["duration"] == 1.0
    assert f"deepspeech transcribe: error: {cut}: cut off" in captured.err
    assert "1 of 2 files could not be transcribed" in captured.err


def test_a_folder_that_gives_no_audio_is_named_and_the_rest_transcribed(checkpoint, tmp_path,
                                                                        capsys):
    empty, recordings = tmp_path / "notes", tmp_path / "recordings"
    empty.mkdir()
    (empty / "readme.txt").write_text("no audio here")
    recordings.mkdir()
    inside = clip(recordings / "b.wav")
    alone = clip(tmp_path / "a.wav")
    status = main(["transcribe", "--checkpoint", checkpoint, "--json", alone, str(empty),
                   str(recordings)])
    captured = capsys.readouterr()
    assert status == 2
    results = json_lines(captured.out)
    assert [r["audio_filepath"] for r in results] == [alone, str(empty), inside]
    assert "text" in results[0] and "text" in results[2]
    assert results[1]["error"].startswith(f"{empty}: a folder without audio files (names "
                                          "ending in .wav, .flac")
    assert f"deepspeech transcribe: error: {empty}: a folder without audio files" in captured.err
    assert "1 of 3 files could not be transcribed" in captured.err
    # Alone, the empty folder is the same error with the same status, not a crash.
    assert main(["transcribe", "--checkpoint", checkpoint, str(empty)]) == 2
    assert f"{empty}: a folder without audio files" in capsys.readouterr().err


def test_an_unreadable_folder_is_named_and_the_rest_transcribed(checkpoint, tmp_path, capsys,
                                                              monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    clip(locked / "hidden.wav")
    alone = clip(tmp_path / "a.wav")
    # chmod 0 stops no root user (CI's), so the folder's listing fails as it would for one.
    scandir = os.scandir

    def refusing(path="."):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    status = main(["transcribe", "--checkpoint", checkpoint, str(locked), alone])
    captured = capsys.readouterr()
    assert status == 2
    assert f"deepspeech transcribe: error: {locked}: folder not readable (Permission denied)" \
        in captured.err
    assert captured.out.startswith(f"{alone}: ")


@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_json_gives_each_word_and_the_file_a_confidence(checkpoint, tmp_path, capsys, mode):
    if mode == "beam":
        pytest.importorskip("flashlight.lib.text")
    audio = clip(tmp_path / "a.wav", 2.0)
    assert main(["transcribe", "--checkpoint", checkpoint, "--json", f"decode.mode={mode}",
                 audio]) == 0
    (result,) = json_lines(capsys.readouterr().out)
    words = result["words"]
    assert [w["word"] for w in words] == result["text"].split() != []
    assert all(0.0 <= w["confidence"] <= 1.0 for w in words)
    # the file's: that every word is right
    assert 0.0 <= result["confidence"] <= 1.0
    assert result["confidence"] == pytest.approx(math.prod(w["confidence"] for w in words),
                                                 abs=1e-4)
    assert {"audio_filepath", "text", "duration"} <= set(result)  # the fields it had

"""Streaming transcription: streamed text equals offline text (the features: tests/features)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.decoding.greedy import greedy_word_segments
from deepspeech.errors import AudioError, ConfigError
from deepspeech.inference.recognizer import Recognizer
from deepspeech.inference.streaming import StreamingRecognizer, stream_file, stream_waveform

UNIDIRECTIONAL = ["model.conv.channels=[4,4]", "model.conv.kernels=[[11,5],[11,5]]",
                  "model.rnn.layers=2", "model.rnn.hidden=24", "model.rnn.bidirectional=false",
                  "model.rnn.lookahead=2"]


def waveform(seconds: float, rate: int = 16000, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 0.3 * torch.randn(int(seconds * rate), generator=generator)


def test_a_streamed_file_too_short_for_the_features_is_named(tmp_path, random_recognizer):
    clip = tmp_path / "click.wav"
    sf.write(clip, np.zeros(50, dtype=np.float32), 16000)
    with pytest.raises(AudioError, match=rf"{clip}: 50 samples \(3.125 ms\) are too few"):
        stream_file(random_recognizer([*UNIDIRECTIONAL, "features.normalize=global"]),
                    str(clip))


@pytest.mark.parametrize("chunk_ms", [10, 37, 200, 10_000])
def test_streamed_log_probs_and_text_equal_offline(chunk_ms, random_recognizer):
    rec = random_recognizer([*UNIDIRECTIONAL, "features.normalize=global"])
    samples = waveform(1.3)
    features = rec.extractor(samples)
    offline, lengths = rec.log_probs(features[None], torch.tensor([features.shape[1]]))
    partials = []
    result = stream_waveform(rec, samples, chunk_ms, on_chunk=partials.append, warmup=False)
    torch.testing.assert_close(result.log_probs, offline[0], atol=1e-5, rtol=1e-5)
    assert result.transcript.text == rec.decode(offline, lengths)[0]
    # Partial texts only grow: each is a prefix of the final greedy text.
    assert all(result.transcript.text.startswith(c.text) for c in partials)
    assert [c.final for c in partials] == [False] * (len(partials) - 1) + [True]
    latency = result.latency()
    assert latency["chunks"] == len(partials)
    assert 0 < latency["compute_ms_mean"] <= latency["compute_ms_max"]
    assert latency["algorithmic_latency_ms"] == pytest.approx(110.0)


def test_the_streamed_transcript_has_the_offline_words_and_confidences(random_recognizer):
    rec = random_recognizer([*UNIDIRECTIONAL, "features.normalize=global"])
    samples = waveform(1.3)
    features = rec.extractor(samples)
    offline, _ = rec.log_probs(features[None], torch.tensor([features.shape[1]]))
    transcript = stream_waveform(rec, samples, 200, warmup=False).transcript
    segments = greedy_word_segments(offline[0], rec.vocabulary)
    assert len(transcript.words) == len(segments) > 0
    for word, segment in zip(transcript.words, segments, strict=True):
        assert word.word == segment.word
        assert word.confidence == pytest.approx(segment.confidence, abs=1e-4)
    assert transcript.confidence == pytest.approx(math.prod(s.confidence for s in segments),
                                                  abs=1e-4)
    assert all(0.0 <= w["confidence"] <= 1.0 for w in transcript.to_dict()["words"])


def test_output_frames_are_final_after_the_algorithmic_latency(random_recognizer):
    rec = random_recognizer([*UNIDIRECTIONAL, "features.normalize=none"])
    stream = StreamingRecognizer(rec)
    # 5-frame kernels reach 2 frames ahead at the input and 2 * 2 after the first
    # stride-2 layer, lookahead 2 output frames = 4 input frames: 10 hops of 160
    # samples, plus the second half of the 320-sample window.
    assert stream.latency_samples() == 10 * 160 + 160
    assert stream.algorithmic_latency_s() == pytest.approx(0.110)
    samples, received = waveform(1.0), 0
    for size in [1, 50, 161, 333, 1000, 7, 2000]:
        stream.accept(samples[received:received + size])
        received += size
        # Every frame whose audio has arrived is out, and no frame comes early.
        assert stream.frames_out == stream.final_frames_after(received)


def test_vtln_needs_the_whole_utterance(random_recognizer):
    with pytest.raises(ConfigError, match="cannot use decode.vtln"):
        StreamingRecognizer(random_recognizer([*UNIDIRECTIONAL, "features.normalize=none",
                                        "decode.vtln=[0.9,1.1]"]))


def test_cli_streams_json_lines_and_refuses_bidirectional(tmp_path, capsys, random_recognizer,
                                                           save_random_checkpoint):
    rec = random_recognizer([*UNIDIRECTIONAL, "features.normalize=global"])
    checkpoint = str(save_random_checkpoint(rec, tmp_path / "uni.pt"))
    clip = tmp_path / "clip.wav"
    sf.write(clip, waveform(0.9).numpy(), 16000)
    assert main(["transcribe", "--checkpoint", checkpoint, str(clip)]) == 0
    offline_text = capsys.readouterr().out.strip()
    assert main(["transcribe", "--checkpoint", checkpoint, "--stream", "--json",
                 "--chunk-ms", "100", str(clip)]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.strip().splitlines()]
    assert len(lines) == 9
    assert [line["final"] for line in lines] == [False] * 8 + [True]
    assert [line["audio_s"] for line in lines[:3]] == pytest.approx([0.1, 0.2, 0.3])
    assert lines[-1]["text"] == offline_text
    assert lines[-1]["latency"]["chunks"] == 9
    assert "algorithmic latency 110 ms" in captured.err

    bidirectional = random_recognizer(["model.conv.channels=[4]", "model.conv.kernels=[[11,5]]",
                                "model.conv.strides=[[2,2]]", "model.rnn.layers=1",
                                "model.rnn.hidden=8", "features.normalize=none"])
    with pytest.raises(ConfigError, match="unidirectional"):
        StreamingRecognizer(bidirectional)
    checkpoint = str(save_random_checkpoint(bidirectional, tmp_path / "bi.pt"))
    assert main(["transcribe", "--checkpoint", checkpoint, "--stream", str(clip)]) == 2
    assert "needs a unidirectional model" in capsys.readouterr().err


@pytest.mark.slow
def test_trained_model_streams_the_offline_transcript(tiny_corpus, tiny_overrides,
                                                      tmp_path_factory):
    from deepspeech.inference.transcribe import transcribe_file
    from deepspeech.training.trainer import train

    run = tmp_path_factory.mktemp("stream-run")
    train(load_config(None, [*tiny_overrides(tiny_corpus, run), "train.epochs=3",
                             "model.rnn.bidirectional=false", "model.rnn.lookahead=2",
                             "features.normalize=global"]))
    rec = Recognizer.from_checkpoint(run / "best.pt", device="cpu")
    folder = tiny_corpus["val"].parent
    texts = []
    for name in ("val000.flac", "val001.flac", "val002.flac", "val003.flac"):
        audio, rate = sf.read(folder / name, dtype="float32")
        samples = torch.from_numpy(np.ascontiguousarray(audio))
        features = rec.extractor(samples)
        offline, _ = rec.log_probs(features[None], torch.tensor([features.shape[1]]))
        for chunk_ms in (40, 200):
            result = stream_waveform(rec, samples, chunk_ms, warmup=False)
            torch.testing.assert_close(result.log_probs, offline[0], atol=1e-5, rtol=1e-5)
            assert result.transcript.text == transcribe_file(rec, str(folder / name)).text
        texts.append(result.transcript.text)
    assert any(texts)  # the model says something, so equal texts mean something

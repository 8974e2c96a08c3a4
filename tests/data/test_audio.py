"""Audio loading: formats, rates, channels, offsets, and errors that name the file."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from deepspeech.data.audio import load_audio
from deepspeech.data.probe import probe_audio
from deepspeech.errors import AudioError


def sine(rate: int, seconds: float, frequency: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
@pytest.mark.parametrize("suffix", ["wav", "flac"])
def test_any_rate_is_resampled_to_the_model_rate(tmp_path, rate, suffix):
    path = tmp_path / f"a.{suffix}"
    sf.write(path, sine(rate, 1.0), rate)
    samples = load_audio(path, 16000)
    assert samples.dtype == torch.float32
    assert abs(samples.numel() - 16000) <= 1
    spectrum = torch.fft.rfft(samples).abs()
    assert abs(int(spectrum.argmax()) - 440) <= 2  # the tone survives resampling


def test_stereo_is_mixed_down(tmp_path):
    left, right = sine(16000, 0.5, 300), sine(16000, 0.5, 500)
    sf.write(tmp_path / "s.wav", np.stack([left, right], axis=1), 16000)
    samples = load_audio(tmp_path / "s.wav", 16000)
    assert torch.allclose(samples, torch.from_numpy((left + right) / 2), atol=1e-4)


def test_offset_and_duration(tmp_path):
    audio = np.arange(16000, dtype=np.float32) / 16000
    sf.write(tmp_path / "r.wav", audio, 16000, subtype="FLOAT")
    samples = load_audio(tmp_path / "r.wav", 16000, offset=0.25, duration=0.5)
    assert samples.numel() == 8000
    assert samples[0].item() == pytest.approx(0.25)


def test_bad_files_name_themselves(tmp_path):
    with pytest.raises(AudioError, match="missing"):
        load_audio(tmp_path / "none.wav", 16000)
    with pytest.raises(AudioError, match=f"{tmp_path}: a folder, not an audio file"):
        load_audio(tmp_path, 16000)
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF....WAVEnot really")
    with pytest.raises(AudioError, match=r"garbage\.wav: unreadable audio"):
        load_audio(garbage, 16000)
    zero_bytes = tmp_path / "zero.flac"
    zero_bytes.write_bytes(b"")
    with pytest.raises(AudioError, match=r"zero\.flac: empty file \(0 bytes\)"):
        load_audio(zero_bytes, 16000)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, dtype=np.float32), 16000)
    with pytest.raises(AudioError, match=r"empty\.wav: no audio samples"):
        load_audio(empty, 16000)
    nan = tmp_path / "nan.wav"
    sf.write(nan, np.array([0.1, np.nan, 0.2], dtype=np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match="NaN"):
        load_audio(nan, 16000)
    short = tmp_path / "short.wav"
    sf.write(short, sine(16000, 0.1), 16000)
    with pytest.raises(AudioError, match="past the end"):
        load_audio(short, 16000, offset=1.0)


@pytest.mark.parametrize("fmt, suffix", [("WAV", "wav"), ("NIST", "sph")])
def test_a_file_cut_off_mid_body_is_refused_not_read_in_part(tmp_path, fmt, suffix):
    path = tmp_path / f"cut.{suffix}"
    sf.write(path, sine(16000, 2.0), 16000, format=fmt, subtype="PCM_16")
    assert load_audio(path, 16000).numel() == 32000
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 4])
    with pytest.raises(AudioError, match=rf"cut\.{suffix}: cut off: header declares 2\.000 s "
                                         r"but the file holds 0\.4\d\d s \(an interrupted"):
        load_audio(path, 16000)


def test_data_check_and_loading_tell_a_cut_file_the_same_way(tmp_path):
    path = tmp_path / "cut.wav"
    sf.write(path, sine(16000, 2.0), 16000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 16000])  # 0.5 s missing
    (kind, message), = probe_audio(str(path)).problems
    assert kind == "truncated"
    with pytest.raises(AudioError) as error:
        load_audio(path, 16000)
    assert message in str(error.value)
    path.write_bytes(data[: len(data) - 1000])  # 31 ms: within the tolerance, both accept it
    assert probe_audio(str(path)).usable and load_audio(path, 16000).numel() == 31500

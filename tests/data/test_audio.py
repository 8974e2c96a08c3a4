"""Audio loading: formats, rates, channels, offsets, and errors that name the file; resampling
at any rate, bounded, and bit for bit torchaudio's at the usual rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF
import torchaudio.functional.functional as torchaudio_resampling

from deepspeech.data import audio
from deepspeech.data.audio import load_audio, resample
from deepspeech.data.probe import probe_audio
from deepspeech.errors import AudioError
from deepspeech.inference.live import ChunkResampler


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


USUAL_RATES = [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000]
ODD_RATES = [47999, 7999, 8001, 1001, 10_000_001]


@pytest.mark.parametrize("to_rate", [16000, 8000])
@pytest.mark.parametrize("from_rate", USUAL_RATES)
def test_usual_rates_resample_bit_for_bit_as_torchaudio(from_rate, to_rate):
    # Recorded weights (recipes, quickstart) were trained on torchaudio's samples.
    samples = torch.randn(from_rate // 2, generator=torch.Generator().manual_seed(from_rate))
    assert torch.equal(resample(samples, from_rate, to_rate),
                       AF.resample(samples, from_rate, to_rate))


@pytest.mark.parametrize("from_rate", [*ODD_RATES, *(r for r in USUAL_RATES if r != 16000), 1])
def test_resampling_work_is_bounded_at_any_rate(monkeypatch, from_rate):
    """torchaudio's kernel (phases x taps) grows with the gcd-reduced rates: 47,999 Hz ->
    16 kHz would need 7.7e8 taps (a minute, 13 GB). Count what is built instead."""
    kernel_sizes, evaluations = [], []
    build_kernel = torchaudio_resampling._get_sinc_resample_kernel

    def counted_kernel(orig_freq, new_freq, gcd, *args, **kwargs):
        down, up = orig_freq // gcd, new_freq // gcd
        width = math.ceil(6 * down / (0.99 * min(up, down)))
        kernel_sizes.append(up * (down + 2 * width))
        assert kernel_sizes[-1] <= 1 << 20  # checked before it is built
        return build_kernel(orig_freq, new_freq, gcd, *args, **kwargs)

    sinc = torch.sinc
    monkeypatch.setattr(torchaudio_resampling, "_get_sinc_resample_kernel", counted_kernel)
    monkeypatch.setattr(torch, "sinc", lambda t: evaluations.append(t.numel()) or sinc(t))
    frames = max(3, from_rate // 10)
    out = resample(torch.zeros(frames), from_rate, 16000)
    assert out.numel() == -(-frames * 16000 // from_rate)
    # The other path: at most 2^20 taps for the output phases (once per pair of rates), or
    # about 12 taps per sample of the higher rate (after a decimation far above); in blocks.
    assert sum(evaluations) <= (1 << 20) + 20 * (frames + out.numel())
    assert all(size <= 1 << 17 for size in evaluations)


@pytest.mark.parametrize("from_rate", [47999, 8001, 10_000_001])  # the last decimated first
def test_odd_rates_keep_the_exact_pitch(from_rate):
    # Rounding 47,999 Hz to 48 kHz would drift a 440 Hz tone by 0.03 rad in half a second.
    out = resample(torch.from_numpy(sine(from_rate, 0.5)), from_rate, 16000)
    assert out.numel() == 8000
    tone = 0.5 * torch.sin(2 * math.pi * 440 * torch.arange(8000, dtype=torch.float64) / 16000)
    assert (out[100:-100] - tone[100:-100]).abs().max() < 5e-4


@pytest.mark.parametrize(("from_rate", "to_rate"), [(44100, 16000), (8000, 16000),
                                                     (16000, 11025)])
def test_the_per_output_path_computes_torchaudios_filter(from_rate, to_rate):
    samples = torch.randn(from_rate // 4, generator=torch.Generator().manual_seed(1))
    whole = AF.resample(samples, from_rate, to_rate)
    span = audio.resample_span(samples, from_rate, to_rate, 0, whole.numel())
    # torchaudio computes its kernel in float32, this path in float64.
    torch.testing.assert_close(span, whole, atol=3e-4, rtol=0)


@pytest.mark.parametrize("from_rate", [47999, 8001, 44100])
def test_a_stream_resampled_chunk_by_chunk_is_the_whole_file_resampled(from_rate):
    generator = torch.Generator().manual_seed(2)
    samples = torch.randn(from_rate * 3 // 5, generator=generator)
    cuts = torch.randint(0, samples.numel(), (60,), generator=generator).sort().values
    resampler = ChunkResampler(from_rate, 16000)
    # Frames of any length, empty ones too.
    pieces = [resampler.accept(frame) for frame in samples.tensor_split(cuts)]
    pieces.append(resampler.accept(torch.zeros(0), final=True))
    torch.testing.assert_close(torch.cat(pieces), resample(samples, from_rate, 16000),
                               atol=1e-5, rtol=0)
    assert resampler._buffer.numel() < from_rate // 10  # it keeps only the filter's reach


def test_a_sample_rate_must_be_positive():
    with pytest.raises(ValueError, match="sample rates must be positive, not 0 -> 16000 Hz"):
        resample(torch.zeros(4), 0, 16000)


def test_a_missing_file_is_named_missing_from_its_header_too(tmp_path):
    with pytest.raises(AudioError, match=r"gone\.wav: audio file missing$"):
        audio.audio_info(tmp_path / "gone.wav")

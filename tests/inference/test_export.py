"""Export: exported files reproduce the model on new lengths; the sidecar rebuilds the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchaudio

from deepspeech.cli import main
from deepspeech.config import load_config
from deepspeech.data.text import Vocabulary
from deepspeech.features import FeatureExtractor
from deepspeech.inference.export import (
    ExportError,
    export_model,
    run_exported,
    sidecar_path,
)
from deepspeech.inference.recognizer import Recognizer
from deepspeech.model import DeepSpeech2
from deepspeech.training.checkpoint import Checkpoint, save_checkpoint

SMALL = ["model.conv.channels=[4,4]", "model.conv.kernels=[[11,5],[11,5]]", "model.rnn.hidden=24"]
VARIANTS = {
    "gru-bi": ["model.rnn.layers=2"],
    "lstm-bi-fc": ["model.rnn.layers=2", "model.rnn.kind=lstm", "model.fc_hidden=16"],
    "gru-lookahead": ["model.rnn.layers=2", "model.rnn.bidirectional=false",
                      "model.rnn.lookahead=3"],
    "lstm-uni-nobn": ["model.rnn.layers=1", "model.rnn.kind=lstm", "model.rnn.batch_norm=false",
                      "model.rnn.bidirectional=false", "model.conv.strides=[[2,3],[2,1]]"],
}
TOL = {"atol": 1e-4, "rtol": 1e-4}


def recognizer(extra: list[str], normalize: str = "global") -> Recognizer:
    """A randomly initialized model (non-trivial batch-norm statistics), no training."""
    config = load_config(None, [*SMALL, *extra, f"features.normalize={normalize}"],
                         check_files=False)
    vocabulary = Vocabulary.english()
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    if normalize == "global":
        extractor.compute_stats([torch.randn(16000, generator=torch.Generator().manual_seed(1))])
    torch.manual_seed(0)
    model = DeepSpeech2(config.model, extractor.num_bins, len(vocabulary))
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return Recognizer(config, vocabulary, extractor, model, torch.device("cpu"))


def padded(num_bins: int, lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(len(lengths), num_bins, max(lengths), generator=generator)
    for i, n in enumerate(lengths):
        features[i, :, n:] = 1e3  # garbage in the padding must not matter
    return features, torch.tensor(lengths)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("variant", ["gru-bi", "gru-lookahead"])
def test_exported_model_reproduces_pytorch_on_new_lengths(fmt, variant, tmp_path):
    if fmt == "onnx":
        pytest.importorskip("onnx")
        pytest.importorskip("onnxruntime")
    rec = recognizer(VARIANTS[variant])
    path = tmp_path / ("model.onnx" if fmt == "onnx" else "model.pt")
    result = export_model(rec, path, fmt)
    assert path.is_file() and result.sidecar == sidecar_path(path)
    assert len(result.max_abs_diff) == 2 and result.worst <= 1e-4
    # Lengths and batch sizes the trace never saw, padded and not.
    for lengths in ([300], [51, 177], [5, 5, 5]):
        features, lengths_t = padded(rec.model.num_bins, lengths, seed=len(lengths))
        with torch.no_grad():
            expected, expected_lengths = rec.model(features, lengths_t)
        got, got_lengths = run_exported(path, fmt, features, lengths_t)
        assert torch.equal(got_lengths.long(), expected_lengths)
        torch.testing.assert_close(got, expected, **TOL)
    if fmt == "onnx":
        import onnx

        graph = onnx.load(str(path))
        assert graph.opset_import[0].version >= 17
        dims = [d.dim_param for d in graph.graph.input[0].type.tensor_type.shape.dim]
        assert dims[0] == "batch" and dims[2] == "frames"


def test_sidecar_rebuilds_the_front_end(tmp_path):
    rec = recognizer(VARIANTS["gru-lookahead"])
    result = export_model(rec, tmp_path / "model.pt", "torchscript", verify=False)
    info = json.loads(result.sidecar.read_text())
    assert info["vocabulary"]["blank"] == 0
    assert "".join(info["vocabulary"]["characters"]) == "".join(rec.vocabulary.characters)
    front = info["features"]
    assert (front["sample_rate"], front["n_fft"], front["hop_length"]) == (16000, 320, 160)
    assert front["bins"] == rec.model.num_bins and front["normalize"] == "global"
    # The sidecar alone rebuilds features equal to the extractor's.
    waveform = torch.randn(8000, generator=torch.Generator().manual_seed(3))
    spectrum = torch.stft(waveform, front["n_fft"], front["hop_length"], front["win_length"],
                          torch.hann_window(front["win_length"]), center=front["center"],
                          pad_mode=front["pad_mode"], return_complex=True).abs()
    mean, std = torch.tensor(front["mean"]), torch.tensor(front["std"])
    rebuilt = (torch.log1p(spectrum) - mean[:, None]) / (std[:, None] + front["epsilon"])
    torch.testing.assert_close(rebuilt, rec.extractor(waveform))
    assert info["time_stride"] == 2 and info["output_frame_seconds"] == pytest.approx(0.02)


def test_sidecar_describes_the_floored_log(tmp_path):
    for kind, per_decade in (("linear", 20), ("mel", 10)):
        rec = recognizer(["model.rnn.layers=1", "features.dynamic_range_db=60",
                          f"features.kind={kind}", "features.n_mels=20"], normalize="none")
        info = json.loads(export_model(rec, tmp_path / f"{kind}.pt", "torchscript",
                                       verify=False).sidecar.read_text())
        front = info["features"]
        assert (front["compression"], front["floor_db_below_peak"]) == ("log", 60)
        waveform = torch.randn(8000, generator=torch.Generator().manual_seed(3))
        spectrum = torch.stft(waveform, front["n_fft"], front["hop_length"], front["win_length"],
                              torch.hann_window(front["win_length"]), center=True,
                              pad_mode="reflect", return_complex=True).abs()
        if kind == "mel":
            spectrum = torchaudio.transforms.MelScale(
                20, front["sample_rate"], n_stft=front["n_fft"] // 2 + 1)(spectrum.pow(2))
        assert f"/ {per_decade}" in front["floor_formula"]
        floor = spectrum.max() * 10 ** (-60 / per_decade)
        torch.testing.assert_close(torch.log(spectrum.clamp_min(floor)), rec.extractor(waveform))


def test_sidecar_describes_vtln_well_enough_to_rebuild_the_warp(tmp_path):
    rec = recognizer(["model.rnn.layers=1", "features.dynamic_range_db=60", "features.kind=mel",
                      "features.n_mels=20", "decode.vtln=[0.9,1.1]", "decode.vtln_step=0.1"],
                     normalize="none")
    info = json.loads(export_model(rec, tmp_path / "m.pt", "torchscript",
                                   verify=False).sidecar.read_text())
    vtln, front = info["vtln"], info["features"]
    assert vtln["warps"] == [0.9, 1.0, 1.1]
    waveform = torch.randn(8000, generator=torch.Generator().manual_seed(3))
    spectrum = torch.stft(waveform, front["n_fft"], front["hop_length"], front["win_length"],
                          torch.hann_window(front["win_length"]), center=True,
                          pad_mode="reflect", return_complex=True).abs()
    top = spectrum.shape[0] - 1
    mel = torchaudio.transforms.MelScale(20, front["sample_rate"], n_stft=top + 1)
    for warp in vtln["warps"]:
        bend = vtln["bend_fraction"] * top * min(warp, 1.0)
        source = torch.from_numpy(np.interp(np.arange(top + 1), [0, bend, top],
                                            [0, bend / warp, top])).float()
        low = source.floor().long().clamp(0, top - 1)
        fraction = (source - low)[:, None]
        warped = (1 - fraction) * spectrum[low] + fraction * spectrum[(low + 1).clamp_max(top)]
        power = mel(warped.pow(2))
        rebuilt = torch.log(power.clamp_min(power.max() * 10 ** (-60 / 10)))
        torch.testing.assert_close(rebuilt, rec.extractor.log_spectrogram(waveform, warp=warp))
    without = recognizer(["model.rnn.layers=1"])
    assert json.loads(export_model(without, tmp_path / "n.pt", "torchscript",
                                   verify=False).sidecar.read_text())["vtln"] is None


def test_export_cli_writes_and_checks_both_formats(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    rec = recognizer(VARIANTS["gru-bi"], normalize="none")
    checkpoint = tmp_path / "best.pt"
    save_checkpoint(Checkpoint(config=rec.config.to_dict(), vocabulary=rec.vocabulary.characters,
                               model=rec.model.state_dict()), checkpoint)
    for output in ("model.onnx", "model.pt"):
        assert main(["export", "--checkpoint", str(checkpoint), "-o", str(tmp_path / output),
                     "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["format"] == ("onnx" if output.endswith("onnx") else "torchscript")
        assert max(summary["max_abs_diff"].values()) <= 1e-4
        assert (tmp_path / f"{output}.json").is_file()
    assert main(["export", "--checkpoint", str(checkpoint), "-o", str(tmp_path / "m.bin")]) == 2
    assert "--format" in capsys.readouterr().err


def test_an_opset_the_exporter_cannot_write_is_named_and_leaves_no_file(tmp_path):
    output = tmp_path / "model.onnx"
    with pytest.raises(ExportError, match="ONNX opset 99 is newer than this torch's exporter "
                                          "writes"):
        export_model(recognizer(VARIANTS["gru-bi"]), output, "onnx", opset=99)
    assert not output.exists()
    with pytest.raises(ExportError, match="ONNX opset 16 is too old"):
        export_model(recognizer(VARIANTS["gru-bi"]), output, "onnx", opset=16)
    # TorchScript has no opset: the flag does not matter there.
    export_model(recognizer(VARIANTS["gru-bi"]), tmp_path / "model.pt", "torchscript", opset=5)

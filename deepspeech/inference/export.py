"""Exporting the acoustic model to TorchScript or ONNX, with what a deployment needs beside it.

The exported graph maps features ``[B, bins, T]`` (float32) and their lengths
``[B]`` (int64) to log-probabilities ``[B, T', classes]`` and output lengths
``[B]``, with dynamic batch and time. The front end (STFT, log, normalization)
and the decoder stay outside; a JSON sidecar (``<model file>.json``) holds the
vocabulary, the feature settings and the normalization statistics to rebuild
them.

The graph is traced from ``TraceableDeepSpeech2`` (``deepspeech.model.traceable``),
the model's eval-mode forward in fixed-shape operations, so that padded batches
give the offline outputs too; ``verify_export`` checks it on the exported file.
The ONNX file is written by the TorchScript-based exporter (``dynamo=False``):
in torch 2.11 the dynamo exporter fixes the time axis to the example's length.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from deepspeech.config import DecodeConfig, FeaturesConfig
from deepspeech.decoding.vtln import warp_factors
from deepspeech.errors import DeepSpeechError
from deepspeech.features import EPSILON, VTLP_BEND
from deepspeech.inference.recognizer import Recognizer
from deepspeech.model import DeepSpeech2
from deepspeech.model.layers import time_mask, time_stride
from deepspeech.model.traceable import TraceableDeepSpeech2

log = logging.getLogger(__name__)

FORMATS = ("torchscript", "onnx")
OPSET = 17
INPUTS = ("features", "lengths")
OUTPUTS = ("log_probs", "output_lengths")
TOLERANCE = 1e-4


class ExportError(DeepSpeechError):
    """The model cannot be exported or the exported file does not reproduce it."""


@dataclass
class ExportResult:
    """The files written and how closely the exported model reproduces PyTorch."""

    path: Path
    sidecar: Path
    format: str
    max_abs_diff: dict[str, float]

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values(), default=0.0)


def _example(num_bins: int, lengths: list[int], seed: int) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(len(lengths), num_bins, max(lengths), generator=generator)
    lengths_t = torch.tensor(lengths, dtype=torch.int64)
    features = features.masked_fill(~time_mask(lengths_t, max(lengths))[:, None, :], 0.0)
    return features, lengths_t


def export_model(recognizer: Recognizer, output: str | Path, format: str = "onnx",
                 opset: int = OPSET, verify: bool = True) -> ExportResult:
    """Write the acoustic model (and its JSON sidecar); check it on new lengths."""
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    if format == "onnx" and opset < 17:
        raise ExportError(f"ONNX opset {opset} is too old; use 17 or newer")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    model = recognizer.model.cpu().eval()
    wrapper = TraceableDeepSpeech2(model)
    # A padded batch of two, so that the traced graph holds the masking paths.
    example = _example(model.num_bins, [64, 41], seed=0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        # torch 2.11 deprecates TorchScript in favour of torch.export; it still works.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        if format == "torchscript":
            traced = torch.jit.trace(wrapper, example, check_trace=False)
            traced.save(str(output))
        else:
            _onnx_export(wrapper, example, output, opset)
    sidecar = write_sidecar(recognizer, output, format, opset if format == "onnx" else None)
    diffs = verify_export(model, output, format) if verify else {}
    if verify and not all(d <= TOLERANCE for d in diffs.values()):
        raise ExportError(f"{output}: the exported model differs from PyTorch by up to "
                          f"{max(diffs.values()):.3g} (tolerance {TOLERANCE:g}): {diffs}")
    log.info("wrote %s (%s) and %s", output, format, sidecar)
    return ExportResult(output, sidecar, format, diffs)


def _onnx_export(wrapper: nn.Module, example: tuple[Tensor, Tensor], output: Path,
                 opset: int) -> None:
    try:
        import onnx  # noqa: F401  (the exporter needs it to write the file)
    except ImportError:
        raise ExportError("ONNX export needs the onnx package: pip install onnx onnxruntime") \
            from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)  # GRU batch-size warning
        try:
            torch.onnx.export(
                wrapper, example, str(output), dynamo=False, opset_version=opset,
                input_names=list(INPUTS), output_names=list(OUTPUTS),
                dynamic_axes={"features": {0: "batch", 2: "frames"}, "lengths": {0: "batch"},
                              "log_probs": {0: "batch", 1: "output_frames"},
                              "output_lengths": {0: "batch"}},
            )
        except RuntimeError as exc:
            if "Unsupported onnx_opset_version" not in str(exc):
                raise
            raise ExportError(f"ONNX opset {opset} is newer than this torch's exporter writes "
                              f"({exc}); use 17, the default") from None


def run_exported(path: str | Path, format: str, features: Tensor,
                 lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Run an exported file (TorchScript, or ONNX through onnxruntime) on one batch."""
    if format == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
        with torch.no_grad():
            return module(features, lengths)
    try:
        import onnxruntime
    except ImportError:
        raise ExportError("checking an ONNX export needs onnxruntime: pip install onnxruntime") \
            from None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    log_probs, out_lengths = session.run(list(OUTPUTS), {"features": features.numpy(),
                                                          "lengths": lengths.numpy()})
    return torch.from_numpy(log_probs), torch.from_numpy(out_lengths)


def verify_export(model: DeepSpeech2, path: str | Path, format: str) -> dict[str, float]:
    """Max abs difference from ``model.forward`` on lengths and batch sizes not traced."""
    cases = {"batch 1, 123 frames": [123], "batch 3, 211/150/37 frames": [211, 150, 37]}
    diffs = {}
    for seed, (name, lengths) in enumerate(cases.items(), start=1):
        features, lengths_t = _example(model.num_bins, lengths, seed)
        with torch.no_grad():
            expected, expected_lengths = model(features, lengths_t)
        got, got_lengths = run_exported(path, format, features, lengths_t)
        if got.shape != expected.shape or not torch.equal(got_lengths.long(), expected_lengths):
            raise ExportError(f"{path}: {name}: shapes {tuple(got.shape)} / lengths "
                              f"{got_lengths.tolist()}, expected {tuple(expected.shape)} / "
                              f"{expected_lengths.tolist()}")
        diffs[name] = float((got - expected).abs().max())
    return diffs


def _compression(features: FeaturesConfig) -> dict[str, Any]:
    """How the sidecar's reader turns the (mel) spectrum into log features."""
    floor_db = features.dynamic_range_db
    if not floor_db:
        return {"compression": "log1p", "floor_db_below_peak": None, "floor_formula": None}
    per_decade = 10 if features.kind == "mel" else 20  # power (mel) or magnitude (linear)
    return {"compression": "log", "floor_db_below_peak": floor_db,
            "floor_formula": f"log(max(x, peak * 10 ** (-{floor_db} / {per_decade}))), "
                             "peak = the utterance's largest x"}


def _vtln(decode: DecodeConfig) -> dict[str, Any] | None:
    """What a deployment must repeat to get ``decode.vtln``'s accuracy from the bare model."""
    if not decode.vtln_enabled:
        return None
    return {
        "warps": warp_factors(decode),
        "bend_fraction": VTLP_BEND,
        "warp_formula": "on the STFT magnitude [bins, frames], before the mel filters: output "
                        "bin k takes source position s = interp(k, [0, bend, top], [0, bend / "
                        "warp, top]), top = bins - 1, bend = bend_fraction * top * min(warp, 1),"
                        " interpolating linearly between bins floor(s) and floor(s) + 1",
        "choice": "run the model once per warp; keep the output whose greedy transcript has "
                  "the highest CTC log-likelihood divided by output_lengths",
    }


def sidecar_path(output: str | Path) -> Path:
    """Where the sidecar of an exported model goes: ``model.onnx`` -> ``model.onnx.json``."""
    return Path(f"{output}.json")


def write_sidecar(recognizer: Recognizer, output: str | Path, format: str,
                  opset: int | None = None) -> Path:
    """Vocabulary, front end and I/O description that a deployment needs beside the model."""
    config = recognizer.config
    extractor = recognizer.extractor
    stats = extractor.stats if config.features.normalize == "global" else None
    info = {
        "format": format,
        "opset": opset,
        "torch": torch.__version__,
        "config_digest": config.digest(),
        **{key: recognizer.card[key] for key in ("step", "epoch") if key in
           recognizer.card},
        "inputs": {"features": "float32 [batch, bins, frames]",
                   "lengths": "int64 [batch], valid frames per utterance"},
        "outputs": {"log_probs": "float32 [batch, output_frames, classes], zero past each "
                                 "length",
                    "output_lengths": "int64 [batch]"},
        "vocabulary": {"blank": 0, "characters": list(recognizer.vocabulary.characters),
                       "note": "output column i > 0 is characters[i - 1]"},
        "features": {
            "sample_rate": extractor.sample_rate, "kind": config.features.kind,
            "bins": extractor.num_bins, "window": "hann", "win_length": extractor.win_length,
            "hop_length": extractor.hop_length, "n_fft": extractor.n_fft,
            "center": True, "pad_mode": "reflect", "magnitude": "abs",
            "mel": ({"n_mels": config.features.n_mels, "power": 2,
                     "filterbank": "torchaudio MelScale (htk, no norm)"}
                    if config.features.kind == "mel" else None),
            **_compression(config.features),
            "normalize": config.features.normalize,
            "epsilon": EPSILON,
            "normalize_formula": "(x - mean) / (std + epsilon) per bin; utterance: mean and "
                                 "population std over the utterance's frames",
            "mean": stats.mean.tolist() if stats is not None else None,
            "std": stats.std.tolist() if stats is not None else None,
        },
        "time_stride": time_stride(config.model.conv),
        "output_frame_seconds": recognizer.frame_seconds(),
        "model": config.to_dict()["model"],
        "decode": config.to_dict()["decode"],
        "vtln": _vtln(config.decode),
    }
    path = sidecar_path(output)
    path.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path

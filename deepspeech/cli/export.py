"""``deepspeech export``: the acoustic model as TorchScript or ONNX, checked against PyTorch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deepspeech.arguments import output_file
from deepspeech.errors import ConfigError


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = Path(args.output).suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".pt", ".ts", ".torchscript"):
        return "torchscript"
    raise ConfigError(f"--format not given and {args.output} does not tell (use .onnx or .pt)")


def _export(args: argparse.Namespace) -> int:
    from deepspeech.inference.export import TOLERANCE, export_model
    from deepspeech.inference.recognizer import Recognizer

    recognizer = Recognizer.from_checkpoint(args.checkpoint, device="cpu")
    result = export_model(recognizer, args.output, _format(args), opset=args.opset,
                          verify=not args.no_verify)
    if args.json:
        print(json.dumps({"model": str(result.path), "sidecar": str(result.sidecar),
                          "format": result.format, "max_abs_diff": result.max_abs_diff}))
        return 0
    print(f"wrote {result.path} ({result.format}) and {result.sidecar}")
    for case, diff in result.max_abs_diff.items():
        print(f"  {case}: max abs diff from PyTorch {diff:.3g} (tolerance {TOLERANCE:g})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export``."""
    parser = subparsers.add_parser(
        "export", help="export the acoustic model to TorchScript or ONNX",
        description="Export features + lengths -> log-probs + output lengths (dynamic batch "
                    "and time), write a JSON sidecar (<output>.json) with the vocabulary and "
                    "feature settings, and check the file against PyTorch on new lengths.")
    parser.add_argument("--checkpoint", required=True, help="checkpoint (best.pt, last.pt)")
    parser.add_argument("-o", "--output", required=True, type=output_file,
                        help="model.onnx or model.pt")
    parser.add_argument("--format", choices=["torchscript", "onnx"],
                        help="default: from the output's extension")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (17 or newer)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip running the exported file against PyTorch")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_export)

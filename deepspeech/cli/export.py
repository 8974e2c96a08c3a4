"""``deepspeech export``: the acoustic model as TorchScript or ONNX, checked against PyTorch,
or the whole model as a package folder (``deepspeech.inference.package``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deepspeech.arguments import output_file
from deepspeech.errors import ConfigError

PACKAGE_ONLY = (("lm", "--lm"), ("decode_config", "--decode-config"), ("license", "--license"))


def _output(text: str) -> str:
    """A file to write, or for a package a folder that does not exist yet."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name (or, with "
                                          "--format package, a folder that does not exist yet)")
    return output_file(text)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = Path(args.output).suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".pt", ".ts", ".torchscript"):
        return "torchscript"
    raise ConfigError(f"--format not given and {args.output} does not tell (use .onnx or .pt, "
                      "or --format package for a folder)")


def _export(args: argparse.Namespace) -> int:
    format = _format(args)
    if format == "package":
        return _package(args)
    for name, flag in PACKAGE_ONLY:
        if getattr(args, name) is not None:
            raise ConfigError(f"{flag}: only --format package takes it")
    from deepspeech.inference.export import TOLERANCE, export_model
    from deepspeech.inference.recognizer import Recognizer

    recognizer = Recognizer.from_checkpoint(args.checkpoint, device="cpu")
    result = export_model(recognizer, args.output, format, opset=args.opset,
                          verify=not args.no_verify)
    if args.json:
        print(json.dumps({"model": str(result.path), "sidecar": str(result.sidecar),
                          "format": result.format, "max_abs_diff": result.max_abs_diff}))
        return 0
    print(f"wrote {result.path} ({result.format}) and {result.sidecar}")
    for case, diff in result.max_abs_diff.items():
        print(f"  {case}: max abs diff from PyTorch {diff:.3g} (tolerance {TOLERANCE:g})")
    return 0


def _package(args: argparse.Namespace) -> int:
    from deepspeech.inference.package import write_package
    from deepspeech.inference.recognizer import Recognizer

    result = write_package(args.checkpoint, args.output, lm=args.lm,
                           decode_file=args.decode_config, license=args.license or "other")
    # What every command will do with it: checksums, weights into the model, decode settings.
    recognizer = Recognizer.from_checkpoint(result.path, device="cpu")
    if args.json:
        print(json.dumps({"package": str(result.path), "format": "package",
                          "files": result.files, "bytes": result.size,
                          "decode_from": result.decode_from,
                          "decode": recognizer.config.to_dict()["decode"]}))
        return 0
    print(f"wrote {result.path} ({result.size / 1e6:.1f} MB), decode settings from "
          f"{result.decode_from} ({recognizer.config.decode.mode}):")
    for name, size in result.files.items():
        print(f"  {name:24} {size:>12,} bytes")
    print(f"use it as any checkpoint: deepspeech transcribe --checkpoint {result.path} a.wav")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export``."""
    parser = subparsers.add_parser(
        "export", help="export the model: TorchScript, ONNX, or a package folder",
        description="torchscript/onnx: export features + lengths -> log-probs + output "
                    "lengths (dynamic batch and time), write a JSON sidecar (<output>.json) "
                    "with the vocabulary and feature settings, and check the file against "
                    "PyTorch on new lengths. package: a folder that any --checkpoint takes, "
                    "moved or copied anywhere: weights in safetensors, config, vocabulary, "
                    "feature statistics, decode settings and LM, model card, checksums; no "
                    "pickle.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint (best.pt, last.pt) or package folder")
    parser.add_argument("-o", "--output", required=True, type=_output,
                        help="model.onnx or model.pt; for a package, a new folder")
    parser.add_argument("--format", choices=["torchscript", "onnx", "package"],
                        help="default: from the output's extension")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (17 or newer)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip running the exported file against PyTorch")
    parser.add_argument("--lm", help="package: ARPA LM to copy in (replaces the decode "
                                     "settings' LM)")
    parser.add_argument("--decode-config", metavar="YAML",
                        help="package: decode settings (deepspeech decode tune -o); default: "
                             "those decode tune recorded in the model card, else the config's")
    parser.add_argument("--license", help="package: the model card's license (default: other)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=_export)

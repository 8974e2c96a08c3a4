"""``deepspeech decode tune``: pick the beam search's LM weight and word bonus on a dev set.

The acoustic model runs once over the dev manifest (length-sorted batches, as in
evaluation); every (lm_weight, word_bonus) pair then re-decodes the stored
log-probs (``deepspeech.evaluation.decoder_tuning``). The best pair is written as a
``decode:`` section (its LM and lexicon relative to the file) that ``--decode-config``
takes, and printed as overrides for ``evaluate`` and ``transcribe``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
from pathlib import Path

import yaml

from deepspeech.arguments import (
    non_negative_float,
    non_negative_int,
    output_file,
    positive_int,
)
from deepspeech.config import DecodeConfig
from deepspeech.errors import ConfigError
from deepspeech.files import atomic_write

log = logging.getLogger(__name__)

DEFAULT_LM_WEIGHTS = "0,0.25,0.5,0.75,1,1.5,2"
DEFAULT_WORD_BONUSES = "-1,0,1,2"


def parse_grid(text: str, flag: str) -> list[float]:
    """``"0,0.5,1"`` -> ``[0.0, 0.5, 1.0]``; errors name the flag."""
    try:
        values = [float(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{flag}: give at least one number")
    if not all(math.isfinite(value) for value in values):
        raise ConfigError(f"{flag}: expected finite numbers, got {text!r}")
    return values


TUNE_OWNS = {"decode.mode": "beam, always", "decode.lm": "--lm", "decode.lexicon": "--lexicon",
             "decode.lm_weight": "--lm-weights", "decode.word_bonus": "--word-bonuses",
             "decode.beam": "--beam", "decode.beam_threshold": "--beam-threshold"}
"""Decode keys that ``decode tune`` sets itself, and what sets them."""


def _refuse_owned_overrides(overrides: list[str]) -> None:
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key in TUNE_OWNS:
            raise ConfigError(f"{override}: decode tune sets {key} itself ({TUNE_OWNS[key]})")


def _tune(args: argparse.Namespace) -> int:
    from deepspeech.evaluation.decoder_tuning import (
        decode_section,
        dev_log_probs,
        relative_paths,
        tune_decoder,
    )
    from deepspeech.inference.package import is_package
    from deepspeech.inference.recognizer import Recognizer
    from deepspeech.training.checkpoint import MODEL_CARD, record_tuned_decoding

    _refuse_owned_overrides(args.overrides)
    lm_weights = parse_grid(args.lm_weights, "--lm-weights")
    word_bonuses = parse_grid(args.word_bonuses, "--word-bonuses")
    for flag, path in (("--lm", args.lm), ("--lexicon", args.lexicon)):
        if path and not Path(path).is_file():
            raise ConfigError(f"{flag}: file not found: {path}")
    recognizer = Recognizer.from_checkpoint(args.checkpoint, args.overrides, args.device)
    base = dataclasses.replace(
        recognizer.config.decode, mode="beam", lm=str(Path(args.lm).resolve()),
        lexicon=str(Path(args.lexicon).resolve()) if args.lexicon else "", beam=args.beam,
        beam_threshold=args.beam_threshold)
    # The grid's corners are checked like a config file before the acoustic pass, not after.
    for lm_weight in (min(lm_weights), max(lm_weights)):
        for word_bonus in (min(word_bonuses), max(word_bonuses)):
            decode_section(base, lm_weight, word_bonus)
    log_probs, lengths, references = dev_log_probs(recognizer, args.manifest, args.batch_size,
                                                   args.workers, args.skip_bad)
    result = tune_decoder(log_probs, lengths, references, recognizer.vocabulary, base,
                          lm_weights, word_bonuses, progress=not args.json)
    section = decode_section(base, result.lm_weight, result.word_bonus)
    overrides = (f"decode.mode=beam decode.lm={section['lm']} decode.lm_weight={result.lm_weight:g}"
                 f" decode.word_bonus={result.word_bonus:g} decode.beam={section['beam']}")
    if section["lexicon"]:
        overrides += f" decode.lexicon={section['lexicon']}"
    if base.vtln_enabled:
        low, high = base.vtln
        overrides += f" decode.vtln=[{low:g},{high:g}] decode.vtln_step={base.vtln_step:g}"
    output = Path(args.output) if args.output else None
    if output is not None:
        header = (f"# deepspeech decode tune: {args.checkpoint} on {args.manifest} "
                  f"({len(references)} utterances)\n"
                  f"# WER {100 * result.best.wer:.2f}% (greedy {100 * result.greedy_wer:.2f}%), "
                  f"CER {100 * result.best.cer:.2f}% (greedy {100 * result.greedy_cer:.2f}%)\n")
        with atomic_write(output, "w", encoding="utf-8") as handle:
            handle.write(header + yaml.safe_dump({"decode": relative_paths(section, output)},
                                                 sort_keys=False))
    # A package's files are checksummed and stay as exported: its tuned settings go to -o
    # (and into a new package with export --decode-config); a checkpoint's card records them.
    package = is_package(args.checkpoint)
    card = Path(args.checkpoint).with_name(MODEL_CARD)
    card_updated = not package and record_tuned_decoding(
        recognizer.card, section, {"manifest": args.manifest, "utterances": len(references),
                                   "wer": result.best.wer, "cer": result.best.cer,
                                   "greedy_wer": result.greedy_wer,
                                   "greedy_cer": result.greedy_cer}, card)
    if args.json:
        print(json.dumps({
            "utterances": len(references), "best": dataclasses.asdict(result.best),
            "greedy_wer": result.greedy_wer, "greedy_cer": result.greedy_cer,
            "table": [dataclasses.asdict(point) for point in result.table],
            "decode": section, "output": str(output) if output else None,
            "model_card": str(card) if card_updated else None}))
        return 0
    print(f"{args.manifest}: {len(references)} utterances, beam {args.beam}")
    print(result.format())
    print(f"best: lm_weight {result.lm_weight:g}, word_bonus {result.word_bonus:g}: "
          f"WER {100 * result.best.wer:.2f}% (greedy {100 * result.greedy_wer:.2f}%)")
    if output is not None:
        print(f"wrote {output}: evaluate and transcribe take it with --decode-config {output}")
    if card_updated:
        print(f"recorded the tuned settings in {card}")
    if package:
        print(f"{args.checkpoint} is a package, left as exported (its files are "
              "checksummed): deepspeech export --format package --checkpoint "
              f"{args.checkpoint} --decode-config {output or 'decode.yaml (-o)'} -o NEW "
              "makes one with these settings")
    print(f"overrides: {overrides}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``decode`` and its sub-commands."""
    parser = subparsers.add_parser("decode", help="decoder tools (tune the beam search)")
    commands = parser.add_subparsers(dest="decode_command", metavar="subcommand", required=True)
    tune = commands.add_parser(
        "tune", help="grid-search the LM weight and word bonus on a dev set",
        description="Run the model once over a dev manifest, decode its log-probs with every "
                    "(lm_weight, word_bonus) pair and keep the pair with the lowest WER "
                    "(CER breaks ties).")
    tune.add_argument("--checkpoint", required=True,
                      help="checkpoint (best.pt, last.pt) or package folder")
    tune.add_argument("--manifest", required=True, help="dev set (JSON Lines manifest)")
    tune.add_argument("--lm", required=True, help="ARPA language model (deepspeech lm build)")
    tune.add_argument("--lexicon", default="", help="lexicon file (default: the LM's words)")
    tune.add_argument("--lm-weights", default=DEFAULT_LM_WEIGHTS, metavar="A,B,...",
                      help=f"LM weights to try (default: {DEFAULT_LM_WEIGHTS})")
    tune.add_argument("--word-bonuses", default=DEFAULT_WORD_BONUSES, metavar="A,B,...",
                      help=f"word bonuses to try (default: {DEFAULT_WORD_BONUSES}); write "
                           "--word-bonuses=-1,0 when the first is negative")
    tune.add_argument("--beam", type=positive_int, default=DecodeConfig.beam,
                      help=f"beam size (default: {DecodeConfig.beam}, decode.beam's)")
    tune.add_argument("--beam-threshold", type=non_negative_float,
                      default=DecodeConfig.beam_threshold,
                      help="prune hypotheses this far below the best (default: "
                           f"{DecodeConfig.beam_threshold:g})")
    tune.add_argument("-o", "--output", type=output_file,
                      help="write the best pair as a decode: YAML section")
    tune.add_argument("overrides", nargs="*", metavar="decode.key=value",
                      help="decode settings for the run, e.g. decode.vtln=[0.75,1.25]")
    tune.add_argument("--batch-size", type=positive_int, default=32)
    tune.add_argument("--workers", type=non_negative_int, default=0, help="data loader workers")
    tune.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    tune.add_argument("--skip-bad", action="store_true",
                      help="skip unusable utterances instead of stopping")
    tune.add_argument("--json", action="store_true", help="print the result as JSON")
    tune.set_defaults(handler=_tune)

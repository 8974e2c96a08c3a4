"""``deepspeech evaluate``: CER/WER of a checkpoint on any manifest, by speaker and by any
other field of the manifest's lines, and how well its word confidences predict its word
errors."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from deepspeech.arguments import non_negative_int, output_file, positive_int
from deepspeech.data.manifest import REQUIRED_FIELDS
from deepspeech.evaluation.groups import FIELD_JOINER, check_group_fields

if TYPE_CHECKING:  # the command line imports torch and the rest only when a command runs
    from deepspeech.evaluation.bootstrap import Comparison
    from deepspeech.evaluation.confidence import ConfidenceSummary


def _evaluate(args: argparse.Namespace) -> int:
    from deepspeech.decoding.vtln import warp_factors
    from deepspeech.evaluation.evaluate import evaluate_dataset, read_report
    from deepspeech.inference.recognizer import Recognizer

    # Read before decoding: a wrong path should not cost a whole evaluation.
    baseline = read_report(args.compare) if args.compare else None
    recognizer = Recognizer.from_checkpoint(args.checkpoint, args.overrides, args.device,
                                            args.decode_config)
    config = recognizer.config
    if args.info:
        print(json.dumps(recognizer.describe(), indent=2, allow_nan=False))
    dataset = recognizer.scored_dataset(args.manifest, args.skip_bad)
    check_group_fields(dataset.utterances, args.group_by, args.manifest)
    result = evaluate_dataset(recognizer.model, dataset, recognizer.vocabulary, args.batch_size,
                              num_workers=args.workers, decode=recognizer.decode_words,
                              warps=warp_factors(config.decode))
    summary = {"checkpoint": str(args.checkpoint), "manifest": str(args.manifest),
               "decode": config.decode.mode, "vtln": config.decode.vtln,
               **result.summary(args.group_by)}
    comparison = result.compare_with(baseline, args.compare) if baseline is not None else None
    if comparison is not None:
        summary["compare"] = {"report": args.compare, **dataclasses.asdict(comparison)}
    report = Path(args.report) if args.report else None
    if report is not None:
        result.write_report(report)
        summary["report"] = str(report)
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        words, chars = result.wer, result.cer
        print(f"{args.manifest}: {result.utterances} utterances, "
              f"{result.audio_seconds / 60:.1f} min of audio, decode={config.decode.mode}"
              + (f", vtln={config.decode.vtln}" if config.decode.vtln_enabled else ""))
        print(f"  WER {100 * words.rate:6.2f}%  (S {words.substitutions}, D {words.deletions}, "
              f"I {words.insertions} / {words.reference_length} words)")
        if "wer_interval" in summary:  # the summary's: the bootstrap runs once
            interval = summary["wer_interval"]
            print(f"       {100 * interval['low']:.2f}-{100 * interval['high']:.2f}% "
                  f"({100 * interval['confidence']:.0f}% bootstrap interval over "
                  f"{result.utterances} utterances)")
        print(f"  CER {100 * chars.rate:6.2f}%  (S {chars.substitutions}, D {chars.deletions}, "
              f"I {chars.insertions} / {chars.reference_length} characters)")
        confidence = result.confidence()
        if confidence is not None:
            _print_confidence(confidence)
        print(f"  real-time factor {result.real_time_factor:.4f} "
              f"({result.elapsed_seconds:.1f} s for {result.audio_seconds:.1f} s of audio)")
        if comparison is not None:
            _print_comparison(comparison, args.compare)
        _print_breakdown(summary["speakers"], summary["substitutions"])
        _print_groups(summary["groups"])
        if report is not None:
            print(f"  per-utterance report: {report}")
    return 0


def _print_confidence(summary: ConfidenceSummary) -> None:
    """The ROC AUC of word confidence for right against wrong words, and the reliability
    table (``deepspeech.evaluation.confidence``)."""
    auc = "n/a (needs right and wrong words)" if summary.auc is None else f"{summary.auc:.3f}"
    print(f"  word confidence: ROC AUC {auc} for right vs wrong words ({summary.wrong} wrong "
          f"of {summary.words}); calibration error {summary.calibration_error:.3f}")
    print("    confidence    words  mean conf  right")
    for row in summary.bins:
        print(f"    {row.low:.1f}-{row.high:.1f}  {row.count:9d}  {row.mean_confidence:9.3f}  "
              f"{row.fraction_correct:5.3f}")


def _print_comparison(comparison: Comparison, source: str) -> None:
    """Paired bootstrap against an earlier report, in points of WER."""
    difference = comparison.difference
    print(f"  against {source} (WER {100 * comparison.wer_a:.2f}%): "
          f"{100 * (comparison.wer_b - comparison.wer_a):+.2f} points here")
    print(f"       {100 * difference.low:+.2f} to {100 * difference.high:+.2f} "
          f"({100 * difference.confidence:.0f}% paired bootstrap interval); fewer word errors "
          f"here in {100 * comparison.probability_b_better:.1f}% of the resamples")


def _print_breakdown(speakers: dict[str, dict], substitutions: list[list],
                     shown: int = 10) -> None:
    """The summary's speakers with the most errors and its most frequent substitutions."""
    if len(speakers) > 1:
        more = f", {len(speakers) - shown} more with --json" if len(speakers) > shown else ""
        print(f"  by speaker, most word errors first ({len(speakers)} speakers{more}):")
        rows = list(speakers.items())[:shown]
        width = max(len(speaker) for speaker, _ in rows)
        for speaker, row in rows:
            utterances = "utterance" if row["utterances"] == 1 else "utterances"
            print(f"    {speaker:<{width}}  WER {100 * row['wer']:6.2f}%  "
                  f"CER {100 * row['cer']:6.2f}%  ({row['word_errors']} of {row['words']} "
                  f"words, {row['utterances']} {utterances})")
    if substitutions:
        print("  most frequent substitutions (reference -> heard):")
        for reference, hypothesis, count in substitutions[:shown]:
            print(f"    {count:5d}  {reference} -> {hypothesis}")


def _print_groups(groups: dict[str, dict[str, dict]]) -> None:
    """One table per ``--group-by``: each value's utterances, words, WER and CER."""
    for grouping, rows in groups.items():
        width = max(len(grouping), *(len(value) for value in rows))
        print(f"  by {grouping}:")
        print(f"    {grouping:<{width}}  utterances     words      WER      CER")
        for value, row in rows.items():
            print(f"    {value:<{width}}  {row['utterances']:10d}  {row['words']:8d}  "
                  f"{100 * row['wer']:6.2f}%  {100 * row['cer']:6.2f}%")


def _group_field(text: str) -> str:
    """A ``--group-by`` value: manifest fields joined by ``+``, none of them one that is each
    utterance's own (its audio, text, length)."""
    names = text.split(FIELD_JOINER)
    if not all(names):
        raise argparse.ArgumentTypeError(f"an empty field name in {text!r}; name fields such "
                                         f"as gender, or join them: age_group{FIELD_JOINER}gender")
    own = [name for name in names if name in (*REQUIRED_FIELDS, "offset")]
    if own:
        raise argparse.ArgumentTypeError(f"{own[0]!r} differs from utterance to utterance; group "
                                         "by a field that utterances share, such as speaker or "
                                         "gender")
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``evaluate``."""
    parser = subparsers.add_parser(
        "evaluate", help="CER/WER of a checkpoint on a manifest",
        description="Decode a manifest with a checkpoint and score it; decode.* overrides "
                    "select the decoder (decode.mode=beam decode.lm=lm.arpa).")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint (best.pt, last.pt) or package folder")
    parser.add_argument("--manifest", required=True, help="JSON Lines manifest to score")
    parser.add_argument("--report", type=output_file,
                        help="write per-utterance results (with each word's confidence and "
                             "whether it was right) to this JSONL file")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--workers", type=non_negative_int, default=1, help="data loader workers")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip unusable utterances instead of stopping")
    parser.add_argument("--compare", metavar="REPORT",
                        help="another model's --report on the same manifest: paired bootstrap "
                             "of the WER difference and how often this checkpoint is better")
    parser.add_argument("--group-by", metavar="FIELD", type=_group_field, action="append",
                        default=[],
                        help="WER and CER for each value of a field of the manifest's lines "
                             "(speaker, gender, age_group...); repeat for one table each, "
                             "join fields with + for one row per combination "
                             "(age_group+gender); every line must have the field")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--info", action="store_true", help="print what the checkpoint holds")
    parser.add_argument("--decode-config", metavar="YAML",
                        help="decode settings from a file's decode section, such as the one "
                             "deepspeech decode tune -o writes; decode.key=value go on top")
    parser.add_argument("overrides", nargs="*", metavar="decode.key=value")
    parser.set_defaults(handler=_evaluate)

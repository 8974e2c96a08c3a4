"""``deepspeech data``: synthesize, prepare, inspect and check corpora."""

from __future__ import annotations

import argparse

from deepspeech.data.manifest import manifest_stats, read_manifest


def _stats(args: argparse.Namespace) -> int:
    for path in args.manifests:
        print(f"== {path}")
        print(manifest_stats(read_manifest(path), bins=args.bins).format())
    return 0


def _snr_range(text: str) -> tuple[float, float]:
    """``"10-30"`` -> (10.0, 30.0); a single number is a fixed SNR."""
    low, sep, high = text.partition("-") if not text.startswith("-") else ("", "", "")
    try:
        return (float(low), float(high)) if sep else (float(text), float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LOW-HIGH in dB, e.g. 10-30, got {text!r}"
        ) from None


def _synth(args: argparse.Namespace) -> int:
    from deepspeech.data.synth.corpus import synthesize_corpus

    summary = synthesize_corpus(
        args.output, hours=args.hours, seed=args.seed, language=args.language,
        audio_format=args.format, noise_snr=None if args.no_noise else args.noise_snr,
        dev_fraction=args.dev_fraction, test_fraction=args.test_fraction, workers=args.workers,
    )
    print(summary.format())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``data`` and its sub-commands."""
    parser = subparsers.add_parser("data", help="synthesize, prepare and inspect corpora")
    commands = parser.add_subparsers(dest="data_command", metavar="subcommand", required=True)

    synth = commands.add_parser(
        "synth", help="offline corpus: generated sentences spoken by espeak-ng",
        description="Speak generated sentences with espeak-ng voice variants and write 16 kHz "
        "audio plus train/dev/test manifests; dev and test use voices never heard in training. "
        "The same seed gives byte-identical files.",
    )
    synth.add_argument("-o", "--output", required=True, help="corpus folder")
    synth.add_argument("--hours", type=float, default=1.0, help="total audio over all splits")
    synth.add_argument("--seed", type=int, default=0, help="fixes text, voices, noise and audio")
    synth.add_argument("--language", choices=("en", "cmn"), default="en",
                       help="en: English letters; cmn: Mandarin, Chinese-character transcripts")
    synth.add_argument("--format", choices=("flac", "wav"), default="flac", help="audio format")
    noise = synth.add_mutually_exclusive_group()
    noise.add_argument("--noise-snr", type=_snr_range, default=(10.0, 30.0), metavar="LOW-HIGH",
                       help="background noise at a random SNR in this dB range (default 10-30)")
    noise.add_argument("--no-noise", action="store_true", help="clean audio")
    synth.add_argument("--dev-fraction", type=float, default=0.1, help="share of the hours")
    synth.add_argument("--test-fraction", type=float, default=0.1, help="share of the hours")
    synth.add_argument("--workers", type=int, default=None,
                       help="espeak processes (default: up to 2); the output does not depend on it")
    synth.set_defaults(handler=_synth)

    stats = commands.add_parser("stats", help="hours, utterances, durations, character set")
    stats.add_argument("manifests", nargs="+", help="JSON Lines manifest(s)")
    stats.add_argument("--bins", type=int, default=10, help="duration histogram bins")
    stats.set_defaults(handler=_stats)

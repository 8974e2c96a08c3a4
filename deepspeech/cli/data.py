"""``deepspeech data``: synthesize, prepare, inspect and check corpora."""

from __future__ import annotations

import argparse

from deepspeech.arguments import (
    finite_float,
    output_folder,
    positive_float,
    positive_int,
)
from deepspeech.cli.data_lhotse import add_commands as _add_lhotse
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


def _engine_names(text: str) -> list[str]:
    """``"espeak, flite"`` -> ["espeak", "flite"]; names are checked by the synthesizer."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _synth(args: argparse.Namespace) -> int:
    from deepspeech.data.synth.synthesize import synthesize_corpus
    from deepspeech.lm.text import iter_raw_text

    sentences = list(dict.fromkeys(line.strip() for line in iter_raw_text(args.text))
                     ) if args.text else []
    if args.text and not sentences:
        raise SystemExit(f"deepspeech data synth: {args.text}: no sentences to speak")
    if sentences and args.language == "en":
        _warn_outside_english(args.text, sentences)
    summary = synthesize_corpus(
        args.output, hours=args.hours, seed=args.seed, language=args.language,
        audio_format=args.format, noise_snr=None if args.no_noise else args.noise_snr,
        dev_fraction=args.dev_fraction, test_fraction=args.test_fraction, workers=args.workers,
        sentences=sentences, engines=args.engines,
    )
    print(summary.format())
    return 0


def _warn_outside_english(path: str, sentences: list[str]) -> None:
    """Said before synthesis, not after: espeak-ng reads "42" aloud as "forty-two", and a
    transcript that keeps "42" (or "é") is refused by training with the English vocabulary."""
    import logging

    from deepspeech.data.text import TextNormalizer, Vocabulary

    normalize, english = TextNormalizer(), Vocabulary.english()
    outside = [(sentence, english.unknown(normalize(sentence))) for sentence in sentences]
    outside = [(sentence, characters) for sentence, characters in outside if characters]
    if outside:
        sentence, characters = outside[0]
        logging.getLogger(__name__).warning(
            "%s: %d of %d sentences hold characters outside the English vocabulary (first: %s "
            "in %r); training with data.vocabulary: english will refuse them: spell numbers "
            "out, or train with data.vocabulary: build", path, len(outside), len(sentences),
            ", ".join(map(repr, characters)), sentence)


def _prepare(args: argparse.Namespace) -> int:
    from deepspeech.data.prepare import PREPARERS

    preparer = PREPARERS[args.corpus]
    options = {option.keyword: vars(args)[option.keyword] for option in preparer.options}
    print(preparer.run(args.root, args.output, workers=args.workers, **options).format())
    return 0


def _check(args: argparse.Namespace) -> int:
    import sys

    from deepspeech.data.check import check_manifest, write_clean

    vocabulary, normalizer, frames, rate = _check_model(args)
    failed = False
    for manifest in args.manifests:
        report = check_manifest(manifest, vocabulary, normalizer, rate, frames, quick=args.quick,
                                workers=args.workers, silence_db=args.silence_db,
                                use_cache=not args.no_cache)
        print(report.to_json() if args.json else report.format())
        if args.write_clean:
            target, kept = write_clean(report)
            print(f"wrote {target}: {kept} of {report.utterances} utterances"
                  f"{', durations from the audio' if report.audio_durations else ''}",
                  file=sys.stderr if args.json else sys.stdout)
        failed = failed or not report.ok
        sys.stdout.flush()
    return 1 if failed else 0


def _check_model(args: argparse.Namespace):
    """Vocabulary, normalizer, output-frame counter and sample rate: from the config if given."""
    import dataclasses

    from deepspeech.config import DataConfig, load_config
    from deepspeech.data.corpus import read_texts
    from deepspeech.data.text import build_normalizer, build_vocabulary
    from deepspeech.model.frames import model_output_frames

    config = load_config(args.config, check_files=False) if args.config else None
    data = config.data if config else DataConfig()
    data = dataclasses.replace(data, vocabulary=args.vocabulary or data.vocabulary)
    rate = args.sample_rate or data.sample_rate
    normalizer = build_normalizer(data)
    # "build": check_manifest builds it from each manifest's own transcripts.
    vocabulary = "build" if data.vocabulary == "build" else build_vocabulary(data.vocabulary, [])
    if config is None:
        return vocabulary, normalizer, None, rate
    classes = len(build_vocabulary(data.vocabulary, read_texts(args.manifests[0], normalizer)))
    return vocabulary, normalizer, model_output_frames(config, rate, classes), rate


def _shard(args: argparse.Namespace) -> int:
    from deepspeech.data.shard_writer import shard_manifest

    print(shard_manifest(args.manifest, args.output, args.shard_mb).format())
    return 0


def _add_shard(commands: argparse._SubParsersAction) -> None:
    from deepspeech.data.shard_writer import DEFAULT_SHARD_MB

    shard = commands.add_parser(
        "shard", help="pack a manifest's audio into tar shards (for shared file systems)",
        description="Write the audio of MANIFEST, its bytes unchanged, into POSIX tar shards in "
        "DIR, with an index of byte offsets per shard, SHA256SUMS and DIR/manifest.jsonl: the "
        "same utterances in the same order, each read from its shard by byte range, which "
        "train, evaluate and data check take like any manifest. Run again after an "
        "interruption, it keeps the shards already complete and verified.")
    shard.add_argument("manifest", help="JSON Lines manifest")
    shard.add_argument("-o", "--output", required=True, type=output_folder,
                       help="folder for the shards and their manifest")
    shard.add_argument("--shard-mb", type=positive_float, default=DEFAULT_SHARD_MB,
                       help=f"shard size in MB (default {DEFAULT_SHARD_MB}); an utterance "
                            "larger than this gets a shard of its own")
    shard.set_defaults(handler=_shard)


def _add_prepare(commands: argparse._SubParsersAction) -> None:
    from deepspeech.data.prepare import PREPARERS

    parser = commands.add_parser(
        "prepare", help=f"manifests from a real corpus: {', '.join(PREPARERS)}",
        description="Write train/dev/test JSON Lines manifests (header durations, speakers, paths "
        "relative to the output folder, which links to the corpus) and print a summary. Without "
        "--root the corpus is downloaded into OUTPUT/download (not Common Voice).")
    corpora = parser.add_subparsers(dest="corpus", metavar="corpus", required=True)
    for preparer in PREPARERS.values():
        sub = corpora.add_parser(preparer.name, help=preparer.help, description=preparer.help)
        sub.add_argument("--root", required=preparer.root_required, help=preparer.root_help)
        sub.add_argument("-o", "--output", required=True, type=output_folder,
                         help="folder for the manifests")
        sub.add_argument("--workers", type=positive_int, default=8, help="threads reading headers")
        for option in preparer.options:
            sub.add_argument(option.flag, type=option.type, default=option.default,
                             choices=option.choices, help=option.help)
        sub.set_defaults(handler=_prepare)


def _add_check(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="find every problem in a manifest (changes nothing)",
        description="Report malformed lines, duplicates, missing/empty/unreadable/truncated "
        "audio, NaN samples, silence, wrong durations, empty transcripts, characters outside the "
        "vocabulary and audio too short for CTC, grouped by kind with file:line. Exit status 1 "
        "if anything is found, 0 otherwise.")
    check.add_argument("manifests", nargs="+", help="JSON Lines manifest(s)")
    check.add_argument("--vocabulary", help="english, build (from the manifest) or a file "
                       "(default: the config's, else english)")
    check.add_argument("--sample-rate", type=positive_int,
                       help="the model's sample rate (default: the config's, else 16000)")
    check.add_argument("--config", help="training config: its vocabulary, text rules, features "
                       "and model stride (else a 20 ms output frame is assumed)")
    check.add_argument("--quick", action="store_true",
                       help="headers only: skip the full decode (no NaN or silence check)")
    check.add_argument("--silence-db", type=finite_float, default=-60.0,
                       help="peak level (dBFS) at or below which a file counts as silent")
    check.add_argument("--workers", type=positive_int, default=4,
                       help="threads opening audio files")
    check.add_argument("--no-cache", action="store_true",
                       help="open every audio file, and leave the probe cache alone (by default "
                            "files unchanged since an earlier check or training run with the "
                            "same settings are not opened again)")
    check.add_argument("--json", action="store_true", help="one JSON object per manifest")
    check.add_argument("--write-clean", action="store_true",
                       help="also write NAME.clean.jsonl beside each NAME.jsonl: the lines "
                            "without problems (durations that disagree with the audio are "
                            "corrected, not left out); the manifest itself is left as it is")
    check.set_defaults(handler=_check)


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
    synth.add_argument("-o", "--output", required=True, type=output_folder, help="corpus folder")
    synth.add_argument("--hours", type=float, default=1.0, help="total audio over all splits")
    synth.add_argument("--seed", type=int, default=0, help="fixes text, voices, noise and audio")
    synth.add_argument("--language", choices=("en", "cmn"), default="en",
                       help="en: English letters; cmn: Mandarin, Chinese-character transcripts")
    synth.add_argument("--format", choices=("flac", "wav"), default="flac", help="audio format")
    synth.add_argument("--text", metavar="FILE",
                       help="speak these sentences (a text file, one per line, or a manifest's "
                            "transcripts; distinct ones drawn at random) instead of generated "
                            "ones: many voices saying a real corpus's text")
    noise = synth.add_mutually_exclusive_group()
    noise.add_argument("--noise-snr", type=_snr_range, default=(10.0, 30.0), metavar="LOW-HIGH",
                       help="background noise at a random SNR in this dB range (default 10-30)")
    noise.add_argument("--no-noise", action="store_true", help="clean audio")
    synth.add_argument("--dev-fraction", type=float, default=0.1, help="share of the hours")
    synth.add_argument("--test-fraction", type=float, default=0.1, help="share of the hours")
    synth.add_argument("--workers", type=positive_int, default=None,
                       help="espeak processes (default: up to 2); the output does not depend on it")
    synth.add_argument("--engines", type=_engine_names,
                       default=["espeak"], metavar="NAME,...",
                       help="speech engines that share the utterances: espeak (default), flite, "
                            "festival, piper; one not installed is skipped with a warning that "
                            "says how to install it")
    synth.set_defaults(handler=_synth)

    stats = commands.add_parser("stats", help="hours, utterances, durations, character set")
    stats.add_argument("manifests", nargs="+", help="JSON Lines manifest(s)")
    stats.add_argument("--bins", type=positive_int, default=10, help="duration histogram bins")
    stats.set_defaults(handler=_stats)

    _add_prepare(commands)
    _add_check(commands)
    _add_shard(commands)
    _add_lhotse(commands)

"""``deepspeech data``: synthesize, prepare, inspect and check corpora."""

from __future__ import annotations

import argparse

from deepspeech.data.manifest import manifest_stats, read_manifest


def _stats(args: argparse.Namespace) -> int:
    for path in args.manifests:
        print(f"== {path}")
        print(manifest_stats(read_manifest(path), bins=args.bins).format())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``data`` and its sub-commands."""
    parser = subparsers.add_parser("data", help="synthesize, prepare and inspect corpora")
    commands = parser.add_subparsers(dest="data_command", metavar="subcommand", required=True)

    stats = commands.add_parser("stats", help="hours, utterances, durations, character set")
    stats.add_argument("manifests", nargs="+", help="JSON Lines manifest(s)")
    stats.add_argument("--bins", type=int, default=10, help="duration histogram bins")
    stats.set_defaults(handler=_stats)

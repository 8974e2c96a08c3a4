"""``deepspeech lm``: build n-gram language models for beam search decoding."""

from __future__ import annotations

import argparse
from pathlib import Path

from deepspeech.arguments import output_file
from deepspeech.lm import build_lm


def _build(args: argparse.Namespace) -> int:
    model = build_lm(args.text, args.output, order=args.order, vocab_limit=args.vocab_limit,
                     prune=args.prune, units=args.units)
    counts = ", ".join(f"{n}-grams: {len(t)}" for n, t in enumerate(model.orders, start=1))
    print(f"wrote {args.output} (order {model.order}, {counts})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``lm`` and its sub-commands."""
    parser = subparsers.add_parser("lm", help="build n-gram language models for decoding")
    commands = parser.add_subparsers(dest="lm_command", metavar="subcommand", required=True)

    build = commands.add_parser(
        "build", help="estimate a Kneser-Ney n-gram model and write it as ARPA",
        description="Interpolated modified Kneser-Ney (KenLM-compatible ARPA output). The "
                    "corpus is normalized like training transcripts.")
    build.add_argument("--text", required=True, type=Path, metavar="FILE", nargs="+",
                       help="corpus: plain text, one sentence per line (.gz accepted), or a "
                            "JSON Lines manifest (.jsonl/.json) whose \"text\" fields are "
                            "used; several files count as one corpus")
    build.add_argument("--order", type=int, default=3, help="n-gram order (default: 3)")
    build.add_argument("-o", "--output", required=True, type=output_file, metavar="ARPA",
                       help="ARPA file to write")
    build.add_argument("--vocab-limit", type=int, default=0, metavar="N",
                       help="keep the N most frequent words, the others become <unk> "
                            "(default: keep all)")
    build.add_argument("--prune", action="store_true",
                       help="drop n-grams of order 3 and above seen in a single context")
    build.add_argument("--units", choices=("word", "char"), default="word",
                       help="word: for lexicon decoding (default); char: a character model "
                            "('|' spells the space) for lexicon-free decoding")
    build.set_defaults(handler=_build)

"""``deepspeech lm``: build and mix n-gram language models for beam search decoding."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from deepspeech.arguments import output_file
from deepspeech.lm import NGramModel, build_lm, mix_lm


def _counts(model: NGramModel) -> str:
    return ", ".join(f"{n}-grams: {len(t)}" for n, t in enumerate(model.orders, start=1))


def _build(args: argparse.Namespace) -> int:
    model = build_lm(args.text, args.output, order=args.order, vocab_limit=args.vocab_limit,
                     prune=args.prune, units=args.units)
    print(f"wrote {args.output} (order {model.order}, {_counts(model)})")
    return 0


def _mix(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    model = mix_lm(args.a, args.b, args.output, args.weight)
    size = Path(args.output).stat().st_size / 1e6
    print(f"wrote {args.output} ({args.weight:g} x {args.a} + {1 - args.weight:g} x {args.b}; "
          f"order {model.order}, {_counts(model)}; {size:.1f} MB) in "
          f"{time.perf_counter() - start:.1f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``lm`` and its sub-commands."""
    parser = subparsers.add_parser("lm", help="build and mix n-gram language models for decoding")
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

    mix = commands.add_parser(
        "mix", help="interpolate two ARPA models into one (as SRILM's ngram -mix-lm)",
        description="p(w|h) = W p_A(w|h) + (1-W) p_B(w|h) for every n-gram either model "
                    "lists, over the union of their words (a word a model lacks has "
                    "probability 0 in it); backoff weights recomputed so that every context "
                    "sums to 1. Exact for listed n-grams, approximate for backed-off ones.")
    mix.add_argument("a", type=Path, metavar="A.arpa", help="first model (weight W)")
    mix.add_argument("b", type=Path, metavar="B.arpa", help="second model (weight 1-W)")
    mix.add_argument("--weight", required=True, type=float, metavar="W",
                     help="A's weight, between 0 and 1 (exclusive)")
    mix.add_argument("-o", "--output", required=True, type=output_file, metavar="ARPA",
                     help="ARPA file to write")
    mix.set_defaults(handler=_mix)

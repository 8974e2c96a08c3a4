"""``deepspeech plot``: PNG pictures of a training run."""

from __future__ import annotations

import argparse


def _plot(args: argparse.Namespace) -> int:
    from deepspeech.plots import plot_run

    for path in plot_run(args.run_dir):
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot``."""
    parser = subparsers.add_parser(
        "plot", help="loss, CER/WER curves and a CTC alignment as PNG files")
    parser.add_argument("run_dir", help="a training output folder (train.output_dir)")
    parser.set_defaults(handler=_plot)

"""``deepspeech plot``: PNG pictures of a training run."""

from __future__ import annotations

import argparse

from deepspeech.arguments import output_file


def _plot(args: argparse.Namespace) -> int:
    from pathlib import Path

    from deepspeech.plots import plot_run, plot_wer_against_minutes

    if args.compare:
        print(plot_wer_against_minutes([Path(run) for run in args.run_dirs],
                                       Path(args.compare)))
        return 0
    if len(args.run_dirs) > 1:
        raise SystemExit("deepspeech plot: one run folder at a time, or several with --compare")
    for path in plot_run(args.run_dirs[0]):
        print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot``."""
    parser = subparsers.add_parser(
        "plot", help="loss, CER/WER curves and a CTC alignment as PNG files")
    parser.add_argument("run_dirs", nargs="+", metavar="run_dir",
                        help="a training output folder (train.output_dir)")
    parser.add_argument("--compare", metavar="PNG", type=output_file,
                        help="draw the runs' validation WER against training minutes into PNG")
    parser.set_defaults(handler=_plot)

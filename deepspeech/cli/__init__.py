"""The ``deepspeech`` command: a thin layer over the package.

Each sub-command lives in its own module with ``register(subparsers)``, which adds
its parser and sets ``handler``; ``main`` only parses, sets up logging and turns
``DeepSpeechError`` into one readable line and exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Sequence

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from deepspeech.errors import DeepSpeechError, naming_resource_failures, own_message

COMMAND_MODULES = ("data", "train", "evaluate", "transcribe", "plot", "lm", "bench", "decode",
                   "export", "serve", "doctor")


class CommandParser(argparse.ArgumentParser):
    """A command's parser that takes its positional arguments between the flags too.

    Plain argparse takes a ``nargs="*"`` positional only in one run, so
    ``deepspeech train -c x.yaml a=1 --overwrite b=2`` or ``deepspeech plot runA
    --compare out.png runB`` was refused as "unrecognized arguments". Parsers that
    hand the rest to another parser (sub-commands, ``bench NAME ...``) parse as usual,
    and so does a command line with ``--`` (a file named ``-x.wav``), which Python's
    intermixed parsing mishandles. An argument no flag takes is refused with the
    command's own usage, not the top-level one.
    """

    _intermixing = False

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        args = sys.argv[1:] if args is None else list(args)
        hands_on = any(a.nargs in (argparse.PARSER, argparse.REMAINDER)
                       for a in self._get_positional_actions())
        if self._intermixing or hands_on:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            parse = (super().parse_known_args if "--" in args
                     else self.parse_known_intermixed_args)
            namespace, extras = parse(args, namespace)
        finally:
            self._intermixing = False
        if extras:  # a whole command's arguments: no other parser will take them
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser(commands: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The argument parser, one sub-parser per command module (all of them by default)."""
    from importlib import import_module

    parser = argparse.ArgumentParser(
        prog="deepspeech",
        description="Deep Speech 2 style speech recognition: train, evaluate, transcribe.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="command", required=True,
                                       parser_class=CommandParser)
    for name in commands:
        import_module(f"deepspeech.cli.{name}").register(subparsers)
    return parser


def _broken_install_parser(argv: Sequence[str], exc: BaseException) -> argparse.ArgumentParser:
    """A parser that can still run ``doctor`` when a library the commands import does not
    load (torchaudio built for another torch); for any other command, the way out."""
    command = next((argument for argument in argv if not argument.startswith("-")), None)
    if command == "doctor":
        return build_parser(("doctor",))
    from deepspeech.doctor import error_summary

    sys.exit(f"deepspeech: cannot start, the installation is broken: {type(exc).__name__}: "
             f"{error_summary(exc)}\n`deepspeech doctor` names what is broken and what to do "
             "about it")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
    except (ImportError, OSError) as exc:
        parser = _broken_install_parser(argv, exc)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Log lines and the final error go around the progress bars, not onto their line.
    try:
        with logging_redirect_tqdm(), naming_resource_failures(
                "use fewer data workers, smaller batches or shorter utterances"):
            return int(args.handler(args) or 0)
    except DeepSpeechError as exc:
        tqdm.write(f"deepspeech {args.command}: error: {own_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        tqdm.write(f"deepspeech {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`| head`): nothing more to say to it, and no traceback. Python
        # would fail again flushing stdout at exit, so it goes to /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a command killed by SIGPIPE
    except OSError as exc:
        # A folder the user may not write to is their input, like a bad flag; other
        # OS errors are not foreseen and keep their traceback.
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or exc.filename is None:
            raise
        tqdm.write(f"deepspeech {args.command}: error: {exc.filename}: {exc.strerror}",
                   file=sys.stderr)
        return 2

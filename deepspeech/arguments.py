"""Argument types for command-line numbers with a lower bound, and for output paths.

A batch size of 0 or a negative worker count used to travel until a ``range`` or a
``DataLoader`` refused it with a traceback; as an argparse type the bound is checked at
the edge and the error names the flag: ``argument --batch-size: must be a positive
integer, got '0'``. Likewise an output path that names a folder used to end a long
evaluation or tuning in ``IsADirectoryError`` after all the work was done.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path


def _bounded(kind: type, allow_zero: bool, what: str) -> Callable[[str], float]:
    """A parser of ``kind`` that refuses negative, non-finite and (unless allowed) zero values."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


def finite_float(text: str) -> float:
    """Any number but nan and the infinities, which no comparison would refuse later."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


positive_int = _bounded(int, allow_zero=False, what="a positive integer")
non_negative_int = _bounded(int, allow_zero=True, what="a non-negative integer")
positive_float = _bounded(float, allow_zero=False, what="a positive number")
non_negative_float = _bounded(float, allow_zero=True, what="a non-negative number")


def _check_ancestors(path: Path) -> None:
    """The nearest existing folder above ``path`` must be a folder, not a file."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{parent} is a file, not a folder")
            return


def output_file(text: str) -> str:
    """A file to write (its folders are made as needed)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    _check_ancestors(path)
    return text


def output_folder(text: str) -> str:
    """A folder to write into (made as needed)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; give a folder")
    _check_ancestors(path)
    return text

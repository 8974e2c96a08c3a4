"""Argument types for command-line numbers with a lower bound.

A batch size of 0 or a negative worker count used to travel until a ``range`` or a
``DataLoader`` refused it with a traceback; as an argparse type the bound is checked at
the edge and the error names the flag: ``argument --batch-size: must be a positive
integer, got '0'``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


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


positive_int = _bounded(int, allow_zero=False, what="a positive integer")
non_negative_int = _bounded(int, allow_zero=True, what="a non-negative integer")
positive_float = _bounded(float, allow_zero=False, what="a positive number")
non_negative_float = _bounded(float, allow_zero=True, what="a non-negative number")

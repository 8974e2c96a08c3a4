"""Buffer sizes as the benchmark's options write them, and nccl-tests' bandwidths."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"4K"`` -> 4096; units K, M, G are powers of 1024; a plain number is bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 4K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2)]

def parse_sizes(text: str) -> list[int]:
    """``"4K-1M"`` -> powers of two from 4 KiB to 1 MiB; ``"4K,1M,3000"`` -> that list."""
    if "-" in text and "," not in text:
        low, high = (parse_size(part) for part in text.split("-", 1))
        if low <= 0 or high < low:
            raise ValueError(f"bad size range {text!r}: need 0 < low <= high")
        sizes, size = [], 1 << (low - 1).bit_length()
        if size != low:
            sizes.append(low)
        while size <= high:
            sizes.append(size)
            size <<= 1
        return sizes
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(f"bad size list {text!r}: sizes must be positive")
    return sizes

def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)

def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s as nccl-tests define them."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size

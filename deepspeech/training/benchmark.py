"""``deepspeech bench train``: training throughput and achieved FLOP/s against a measured peak.

For each config: synthetic features of a fixed utterance length (no disk, so
only the model is measured), full training steps (forward, CTC, backward,
clipping, optimizer), median over steps. FLOPs are counted from the layer shapes
(``deepspeech.model.flops``); the peak is a large fp32 matrix product measured
in the same run with the same thread count. ``--profile`` adds where the time
goes, by operator.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from deepspeech.config import load_config
from deepspeech.features import FeatureExtractor
from deepspeech.model import DeepSpeech2, count_parameters, training_flops
from deepspeech.training.optim import build_optimizer


def matmul_peak_gflops(threads: int, size: int = 2048, repeats: int = 5,
                       dtype: torch.dtype = torch.float32) -> float:
    """Best GFLOP/s of an ``size x size`` matrix product: the attainable peak here."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def bench_config(path: str, batch_size: int, seconds: float, steps: int, threads: int,
                 profile: bool, precision: str | None = None) -> dict:
    """Measure one config's training step (in the config's precision unless given)."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    overrides = [f"train.precision={precision}"] if precision else []
    config = load_config(path, overrides, check_files=False)
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    num_classes = 29
    model = DeepSpeech2(config.model, extractor.num_bins, num_classes)
    optimizer = build_optimizer(model.parameters(), config.optim)
    frames = extractor.num_frames(round(seconds * config.data.sample_rate))
    features = torch.randn(batch_size, extractor.num_bins, frames)
    lengths = torch.full((batch_size,), frames, dtype=torch.int64)
    chars = max(1, int(seconds * 12))
    targets = torch.randint(1, num_classes, (batch_size * chars,), dtype=torch.int32)
    target_lengths = torch.full((batch_size,), chars, dtype=torch.int64)
    autocast = {"bf16": torch.bfloat16}.get(config.train.precision)

    def step() -> None:
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            log_probs, out_lengths = model(features, lengths)
        loss = F.ctc_loss(log_probs.float().transpose(0, 1), targets, out_lengths,
                          target_lengths, reduction="sum") / batch_size
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip or 1e9)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: allocations, oneDNN primitive creation
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    flops = training_flops(config.model, extractor.num_bins, num_classes, lengths.tolist())
    result = {
        "config": path, "parameters": count_parameters(model), "batch_size": batch_size,
        "utterance_seconds": seconds, "threads": threads, "precision": config.train.precision,
        "step_seconds": round(median, 4),
        "audio_seconds_per_second": round(batch_size * seconds / median, 1),
        "gflop_per_step": round(flops / 1e9, 4),
        "achieved_gflops": round(flops / median / 1e9, 3),
    }
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        result["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total",
                                                      row_limit=12)
    return result


def run(args: argparse.Namespace) -> int:
    peak = matmul_peak_gflops(args.threads)
    results = []
    for path in args.configs:
        result = bench_config(path, args.batch_size, args.seconds, args.steps, args.threads,
                              args.profile, args.precision)
        result["matmul_peak_gflops"] = round(peak, 1)
        result["fraction_of_peak"] = round(result["achieved_gflops"] / peak, 3)
        results.append(result)
        if args.json:
            print(json.dumps({k: v for k, v in result.items() if k != "profile"}))
            continue
        print(f"{path}: {result['parameters']:,} parameters, batch {args.batch_size} x "
              f"{args.seconds:.1f} s, {args.threads} thread(s), {result['precision']}")
        print(f"  step {result['step_seconds']:.3f} s, "
              f"{result['audio_seconds_per_second']:.1f} audio-s/s, "
              f"{result['gflop_per_step']:.1f} GFLOP/step, {result['achieved_gflops']:.1f} GFLOP/s"
              f" = {100 * result['fraction_of_peak']:.1f}% of the measured matmul peak "
              f"({peak:.1f} GFLOP/s)")
        if "profile" in result:
            print(result["profile"])
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", nargs="+",
                        default=["configs/quickstart.yaml", "configs/ds2.yaml"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0, help="utterance length")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--profile", action="store_true", help="show the top operators")
    parser.add_argument("--precision", choices=("fp32", "bf16"),
                        help="instead of the config's train.precision (bf16 is slow on CPUs "
                             "without bf16 units)")
    parser.add_argument("--json", action="store_true")

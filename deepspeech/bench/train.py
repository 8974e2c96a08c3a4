"""``deepspeech bench train``: training throughput and achieved FLOP/s against a measured peak.

For each config: synthetic features of a fixed utterance length (no disk, so
only the model is measured), full training steps (forward, CTC, backward,
clipping, optimizer), median over steps. FLOPs are counted from the layer shapes
(``deepspeech.model.flops``); the peak is a large matrix product measured in the
same run, on the same device, in the precision the matrix units then run at
(fp32 on a CPU with the same thread count; on a GPU bf16 or fp16, so that
bf16 training is held to the bf16 peak, and for fp32 the TF32 peak when cuDNN
may use TF32 for convolutions and RNNs, as it may by default). ``--profile``
adds where one more step's time goes, by layer and kind of work (``profile.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch

from deepspeech.arguments import positive_float, positive_int
from deepspeech.bench.profile import profile_step
from deepspeech.config import load_config
from deepspeech.data.dataset import Batch
from deepspeech.device import select_device
from deepspeech.execution import AUTOCAST_DTYPES, resolve_plan
from deepspeech.features import FeatureExtractor
from deepspeech.model import DeepSpeech2, count_parameters, training_flops
from deepspeech.training.micro_batch import build_runner
from deepspeech.training.optim import build_optimizer
from deepspeech.training.step import apply_gradients


def matmul_peak_gflops(threads: int, device: torch.device, dtype: torch.dtype = torch.float32,
                       repeats: int = 5, tf32: bool = False) -> float:
    """Best GFLOP/s of a large square matrix product: the attainable peak here.

    On the CPU torch ships two GEMM libraries and the better one depends on the CPU:
    `torch.mm` runs MKL's, which on the AVX-512 AMD EPYC development host reaches
    half of what oneDNN's reaches in fp32 (208 against 436 GFLOP/s on 2 cores), and
    oneDNN is what runs the LSTM. The peak is the faster of the two.
    """
    torch.set_num_threads(threads)
    size = 8192 if device.type == "cuda" else 2048
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    products = [lambda: torch.mm(a, b)]
    if device.type == "cpu" and torch.backends.mkldnn.is_available():
        products += _onednn_product(a, dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    best = float("inf")
    try:
        with torch.no_grad():
            for product in products:
                product()
                for _ in range(repeats):
                    _synchronize(device)
                    start = time.perf_counter()
                    product()
                    _synchronize(device)
                    best = min(best, time.perf_counter() - start)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * size**3 / best / 1e9


def _onednn_product(a: torch.Tensor, dtype: torch.dtype) -> list:
    """oneDNN's product of ``a`` with a square weight, or nothing where oneDNN refuses the
    dtype on this CPU (fp16 needs AVX-512 FP16 or AVX-NE-CONVERT)."""
    with warnings.catch_warnings():  # the module's classes use torch.jit.script_method
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.utils import mkldnn

    size = a.shape[0]
    layer = mkldnn.to_mkldnn(torch.nn.Linear(size, size, bias=False), dtype)
    a_onednn = a.to_mkldnn()
    try:
        with torch.no_grad():
            layer(a_onednn)
    except RuntimeError:
        return []
    return [lambda: layer(a_onednn)]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_config(path: str, batch_size: int, seconds: float, steps: int, threads: int,
                 profile: bool, precision: str | None, device: torch.device,
                 overrides: tuple[str, ...] = (), graphs: bool = False) -> dict:
    """Measure one config's training step (in the config's precision unless given), with
    ``overrides`` (``key=value``, as ``deepspeech train`` takes them) applied; ``graphs``:
    the forward, loss and backward replayed as a CUDA graph, as training does."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    config = load_config(path, [*overrides, *([f"execution.precision={precision}"] if precision
                                              else []),
                                f"execution.cuda_graphs={str(graphs).lower()}"],
                         check_files=False)
    extractor = FeatureExtractor(config.features, config.data.sample_rate)
    num_classes = 29
    # The plan training settles (one process: no gradient hooks).
    plan = resolve_plan(config.execution, device)
    model = DeepSpeech2(config.model, extractor.num_bins, num_classes,
                        plan.model_mode).to(device)
    optimizer = build_optimizer(model.parameters(), config.optim)
    frames = extractor.num_frames(round(seconds * config.data.sample_rate))
    features = torch.randn(batch_size, extractor.num_bins, frames, device=device)
    lengths = torch.full((batch_size,), frames, dtype=torch.int64, device=device)
    chars = max(1, int(seconds * 12))
    targets = torch.randint(1, num_classes, (batch_size * chars,), dtype=torch.int32)
    batch = Batch(features, lengths, targets, torch.full((batch_size,), chars, dtype=torch.int64),
                  indices=list(range(batch_size)))
    # fp16 gradients underflow without loss scaling, as in training (the cost is one multiply)
    scaler = torch.amp.GradScaler(device.type, enabled=plan.precision == "fp16")
    runner = build_runner(plan, model, scaler)

    def loss_and_backward() -> None:
        runner.loss_and_backward(batch, batch_size)

    def update() -> None:
        apply_gradients(model, optimizer, scaler, config.optim.grad_clip)
        optimizer.zero_grad(set_to_none=True)

    def step() -> None:
        loss_and_backward()
        update()

    # warm-up: allocations, oneDNN primitive creation, cuDNN plans; with graphs the capture
    for _ in range(2 if graphs else 1):
        step()
    times = []
    for _ in range(steps):
        _synchronize(device)
        start = time.perf_counter()
        step()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    flops = training_flops(model, lengths.tolist())
    result = {
        "config": path, "overrides": overrides, "cuda_graphs": graphs,
        "parameters": count_parameters(model), "batch_size": batch_size,
        "utterance_seconds": seconds, "threads": threads, "precision": plan.precision,
        "device": _device_name(device),
        "step_seconds": round(median, 4),
        "audio_seconds_per_second": round(batch_size * seconds / median, 1),
        "gflop_per_step": round(flops / 1e9, 4),
        "achieved_gflops": round(flops / median / 1e9, 3),
    }
    if profile:
        result["profile"] = profile_step(model, loss_and_backward, update, device)
    return result


def _peak_precision(precision: str, device: torch.device) -> str:
    """The matrix units' precision a training step in ``precision`` may run at."""
    if device.type == "cpu":  # a CPU runs autocast's bf16 no faster than fp32
        return "fp32"
    if precision == "fp32" and torch.backends.cudnn.allow_tf32:
        return "tf32"
    return precision


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def run(args: argparse.Namespace) -> int:
    device = select_device(args.device, what="--device")
    if args.cuda_graphs and device.type != "cuda":
        raise SystemExit(f"--cuda-graphs needs a CUDA device; this run is on {device.type}")
    peaks: dict[str, float] = {}
    results = []
    runs = [(path, graphs) for path in args.configs
            for graphs in ((False, True) if args.cuda_graphs else (False,))]
    for path, graphs in runs:
        result = bench_config(path, args.batch_size, args.seconds, args.steps, args.threads,
                              args.profile, args.precision, device, tuple(args.set), graphs)
        peak_precision = _peak_precision(result["precision"], device)
        if peak_precision not in peaks:
            dtype = AUTOCAST_DTYPES.get(peak_precision, torch.float32)
            peaks[peak_precision] = matmul_peak_gflops(args.threads, device, dtype,
                                                       tf32=peak_precision == "tf32")
        peak = peaks[peak_precision]
        result["matmul_peak_gflops"] = round(peak, 1)
        result["peak_precision"] = peak_precision
        result["fraction_of_peak"] = round(result["achieved_gflops"] / peak, 3)
        results.append(result)
        if args.json:
            # the profile, if any, as its numbers
            print(json.dumps(result, default=lambda profile: profile.to_dict()))
            continue
        changed = f" ({' '.join(args.set)})" if args.set else ""
        print(f"{path}{changed}: {result['parameters']:,} parameters, batch {args.batch_size} x "
              f"{args.seconds:.1f} s, {result['device']}, {args.threads} thread(s), "
              f"{result['precision']}{', CUDA graphs' if graphs else ', eager'}")
        print(f"  step {result['step_seconds']:.3f} s, "
              f"{result['audio_seconds_per_second']:.1f} audio-s/s, "
              f"{result['gflop_per_step']:.1f} GFLOP/step, {result['achieved_gflops']:.1f} GFLOP/s"
              f" = {100 * result['fraction_of_peak']:.1f}% of the measured {peak_precision} "
              f"matmul peak ({peak:.1f} GFLOP/s)")
        if "profile" in result:
            print(result["profile"].table())
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", nargs="+",
                        default=["configs/quickstart.yaml", "configs/ds2.yaml"])
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="config overrides for every config, as deepspeech train takes "
                             "them (e.g. model.rnn.kind=gru)")
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--seconds", type=positive_float, default=4.0, help="utterance length")
    parser.add_argument("--steps", type=positive_int, default=5)
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads())
    parser.add_argument("--profile", action="store_true",
                        help="one more step profiled: its time by layer and kind of work")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"),
                        help="instead of the config's execution.precision (bf16 is slow on CPUs "
                             "without bf16 units; fp16 is for GPUs)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the GPU when there is one (default)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="each config twice: eager, then replayed as CUDA graphs")

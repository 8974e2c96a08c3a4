"""``deepspeech bench rnn``: a GRU stack's forward + backward on a GPU, by RNN kernel.

The stack is DS2's recurrent part (``configs/ds2.yaml``: 5 bidirectional layers of
1024, 10 directions; the first layer reads the convolutions' 96 x 21 = 2016 features),
on random frames of one length, directions summed as the model sums them, no batch
norm: only the recurrences and their projections are timed. Each way runs the same
weights under autocast:

* ``cudnn eager``: ``execution.rnn_kernel: torch``, as training runs today;
* ``cudnn graphed``: the same captured once in a CUDA graph and replayed;
* ``persistent eager`` / ``graphed``: ``execution.rnn_kernel: persistent``.

Printed: median milliseconds per forward + backward and the speedup over cuDNN eager;
how far the persistent kernel's output and gradients are from cuDNN's; whether two
runs of it give the same bits. Exit status 1 when they do not, when it is far from
cuDNN, or when a program gave up waiting at its grid barrier.

    deepspeech bench rnn                      # ds2 sizes, batch 128, 501 frames (10 s)
    deepspeech bench rnn --batch-size 32 --frames 100 --layers 2    # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from deepspeech.arguments import positive_int
from deepspeech.errors import DeepSpeechError
from deepspeech.model.kernels.gru import barrier_give_ups, describe_launch
from deepspeech.model.rnn_kernels import RNN_KERNELS
from deepspeech.training.determinism import make_deterministic

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DS2_FRAMES_AT_10_S = 501
"""Steps configs/ds2.yaml's GRUs run for 10 s of audio (10 ms hop, then the convolutions'
time stride of 2); the default sizes are ds2's too, so the benchmark times the real work."""
# Largest ||persistent - cudnn|| / ||cudnn|| accepted: rounding in bf16 over the stack
# stays near 1e-2; a wrong kernel is near 1.
RELATIVE_LIMIT = 0.05


class _Stack(nn.Module):
    """Bidirectional GRU layers, each direction built by one ``RNN_KERNELS`` entry."""

    def __init__(self, kernel: str, input_size: int, hidden: int, layers: int) -> None:
        super().__init__()
        build = RNN_KERNELS[kernel]
        sizes = [input_size] + [hidden] * (layers - 1)
        self.directions = nn.ModuleList(build("gru", size, hidden) for size in sizes
                                        for _ in range(2))

    def forward(self, x: Tensor) -> Tensor:
        for forward_rnn, backward_rnn in zip(self.directions[::2], self.directions[1::2],
                                              strict=True):
            ahead, _ = forward_rnn(x)
            behind, _ = backward_rnn(x.flip(1))
            x = ahead + behind.flip(1)
        return x


def _step(stack: _Stack, x: Tensor, dy: Tensor, dtype: torch.dtype) -> list[Tensor]:
    """Forward + backward from cleared gradients: the output, then every gradient."""
    stack.zero_grad(set_to_none=True)
    x.grad = None
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        y = stack(x)
    y.backward(dy)
    # y detached: a live autograd graph keeps its gradient accumulators on this stream,
    # and a later capture on another stream would have to wait on it, which breaks it
    return [y.detach(), x.grad, *(p.grad for p in stack.parameters())]


def _median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first warms up allocator and kernels
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


def _captured(stack: _Stack, x: Tensor, dy: Tensor, dtype: torch.dtype
              ) -> tuple[torch.cuda.CUDAGraph, list[Tensor]]:
    """The step captured once; its outputs are static tensors that each replay rewrites."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # as PyTorch's guide warms up before a capture
        for _ in range(2):
            _step(stack, x, dy, dtype)
    torch.cuda.current_stream().wait_stream(side)
    stack.zero_grad(set_to_none=True)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = _step(stack, x, dy, dtype)
    return graph, outputs


def _difference(got: list[Tensor], want: list[Tensor]) -> tuple[float, float]:
    """Largest absolute difference, and the largest relative norm of a difference."""
    pairs = [(a.float(), b.float()) for a, b in zip(got, want, strict=True)]
    largest = max((a - b).abs().max().item() for a, b in pairs)
    relative = max(((a - b).norm() / b.norm().clamp_min(1e-30)).item() for a, b in pairs)
    return largest, relative


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench rnn``."""
    parser.add_argument("--batch-size", type=positive_int, default=128)
    parser.add_argument("--frames", type=positive_int, default=DS2_FRAMES_AT_10_S,
                        help="time steps (default: what configs/ds2.yaml's GRUs run for 10 s "
                             f"of audio, {DS2_FRAMES_AT_10_S} after the convolutions' stride)")
    parser.add_argument("--hidden", type=positive_int, default=1024)
    parser.add_argument("--layers", type=positive_int, default=5,
                        help="bidirectional layers (two directions each)")
    parser.add_argument("--input-size", type=positive_int, default=2016,
                        help="features into the first layer (ds2: 96 channels x 21 bins)")
    parser.add_argument("--precision", choices=sorted(DTYPES), default="bf16",
                        help="autocast dtype (fp32: none)")
    parser.add_argument("--repeats", type=positive_int, default=5)


def run(args: argparse.Namespace) -> int:
    """Time the four ways, compare the persistent kernel with cuDNN, print the figures."""
    if not torch.cuda.is_available():
        raise DeepSpeechError("bench rnn times GPU kernels and needs a CUDA GPU; "
                              "none is available")
    make_deterministic(0, torch.get_num_threads())
    device, dtype = torch.device("cuda", torch.cuda.current_device()), DTYPES[args.precision]
    sizes = (args.input_size, args.hidden, args.layers)
    torch.manual_seed(0)
    stacks = {"cudnn": _Stack("torch", *sizes).to(device),
              "persistent": _Stack("persistent", *sizes).to(device)}
    stacks["persistent"].load_state_dict(stacks["cudnn"].state_dict())
    generator = torch.Generator(device).manual_seed(0)
    x = torch.randn(args.batch_size, args.frames, args.input_size, device=device,
                    generator=generator).requires_grad_(True)
    dy = torch.randn(args.batch_size, args.frames, args.hidden, device=device,
                     generator=generator).to(dtype)

    print(f"device {torch.cuda.get_device_name(device)}; GRU stack {args.layers} x "
          f"{args.hidden} bidirectional ({2 * args.layers} directions), {args.frames} frames, "
          f"batch {args.batch_size}, first input {args.input_size}, {args.precision}; "
          f"median of {args.repeats}")
    print(f"persistent launches: {describe_launch(args.batch_size, args.hidden, device)}")
    results: dict[str, list[Tensor]] = {}
    times: dict[str, float] = {}
    for name, stack in stacks.items():
        results[name] = [t.detach().clone() for t in _step(stack, x, dy, dtype)]
        times[f"{name} eager"] = _median_ms(lambda s=stack: _step(s, x, dy, dtype),
                                            args.repeats)
    again = _step(stacks["persistent"], x, dy, dtype)
    repeatable = all(torch.equal(a, b) for a, b in zip(again, results["persistent"],
                                                              strict=True))
    graphed_outputs: dict[str, list[Tensor]] = {}
    for name, stack in stacks.items():
        try:
            graph, outputs = _captured(stack, x, dy, dtype)
        except RuntimeError as exc:
            print(f"{name} graphed: capture refused: {str(exc).splitlines()[0]}")
            continue
        times[f"{name} graphed"] = _median_ms(graph.replay, args.repeats)
        graphed_outputs[name] = outputs

    baseline = times["cudnn eager"]
    for name, ms in times.items():
        print(f"{name:<20} {ms:9.2f} ms  {baseline / ms:5.2f}x")
    largest, relative = _difference(results["persistent"], results["cudnn"])
    print(f"persistent against cudnn (output and every gradient): largest difference "
          f"{largest:.2e}, largest relative norm {relative:.2e}")
    print(f"persistent bitwise the same on a second run: {repeatable}")
    if "persistent" in graphed_outputs:
        same = all(torch.equal(a, b) for a, b in zip(graphed_outputs["persistent"],
                                                      results["persistent"], strict=True))
        print(f"persistent graphed bitwise the same as eager: {same}")
    give_ups = barrier_give_ups(device)
    if give_ups:
        print(f"FAILED: {give_ups} programs gave up waiting at a grid barrier")
    if not repeatable:
        print("FAILED: the persistent kernel gave other bits on a second run")
    if relative > RELATIVE_LIMIT:
        print(f"FAILED: the persistent kernel is further from cuDNN than {RELATIVE_LIMIT}")
    return 1 if give_ups or not repeatable or relative > RELATIVE_LIMIT else 0

"""``deepspeech bench ctc``: the CTC loss on a GPU, forward and backward, the ways training
can compute it.

``cpu kernel``: PyTorch's CTC on the CPU (deterministic), the log-probabilities copied
there from the GPU and the gradient copied back, as GPU training first did. ``gpu
kernels``: ``deepspeech.model.kernels.ctc`` (Triton, deterministic), as GPU training does
now. ``pytorch cuda``: PyTorch's own CUDA CTC, not deterministic, for scale. All run on
the same random log-probabilities; printed: their median times, how far the GPU
kernels' loss and gradient are from the CPU kernel's, and whether two runs of them give
the same gradient bit for bit.

    deepspeech bench ctc --batch-size 128 --frames 500 --labels 120 --threads 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from deepspeech.arguments import positive_int
from deepspeech.errors import DeepSpeechError
from deepspeech.model.kernels.ctc import gpu_ctc_loss
from deepspeech.training.determinism import make_deterministic


def _cpu_kernel(log_probs, lengths, targets, target_lengths):
    loss = F.ctc_loss(log_probs.cpu().transpose(0, 1), targets, lengths.cpu(), target_lengths,
                      reduction="sum")
    return loss.to(log_probs.device)


def _gpu_kernels(log_probs, lengths, targets, target_lengths):
    return gpu_ctc_loss(log_probs, lengths, targets, target_lengths).sum()


def _pytorch_cuda(log_probs, lengths, targets, target_lengths):
    return F.ctc_loss(log_probs.transpose(0, 1), targets, lengths, target_lengths,
                      reduction="sum")


def _timed(loss_fn, logits, lengths, targets, target_lengths, repeats):
    """Median seconds of forward + backward, and the gradient of the last run."""
    times, gradient = [], None
    for _ in range(repeats + 1):  # the first run warms up allocator and kernels
        leaf = logits.detach().clone().requires_grad_(True)
        log_probs = leaf.log_softmax(-1)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = loss_fn(log_probs, lengths, targets, target_lengths)
        loss.backward()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        gradient = leaf.grad
    return statistics.median(times[1:]), loss.item(), gradient


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``deepspeech bench ctc``."""
    parser.add_argument("--batch-size", type=positive_int, default=128)
    parser.add_argument("--frames", type=positive_int, default=500,
                        help="output frames per utterance")
    parser.add_argument("--labels", type=positive_int, default=120, help="labels per utterance")
    parser.add_argument("--classes", type=positive_int, default=29)
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads(),
                        help="CPU threads for the CPU kernel")
    parser.add_argument("--repeats", type=positive_int, default=5)


def run(args: argparse.Namespace) -> int:
    """Time the three implementations and print their figures."""
    if not torch.cuda.is_available():
        raise DeepSpeechError("bench ctc times the GPU kernels and needs a CUDA GPU; "
                              "none is available")
    make_deterministic(0, args.threads)
    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(args.batch_size, args.frames, args.classes, generator=generator)
    logits = logits.to(device)
    # lengths vary the way a bucketed batch's do: the longest has every frame
    lengths = torch.linspace(args.frames * 0.8, args.frames, args.batch_size).long().to(device)
    targets = torch.randint(1, args.classes, (args.batch_size * args.labels,),
                            generator=generator, dtype=torch.int32)
    target_lengths = torch.full((args.batch_size,), args.labels, dtype=torch.int64)

    cpu_s, cpu_loss, cpu_grad = _timed(_cpu_kernel, logits, lengths, targets, target_lengths,
                                       args.repeats)
    gpu_s, gpu_loss, gpu_grad = _timed(_gpu_kernels, logits, lengths, targets, target_lengths,
                                       args.repeats)
    _, _, again = _timed(_gpu_kernels, logits, lengths, targets, target_lengths, 1)
    torch.use_deterministic_algorithms(False)  # PyTorch's CUDA CTC backward is refused
    torch_s, _, _ = _timed(_pytorch_cuda, logits, lengths, targets.to(device),
                           target_lengths.to(device), args.repeats)
    name = torch.cuda.get_device_name(device)
    print(f"device {name}; batch {args.batch_size}, {args.frames} frames, {args.labels} labels, "
          f"{args.classes} classes; CPU kernel on {args.threads} threads")
    print(f"cpu kernel  {cpu_s * 1e3:9.1f} ms  loss {cpu_loss:.6e}")
    print(f"gpu kernels {gpu_s * 1e3:9.1f} ms  loss {gpu_loss:.6e}")
    print(f"pytorch cuda {torch_s * 1e3:8.1f} ms  (not deterministic)")
    print(f"loss relative difference {abs(cpu_loss - gpu_loss) / abs(cpu_loss):.2e}; "
          f"largest gradient difference {(cpu_grad - gpu_grad).abs().max().item():.2e} "
          f"(largest gradient {cpu_grad.abs().max().item():.2e})")
    print(f"gpu kernels' gradient bitwise the same on a second run: {torch.equal(gpu_grad, again)}")
    return 0

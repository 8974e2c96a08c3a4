"""A micro-batch's forward, CTC loss and backward replayed as a CUDA graph, one per shape.

On a GPU the eager step is bound by launching kernels: cuDNN's recurrence alone issues
thousands of small ones per step and the host cannot enqueue them as fast as the GPU runs
them. A graph replays the recorded sequence with one launch.

A graph fixes every shape, so each micro-batch is padded up to its shape class: its
batch size, its frames rounded up on a ladder of eight sizes per octave (at most an
eighth more frames), its longest transcript likewise. Padding cannot change what a valid
frame sees (``deepspeech/model/layers.py``), so it changes the result only as far as
float arithmetic over another shape does, and the rounding is a pure function of the
batch: runs stay bit for bit reproducible.

The first micro-batch of a shape is first rehearsed eagerly, padded as the graph will
be, leaving no trace (``no_trace``: statistics, RNG and gradients restored): it makes
cuDNN's plans, cuBLAS's workspace and the Triton kernels, which a capture cannot do.
Then the graph is captured and replayed, for this micro-batch and every later one of
the shape. So every micro-batch's result is a replay's: eager and replayed gradients
differ in their last bits on an H100 (losses agree), and a resumed run, which meets
its shapes for the first time at another step, must give the uninterrupted run's bits.
Gradients
accumulate into tensors this object owns and hangs on the parameters before each
micro-batch, so that every graph adds into the same memory. The gradient all-reduce,
clipping and the optimizer's update run eagerly after the replays: a few fused kernels,
and the learning rate changes every step.

Where capture is refused, micro-batches run eagerly and the log says why, once: off a
GPU, under the overlapped all-reduce (its hooks fire while gradients are produced),
past ``MAX_GRAPHS`` shapes, or when the capture itself fails (that shape stays eager).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from deepspeech.data.dataset import Batch, longest_transcript
from deepspeech.model.deepspeech2 import check_lengths
from deepspeech.training.determinism import no_trace
from deepspeech.training.step import compute_loss

log = logging.getLogger(__name__)

MAX_GRAPHS = 64
"""Shapes captured at most: each graph keeps its padded inputs on the GPU."""
FRAME_STEP = 16
"""The finest rounding of the frame count (feature frames)."""
LABEL_STEP = 8
"""The finest rounding of the transcripts' width (labels)."""

ShapeClass = tuple[int, int, int]
"""(utterances, padded frames, padded label width)."""


def rounded_up(n: int, finest: int) -> int:
    """``n`` rounded up to a multiple of an eighth of the power of two at or below it, and
    of ``finest``: at most an eighth of padding, eight sizes per octave."""
    step = max(finest, (1 << max(n.bit_length() - 1, 0)) // 8)
    return -(-n // step) * step


def shape_class(batch: Batch) -> ShapeClass:
    """The padded shape ``batch`` runs at."""
    return (batch.size, rounded_up(batch.features.shape[2], FRAME_STEP),
            rounded_up(max(longest_transcript(batch.target_lengths), 1), LABEL_STEP))


def padded_batch(batch: Batch, shape: ShapeClass) -> Batch:
    """``batch`` padded to ``shape``: zero frames, and targets to ``utterances * width``
    labels (past each transcript's length nothing is read)."""
    utterances, frames, width = shape
    features = F.pad(batch.features, (0, frames - batch.features.shape[2]))
    targets = F.pad(batch.targets, (0, utterances * width - batch.targets.numel()))
    return Batch(features, batch.feature_lengths, targets, batch.target_lengths, batch.indices)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: Batch
    """The padded batch the graph reads, on the GPU: each replay's batch is copied in."""
    divisor: Tensor
    loss: Tensor


class GraphedMicroBatches:
    """Forward, loss and backward of micro-batches through CUDA graphs (module docstring)."""

    def __init__(self, model: nn.Module, device: torch.device,
                 autocast_dtype: torch.dtype | None, scaler: torch.amp.GradScaler) -> None:
        self.model, self.device, self.autocast_dtype, self.scaler = (
            model, device, autocast_dtype, scaler)
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.gradients = [torch.zeros_like(p) for p in self.parameters]
        self.graphs: dict[ShapeClass, _Graph] = {}
        self.rehearsed: set[ShapeClass] = set()
        self.refused: set[ShapeClass] = set()
        self.pool = torch.cuda.graph_pool_handle()
        self.captures = self.replays = 0

    def loss_and_backward(self, batch: Batch, global_size: int) -> Tensor:
        """``batch``'s summed CTC loss over ``global_size`` (a GPU scalar, detached), its
        gradient added to the parameters' ``.grad``."""
        self.attach_gradients()
        shape = shape_class(batch)
        check_lengths(batch.feature_lengths, batch.features.shape[2])  # a graph cannot
        padded = padded_batch(batch, shape)
        if shape not in self.rehearsed:
            self._rehearse(padded, shape)
        graph = self.graphs.get(shape)
        if graph is None and shape not in self.refused:
            graph = self._capture(padded, shape)
        if graph is None:
            loss = self._loss(padded, shape) / global_size
            self.scaler.scale(loss).backward()
            return loss.detach()
        _copy_into(graph.inputs, padded)
        graph.divisor.fill_(global_size)
        graph.graph.replay()
        self.replays += 1
        return graph.loss

    def attach_gradients(self) -> None:
        """Hang this object's gradient tensors on the parameters (zeroed where a parameter
        had none, holding its gradient where it had another tensor)."""
        for parameter, gradient in zip(self.parameters, self.gradients, strict=True):
            if parameter.grad is None:
                gradient.zero_()
            elif parameter.grad is not gradient:
                gradient.copy_(parameter.grad)
            parameter.grad = gradient

    def _loss(self, padded: Batch, shape: ShapeClass) -> Tensor:
        return compute_loss(self.model, padded, self.device, self.autocast_dtype,
                            label_width=shape[2])

    def _rehearse(self, padded: Batch, shape: ShapeClass) -> None:
        """The shape's forward and backward once, eagerly, leaving no trace."""
        kept = [gradient.clone() for gradient in self.gradients]
        with no_trace(self.model):  # which leaves the parameters without gradients
            self.scaler.scale(self._loss(padded, shape)).backward()
        for parameter, gradient, before in zip(self.parameters, self.gradients, kept,
                                               strict=True):
            parameter.grad = gradient.copy_(before)
        self.rehearsed.add(shape)

    def _capture(self, padded: Batch, shape: ShapeClass) -> _Graph | None:
        if len(self.graphs) >= MAX_GRAPHS:
            self._refuse(shape, f"{MAX_GRAPHS} shapes are captured already")
            return None
        inputs = Batch(*(t.to(self.device, copy=True) for t in (
            padded.features, padded.feature_lengths, padded.targets, padded.target_lengths)),
            indices=padded.indices)
        divisor = torch.ones((), device=self.device)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        try:
            # thread_local: the loader's pin-memory thread may call CUDA meanwhile.
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                loss = self._loss(inputs, shape) / divisor
                self.scaler.scale(loss).backward()
        except RuntimeError as error:
            torch.cuda.synchronize(self.device)
            self._refuse(shape, str(error).strip().splitlines()[0])
            return None
        self.captures += 1
        self.graphs[shape] = _Graph(graph, inputs, divisor, loss.detach())
        log.info("CUDA graph captured for %d utterances x %d frames (%d labels); %d shape(s) "
                 "so far", *shape, len(self.graphs))
        return self.graphs[shape]

    def _refuse(self, shape: ShapeClass, reason: str) -> None:
        self.refused.add(shape)
        log.warning("CUDA graph refused for %d utterances x %d frames (%d labels): %s; that "
                    "shape runs eagerly", *shape, reason)


def graphs_refused_because(device: torch.device, gradient_hooks: bool) -> str | None:
    """Why this run's micro-batches cannot replay CUDA graphs at all, or None."""
    if device.type != "cuda":
        return f"the run is on {device.type}, not a CUDA device"
    if gradient_hooks:
        return ("the overlapped all-reduce starts on each gradient as backward produces it "
                "(distributed.deterministic=true reduces after backward and can)")
    return None


def _copy_into(inputs: Batch, padded: Batch) -> None:
    for static, new in ((inputs.features, padded.features),
                        (inputs.feature_lengths, padded.feature_lengths),
                        (inputs.targets, padded.targets),
                        (inputs.target_lengths, padded.target_lengths)):
        static.copy_(new, non_blocking=True)

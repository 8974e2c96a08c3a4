"""DeepSpeech2's layers, each in every form the model's paths call, each padding-proof.

Every layer of the stack (``DeepSpeech2.sequence_layers`` then ``frame_layers``)
carries its own forms: the training/offline ``forward``, the fixed-shape
``forward_every_frame`` that export traces, the chunked ``stream`` step and its
``flops``. A new layer is one class here, listed once in ``DeepSpeech2``.

A batch holds utterances of different lengths padded to the longest. Three things
would let the padding change a real frame's output, and each layer closes one:

* a convolution reads its neighbours, so every conv layer's output is zeroed past
  the utterance's own length before the next layer reads it (an utterance alone
  sees the same zeros as its conv padding);
* batch norm in training normalizes with batch statistics, so ``MaskedBatchNorm2d``
  (after each conv) counts valid frames only and the RNN's sequence-wise batch norm
  normalizes the valid frames only;
* a recurrence runs on past the end: a forward RNN reads only the past, so padding
  after the end cannot reach a valid frame; a backward RNN runs forward over each
  utterance reversed within its own length (valid frames first, padding after).

The convolutions' time arithmetic lives here too (``conv_output_size``,
``time_stride``, ``future_frames``); the last two take the conv config, so that
callers holding a config but no model (export sidecars, streaming latency) share it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from deepspeech.config import ConvConfig
from deepspeech.model.mode import CPU_MODE, ModelMode
from deepspeech.model.rnn_kernels import RNN_KERNELS

# DS2's clipped ReLU: min(max(x, 0), 20).
CLIP = 20.0


def conv_output_size(size: int | Tensor, kernel: int, stride: int) -> int | Tensor:
    """Frames (or bins) out of one conv layer with ``kernel // 2`` padding on each side."""
    padded = size + 2 * (kernel // 2) - kernel
    if isinstance(padded, Tensor):
        # Not ``//``: the ONNX exporter writes it as truncation, which differs below zero.
        return torch.div(padded, stride, rounding_mode="floor") + 1
    return padded // stride + 1


def time_stride(config: ConvConfig) -> int:
    """Input frames per output frame: the product of the convolutions' time strides."""
    return math.prod(st for _, st in config.strides)


def future_frames(config: ConvConfig) -> int:
    """Input frames past ``j * time_stride(config)`` that the convolutions' output j reads.

    A layer's output m reads its input up to ``m * stride + (kernel - 1 - kernel // 2)``;
    each layer's reach counts in the input frames of all the strides before it.
    """
    frames, stride_before = 0, 1
    for (_, kt), (_, st) in zip(config.kernels, config.strides, strict=True):
        frames += (kt - 1 - kt // 2) * stride_before
        stride_before *= st
    return frames


def time_mask(lengths: Tensor, frames: int | Tensor) -> Tensor:
    """Boolean ``[B, frames]``: True where the frame lies inside the utterance."""
    return torch.arange(frames, device=lengths.device)[None, :] < lengths[:, None]


def reverse_within(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each ``[T, D]`` sequence of ``x`` within its own length; padding stays put."""
    t = torch.arange(x.shape[1], device=x.device)[None, :]
    index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return x.gather(1, index[:, :, None].expand_as(x))


class SequenceLayer(nn.Module):
    """A layer that reads neighbouring frames: padded ``[B, T, D]`` batches and lengths ``[B]``.

    * ``forward(x, lengths) -> (y, lengths)``: training and offline; ``y`` is zero past
      each length, so the next layer reads what the utterance alone would give it;
    * ``forward_every_frame(x, lengths) -> (y, lengths)``: eval mode, fixed-shape
      operations only (export traces it): the same valid frames, anything past them;
    * ``stream(x, state, final) -> (y, state)``: the next chunk of a batch of streams and
      what the layer kept from the chunks before (None at first) -> the frames that are
      now final; ``final`` adds the offline right-hand padding and flushes;
    * ``flops(frames)``: FLOPs over one utterance of ``frames`` input frames;
    * ``output_lengths(lengths)``: frames out for ``lengths`` frames in.
    """

    def forward_every_frame(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError(f"{type(self).__name__}.forward_every_frame")

    def stream(self, x: Tensor, state: Any, final: bool) -> tuple[Tensor, Any]:
        raise NotImplementedError(f"{type(self).__name__}.stream")

    def flops(self, frames: int) -> int:
        raise NotImplementedError(f"{type(self).__name__}.flops")

    def output_lengths(self, lengths: int | Tensor) -> int | Tensor:
        return lengths


class FrameLayer(nn.Linear):
    """A linear layer that maps each frame alone, ``[..., D]`` -> ``[..., D']``.

    One function serves every path; training runs it on the valid frames only. Its
    other forms are those of ``SequenceLayer``, with nothing to carry between chunks.
    """

    def forward_every_frame(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self(x), lengths

    def stream(self, x: Tensor, state: None, final: bool) -> tuple[Tensor, None]:
        return self(x.reshape(-1, x.shape[-1])).view(*x.shape[:-1], self.out_features), None

    def flops(self, frames: int) -> int:
        return 2 * self.weight.numel() * frames

    def output_lengths(self, lengths: int | Tensor) -> int | Tensor:
        return lengths


def normalize_valid_frames(norm: nn.modules.batchnorm._BatchNorm, x: Tensor,
                           mask: Tensor) -> Tensor:
    """Training batch norm of ``[B, C, H, T]`` maps with statistics over the frames where
    ``mask`` ``[B, T]`` is True, the running statistics updated as ``nn.BatchNorm`` does.

    Fixed shapes and no host round trip: padding frames are normalized too (with the valid
    frames' statistics) and the caller zeroes or ignores them.
    """
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()  # statistics in float32 even when autocast ran the conv in half
    weights = mask[:, None, None, :].to(x.dtype)
    count = weights.sum() * x.shape[2]
    mean = (x * weights).sum(dim=(0, 2, 3)) / count
    centered = x - mean[None, :, None, None]
    var = (centered.square() * weights).sum(dim=(0, 2, 3)) / count
    with torch.no_grad():
        norm.num_batches_tracked += 1
        factor = norm.momentum if norm.momentum is not None \
            else 1.0 / float(norm.num_batches_tracked)
        # Running variance is unbiased, as nn.BatchNorm keeps it.
        unbiased = var * (count / (count - 1).clamp_min(1))
        norm.running_mean.lerp_(mean.detach(), factor)
        norm.running_var.lerp_(unbiased.detach(), factor)
    y = centered * torch.rsqrt(var + norm.eps)[None, :, None, None]
    if norm.affine:
        y = y * norm.weight[None, :, None, None] + norm.bias[None, :, None, None]
    return y


ValidFrameNorm = Callable[[nn.modules.batchnorm._BatchNorm, Tensor, Tensor], Tensor]
"""``normalize_valid_frames`` or a kernel computing the same: ``(norm, x, mask) -> y``."""


def valid_frame_norm(mode: ModelMode) -> ValidFrameNorm:
    """The training batch norm over valid frames that ``mode`` asks for."""
    if mode.batch_norm == "fused":
        from deepspeech.model.kernels.batch_norm import fused_normalize_valid_frames

        return fused_normalize_valid_frames
    return normalize_valid_frames


class MaskedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics count only the frames inside each utterance.

    ``mask`` is ``[B, T]`` over the last (time) dimension. In eval mode, or without
    a mask, it is exactly ``nn.BatchNorm2d``; the state dict is the same too.
    """

    def __init__(self, channels: int, normalize: ValidFrameNorm = normalize_valid_frames
                 ) -> None:
        super().__init__(channels)
        self.normalize = normalize

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None or not self.training or not self.track_running_stats:
            return super().forward(x)
        return self.normalize(self, x, mask)


def _as_frames(x: Tensor) -> Tensor:
    """``[B, C, bins, T]`` conv maps -> ``[B, T, C * bins]`` frames."""
    batch, channels, bins, frames = x.shape
    return x.permute(0, 3, 1, 2).reshape(batch, frames, channels * bins)


class ConvFrontEnd(SequenceLayer):
    """2D convolutions over (frequency, time), each followed by batch norm and clipped ReLU.

    The stack's first layer: it takes the features, ``[B, bins, T]``, and hands on
    ``[B, T', channels * bins']`` frames.
    """

    def __init__(self, config: ConvConfig, num_bins: int, mode: ModelMode = CPU_MODE) -> None:
        super().__init__()
        self.num_bins = num_bins
        self.kernels = [tuple(k) for k in config.kernels]
        self.strides = [tuple(s) for s in config.strides]
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        channels, bins = 1, num_bins
        layers = zip(config.channels, self.kernels, self.strides, strict=True)
        for out, (kf, kt), (sf, st) in layers:
            # No bias: the batch norm right after has one.
            self.convs.append(nn.Conv2d(channels, out, (kf, kt), (sf, st),
                                        padding=(kf // 2, kt // 2), bias=False))
            self.norms.append(MaskedBatchNorm2d(out, valid_frame_norm(mode)))
            channels, bins = out, conv_output_size(bins, kf, sf)
            if bins < 1:
                raise ValueError(f"model.conv: {num_bins} frequency bins shrink to nothing "
                                 f"after layer {len(self.convs)}; use smaller kernels/strides")
        self.output_size = channels * bins

    def output_lengths(self, lengths: int | Tensor) -> int | Tensor:
        """Frames out of the last layer for ``lengths`` input frames."""
        for (_, kt), (_, st) in zip(self.kernels, self.strides, strict=True):
            lengths = conv_output_size(lengths, kt, st)
        return lengths

    def forward(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, bins, T]`` -> ``[B, T', C * bins']`` (zero past each length), lengths'."""
        x = features.unsqueeze(1)
        # masked_fill, not a product: padding may hold anything, even inf or NaN.
        x = x.masked_fill(~time_mask(lengths, x.shape[-1])[:, None, None, :], 0.0)
        for conv, norm, (_, kt), (_, st) in zip(self.convs, self.norms, self.kernels,
                                                self.strides, strict=True):
            x = conv(x)
            lengths = conv_output_size(lengths, kt, st)
            mask = time_mask(lengths, x.shape[-1])
            x = F.hardtanh(norm(x, mask), 0.0, CLIP)
            x = x.masked_fill(~mask[:, None, None, :], 0.0)
        return _as_frames(x), lengths

    def forward_every_frame(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``forward`` is traceable as it is (its masks are fixed-shape ``masked_fill``)."""
        return self(features, lengths)

    def stream(self, features: Tensor, state: tuple[list[Tensor | None], list[int]] | None,
               final: bool) -> tuple[Tensor, tuple[list[Tensor | None], list[int]]]:
        """Consume ``[B, bins, t]`` more features; return the conv frames now complete.

        The state holds, per layer, the input frames not yet fully used, in the layer's
        padded time coordinates (it starts with the ``kt // 2`` frames of left zero
        padding; the kernel reaches ``kt // 2`` frames into the future, so output lags
        input), and the frames still to drop when a stride is longer than the kernel.
        """
        pending, skip = state or ([None] * len(self.convs), [0] * len(self.convs))
        pending, skip = list(pending), list(skip)
        x = features.unsqueeze(1)
        for i, (conv, norm, (kf, kt), (_, st)) in enumerate(
                zip(self.convs, self.norms, self.kernels, self.strides, strict=True)):
            pad = kt // 2
            if pending[i] is None:
                pending[i] = x.new_zeros(*x.shape[:3], pad)
            parts = [pending[i], x]
            if final:
                parts.append(x.new_zeros(*x.shape[:3], pad))
            buffer = torch.cat(parts, dim=-1)
            dropped = min(skip[i], buffer.shape[-1])
            buffer, skip[i] = buffer[..., dropped:], skip[i] - dropped
            ready = (buffer.shape[-1] - kt) // st + 1 if buffer.shape[-1] >= kt else 0
            if ready:
                window = buffer[..., :(ready - 1) * st + kt]
                y = F.conv2d(window, conv.weight, None, conv.stride, (kf // 2, 0))
                x = F.hardtanh(norm(y), 0.0, CLIP)
            else:
                x = buffer.new_zeros(x.shape[0], conv.out_channels,
                                     conv_output_size(x.shape[2], kf, conv.stride[0]), 0)
            pending[i] = buffer[..., ready * st:]
            skip[i] += max(ready * st - buffer.shape[-1], 0)
        return _as_frames(x), (pending, skip)

    def flops(self, frames: int) -> int:
        flops, bins = 0, self.num_bins
        for conv, (kf, kt), (sf, st) in zip(self.convs, self.kernels, self.strides,
                                            strict=True):
            bins, frames = conv_output_size(bins, kf, sf), conv_output_size(frames, kt, st)
            flops += 2 * conv.weight.numel() * bins * frames
        return flops


class RecurrentLayer(SequenceLayer):
    """Sequence-wise batch norm (optional), a GRU/LSTM, then dropout, on ``[B, T, D]`` frames.

    Each direction is its own unidirectional RNN over the padded tensor (the
    backward one over each utterance reversed within its length), built by the
    kernel that ``execution.rnn_kernel`` names (``rnn_kernels.py``). Not packed
    sequences: on the CPU, PyTorch's packed GRU slices its precomputed input
    gates per time step, and the backward pass of every slice fills a zero tensor
    of the full sequence's size, which is quadratic in the length (48% of the
    quickstart model's training step at 3.2 s, more on longer utterances).

    Bidirectional outputs are summed, as in deepspeech.pytorch: the next layer's
    input stays ``hidden`` wide and the parameter count stays that of DS2's
    published sizes.
    """

    def __init__(self, input_size: int, hidden: int, kind: str, bidirectional: bool,
                 batch_norm: bool, mode: ModelMode, dropout: float) -> None:
        super().__init__()
        self.mode = mode
        self.normalize = valid_frame_norm(mode)
        # Sequence-wise: statistics over every valid (utterance, frame) pair.
        self.norm = nn.BatchNorm1d(input_size) if batch_norm else None
        build_rnn = RNN_KERNELS[mode.rnn_kernel]
        self.forward_rnn = build_rnn(kind, input_size, hidden)
        self.backward_rnn = build_rnn(kind, input_size, hidden) if bidirectional else None
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.hidden = hidden
        self._register_load_state_dict_pre_hook(_split_bidirectional_weights)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, T, D]`` -> ``[B, T, hidden]``, zero past each length."""
        valid = time_mask(lengths, x.shape[1])
        if self.norm is not None:
            x = self._normalize_valid(x, valid)
        y = self.recur(x, lengths).masked_fill(~valid[..., None], 0.0)
        return self.dropout(y), lengths

    def _normalize_valid(self, x: Tensor, valid: Tensor) -> Tensor:
        """Sequence-wise batch norm, its statistics over the valid frames.

        Training in the fixed-shape mode (a GPU's) normalizes every frame with masked
        statistics: no host round trip, so the step can be captured as a CUDA graph.
        Otherwise only the valid frames are gathered and normalized: less work on a CPU,
        and the arithmetic the CPU recipes' weights were trained with.
        """
        if self.mode.fixed_shapes and self.training and self.norm.track_running_stats:
            frames = x.transpose(1, 2).unsqueeze(2)  # [B, D, 1, T]: D as channels
            y = self.normalize(self.norm, frames, valid).squeeze(2).transpose(1, 2)
            return y.to(x.dtype)
        return x.masked_scatter(valid[..., None], self.norm(x[valid]).to(x.dtype))

    def recur(self, x: Tensor, lengths: Tensor) -> Tensor:
        """The recurrence alone: both directions' outputs summed; frames past each length
        hold whatever the padding produced."""
        out, _ = self.forward_rnn(x)
        if self.backward_rnn is not None:
            backward, _ = self.backward_rnn(reverse_within(x, lengths))
            out = out + reverse_within(backward, lengths)
        return out

    def forward_every_frame(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.recur(self._normalize_every_frame(x), lengths), lengths

    def stream(self, x: Tensor, state: Tensor | tuple[Tensor, Tensor] | None, final: bool
               ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor] | None]:
        """Unidirectional only: the state is the hidden state (and cell state for an LSTM)."""
        if not x.shape[1]:  # the convolutions still wait for future frames
            return x.new_zeros(x.shape[0], 0, self.hidden), state
        return self.forward_rnn(self._normalize_every_frame(x), state)

    def flops(self, frames: int) -> int:
        # Per frame and direction: a multiply-add for each input and recurrent weight.
        directions = 1 if self.backward_rnn is None else 2
        weights = self.forward_rnn.weight_ih_l0.numel() + self.forward_rnn.weight_hh_l0.numel()
        return directions * 2 * weights * frames

    def _normalize_every_frame(self, x: Tensor) -> Tensor:
        """Batch norm on every frame, padding included: in eval mode a per-frame affine map."""
        if self.norm is None:
            return x
        return self.norm(x.reshape(-1, x.shape[-1])).view(x.shape)


def _split_bidirectional_weights(state_dict: dict, prefix: str, *_: object) -> None:
    """Checkpoints written before the directions were split held one ``rnn`` module."""
    old = prefix + "rnn."
    for key in [k for k in state_dict if k.startswith(old)]:
        name = key[len(old):]
        direction = "backward_rnn." if name.endswith("_reverse") else "forward_rnn."
        state_dict[prefix + direction + name.removesuffix("_reverse")] = state_dict.pop(key)


class Lookahead(SequenceLayer):
    """DS2's row convolution: each channel mixes the current and ``context`` future frames.

    Depthwise over time; frames past the end of the utterance count as zeros.
    """

    def __init__(self, channels: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.conv = nn.Conv1d(channels, channels, context + 1, groups=channels, bias=False)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``[B, T, H]``, zero past each length (as the layers before leave it) -> ``[B, T, H]``."""
        y = self.conv(F.pad(x.transpose(1, 2), (0, self.context)))
        return F.hardtanh(y.transpose(1, 2), 0.0, CLIP), lengths

    def forward_every_frame(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self(x.masked_fill(~time_mask(lengths, x.shape[1])[:, :, None], 0.0), lengths)

    def stream(self, x: Tensor, state: Tensor | None, final: bool) -> tuple[Tensor, Tensor]:
        """The state is the last ``context`` input frames, whose future has not arrived."""
        parts = [x] if state is None else [state, x]
        if final:
            parts.append(x.new_zeros(x.shape[0], self.context, x.shape[2]))
        buffer = torch.cat(parts, dim=1)
        ready = max(buffer.shape[1] - self.context, 0)
        window = buffer[:, :ready + self.context].transpose(1, 2)
        y = F.conv1d(window, self.conv.weight, groups=self.conv.groups) if ready \
            else buffer.new_zeros(buffer.shape[0], buffer.shape[2], 0)
        return F.hardtanh(y.transpose(1, 2), 0.0, CLIP), buffer[:, ready:]

    def flops(self, frames: int) -> int:
        return 2 * self.conv.weight.numel() * frames


class FullyConnected(FrameLayer):
    """Linear, clipped ReLU, dropout."""

    def __init__(self, inputs: int, outputs: int, dropout: float) -> None:
        super().__init__(inputs, outputs)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(F.hardtanh(super().forward(x), 0.0, CLIP))


class CharacterOutput(FrameLayer):
    """Linear over the characters (blank = 0), log-softmax in float32 even under autocast."""

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(super().forward(x).float(), dim=-1)

"""The run configuration: one YAML file mapped onto typed dataclasses.

Configuration is data, validated once at the edge: ``load_config`` reads the
YAML, applies dotted command-line overrides (``train.epochs=3``), checks every
key, type and value, and returns a ``Config`` that the rest of the package
trusts. Errors name the key and the file. The resolved config is written beside
every run and into every checkpoint (``Config.to_dict``/``Config.from_dict``).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import logging
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from deepspeech.errors import ConfigError
from deepspeech.files import read_utf8

log = logging.getLogger(__name__)

EXISTING_FILE = {"path": "file"}
# A key, or a whole section, that a resumed run must keep as its checkpoint has it: it
# shapes the model, its input or output, or the data plan, so that a change could not
# continue bit for bit (deepspeech.training.resume refuses it by name). A key added to a
# kept section later is compared as its default where a checkpoint predates it.
KEPT_ON_RESUME = {"resume": "kept"}


@dataclass
class AugmentConfig:
    """Waveform augmentation in training only (Deep Speech 2: added noise), seeded per sample."""

    # Noise clips (a manifest; their text is ignored) mixed in with this probability;
    # without a manifest, generated white/pink/brown noise is used.
    noise_manifest: str = field(default="", metadata=EXISTING_FILE)
    noise_probability: float = 0.0
    snr_db: list[float] = field(default_factory=lambda: [10.0, 30.0])
    # Speed perturbation range (resampling: tempo and pitch change together).
    speed: list[float] = field(default_factory=lambda: [1.0, 1.0])
    gain_db: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # Share of samples passed through an 8 kHz telephone band (resampled down and back
    # up), so that the model also knows speech without its energy above 4 kHz.
    telephone_probability: float = 0.0
    # Vocal tract length perturbation (Jaitly and Hinton, 2013): the spectrum's frequency
    # axis is stretched by a factor from this range, as a longer or shorter vocal tract
    # would, while the tempo stays (speed perturbation changes both).
    vtlp: list[float] = field(default_factory=lambda: [1.0, 1.0])
    # Share of samples whose leading and trailing silence is cut off, so that the model
    # also knows speech that starts at the first sample (what a voice-activity detector
    # or a push-to-talk button hands over).
    trim_probability: float = 0.0
    # Share of samples heard through another microphone and room, so that a speaker's
    # channel is no cue to the words: an octave-band equalizer with a random tilt of up to
    # ±eq_db decibels at the outermost bands plus a random ripple of up to ±eq_db/2 per band.
    # Neither recipe gained from it (docs/RECIPES.md, FSDD f29, AN4 a44).
    eq_probability: float = 0.0
    eq_db: float = 10.0
    # Share of samples clipped as a microphone or converter driven too hard clips them, so
    # that a recording made too loud is no surprise: the waveform is cut off at a depth
    # drawn from clip_db decibels below its own peak, and its peak stays where it was.
    # Neither recipe takes it: it lowers WER on clipped input and costs 3 points on
    # recordings as they are (docs/RECIPES.md, FSDD f35, AN4 a52).
    clip_probability: float = 0.0
    clip_db: list[float] = field(default_factory=lambda: [0.0, 20.0])

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        for name in ("noise_probability", "telephone_probability", "trim_probability",
                     "eq_probability", "clip_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                fail(name, "must be in [0, 1]")
        for name in ("snr_db", "speed", "gain_db", "vtlp", "clip_db"):
            low_high = getattr(self, name)
            if len(low_high) != 2 or low_high[0] > low_high[1]:
                fail(name, f"must be [low, high] with low <= high, got {low_high}")
        if self.speed[0] <= 0.5 or self.speed[1] > 2.0:
            fail("speed", f"must lie in (0.5, 2.0], got {self.speed}")
        if self.vtlp[0] < 0.7 or self.vtlp[1] > 1.3:
            fail("vtlp", f"must lie in [0.7, 1.3], got {self.vtlp}")
        if not 0.0 < self.eq_db <= 30.0:
            fail("eq_db", f"must lie in (0, 30], got {self.eq_db}")
        if self.clip_db[0] < 0.0 or self.clip_db[1] > 40.0:
            fail("clip_db", f"must lie in [0, 40], got {self.clip_db}")

    @property
    def enabled(self) -> bool:
        return (self.noise_probability > 0 or self.speed != [1.0, 1.0]
                or self.gain_db != [0.0, 0.0] or self.telephone_probability > 0
                or self.vtlp != [1.0, 1.0] or self.trim_probability > 0
                or self.eq_probability > 0 or self.clip_probability > 0)


@dataclass
class MixConfig:
    """Another training manifest mixed in, as Deep Speech 2 mixed real and synthesized speech."""

    manifest: str = field(default="", metadata=EXISTING_FILE)
    # Utterances used as a multiple of the manifest's size: 0.25 keeps a seeded quarter,
    # 2 repeats it twice. The main manifest has weight 1.
    weight: float = 1.0

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if not self.manifest:
            fail("manifest", "a mixed-in manifest needs a path")
        if self.weight <= 0:
            fail("weight", f"must be positive, got {self.weight}")


@dataclass
class ShardsConfig:
    """How training reads a sharded manifest (``deepspeech data shard``): the order of
    utterances is the data plan, so a resume keeps both keys."""

    # offset: batches drawn from across the corpus as for loose files, each member read by
    # its byte range (SortaGrad, length buckets; the bits of the loose manifest).
    # sequential: each process reads whole shards, in a seeded order per epoch, through a
    # shuffle buffer (object stores, slow shared file systems): another order than offset,
    # so other weights; no SortaGrad, no train.batch_seconds (deepspeech.data.shard_stream).
    order: Literal["offset", "sequential"] = "offset"
    # Utterances held back and drawn at random as a shard streams past (sequential only):
    # the larger, the better the mix of neighbouring shards; 1 keeps the byte order.
    shuffle_buffer: int = 1000

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.shuffle_buffer < 1:
            fail("shuffle_buffer", f"must be at least 1 (1: no shuffling), got "
                                   f"{self.shuffle_buffer}")


@dataclass
class DataConfig:
    """Where the corpus is and which utterances to use."""

    train_manifest: str = field(default="", metadata=EXISTING_FILE)
    val_manifest: str = field(default="", metadata=EXISTING_FILE)
    sample_rate: int = field(default=16000, metadata=KEPT_ON_RESUME)
    # "english": letters, space, apostrophe; "build": every character seen in the
    # training transcripts (Mandarin, other scripts); or a path to a vocabulary file.
    vocabulary: str = field(default="english", metadata=KEPT_ON_RESUME)
    lowercase: bool = field(default=True, metadata=KEPT_ON_RESUME)
    strip_punctuation: bool = field(default=True, metadata=KEPT_ON_RESUME)
    min_duration: float = 0.0
    max_duration: float = 30.0
    # What to do with an utterance that cannot be used (unknown characters,
    # unreadable audio): stop with a full report, or skip it and count it. Training
    # checks audio headers before step one; a file that fails only when decoded (NaN
    # samples, a cut-off body) stops it with the `deepspeech data check` that finds them
    # all, or under skip is left out of its batch, with a warning, each time it is met.
    # Under skip the validation set is decoded in full before step one.
    bad_input: Literal["error", "skip"] = "error"
    num_workers: int = 2
    # More training manifests, each with its weight (real plus synthetic data).
    mix: list[MixConfig] = field(default_factory=list)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    shards: ShardsConfig = field(default_factory=ShardsConfig, metadata=KEPT_ON_RESUME)

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.sample_rate < 1000:
            fail("sample_rate", f"must be at least 1000 Hz, got {self.sample_rate}")
        if self.min_duration < 0:
            fail("min_duration", "must not be negative")
        if self.max_duration <= self.min_duration:
            fail("max_duration", "must be greater than data.min_duration")
        if self.num_workers < 0:
            fail("num_workers", "must not be negative")


@dataclass
class SpecAugmentConfig:
    """Frequency and time masks applied on the fly to training features only."""

    freq_masks: int = 0
    freq_width: int = 15
    time_masks: int = 0
    # Width of each time mask as a fraction of the utterance (adapts to length).
    time_width: float = 0.05

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        for name in ("freq_masks", "freq_width", "time_masks"):
            if getattr(self, name) < 0:
                fail(name, "must not be negative")
        if not 0.0 <= self.time_width <= 0.5:
            fail("time_width", "must be in [0, 0.5]")


@dataclass
class FeaturesConfig:
    """Spectrogram front end: Deep Speech 2's linear spectrogram by default."""

    kind: Literal["linear", "mel"] = "linear"
    window_ms: float = 20.0
    hop_ms: float = 10.0
    n_mels: int = 80
    # "utterance": zero mean, unit variance per utterance and frequency bin;
    # "global": statistics computed once on the training set and stored in the
    # checkpoint; "none": raw log(1 + x).
    normalize: Literal["utterance", "global", "none"] = "utterance"
    # 0: log(1 + x), Deep Speech 2's compression, which maps a quiet recording to
    # different features than a loud one. > 0: log(x) floored this many dB under the
    # utterance's loudest bin; with per-utterance normalization the features then do
    # not depend on the recording level (whole utterances only: not for streaming).
    dynamic_range_db: float = 0.0
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.window_ms <= 0 or self.hop_ms <= 0:
            fail("window_ms", "window_ms and hop_ms must be positive")
        if self.hop_ms > self.window_ms:
            fail("hop_ms", f"{self.hop_ms} ms is longer than the window ({self.window_ms} ms)")
        if self.n_mels < 1:
            fail("n_mels", "must be positive")
        if self.dynamic_range_db < 0:
            fail("dynamic_range_db", "must not be negative (0 keeps log(1 + x))")


@dataclass
class ConvConfig:
    """2D convolutions over (frequency, time); the first has stride 2 in time."""

    channels: list[int] = field(default_factory=lambda: [32, 32])
    # (frequency, time) per layer, as in Deep Speech 2's 41x11 and 21x11.
    kernels: list[list[int]] = field(default_factory=lambda: [[41, 11], [21, 11]])
    strides: list[list[int]] = field(default_factory=lambda: [[2, 2], [2, 1]])

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if not self.channels:
            fail("channels", "at least one convolution layer is required")
        if len(self.kernels) != len(self.channels) or len(self.strides) != len(self.channels):
            fail("kernels", "channels, kernels and strides must have one entry per layer")
        for name in ("kernels", "strides"):
            for pair in getattr(self, name):
                if len(pair) != 2 or min(pair) < 1:
                    fail(name, f"each entry must be [frequency, time] >= 1, got {pair}")
        if any(c < 1 for c in self.channels):
            fail("channels", "must be positive")


@dataclass
class RNNConfig:
    """The recurrent stack: bidirectional GRU or LSTM with sequence-wise batch norm."""

    kind: Literal["gru", "lstm"] = "gru"
    layers: int = 3
    hidden: int = 256
    bidirectional: bool = True
    batch_norm: bool = True
    # Future frames seen by the lookahead convolution of a unidirectional model.
    lookahead: int = 0

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.layers < 1:
            fail("layers", "must be at least 1")
        if self.hidden < 1:
            fail("hidden", "must be positive")
        if self.lookahead < 0:
            fail("lookahead", "must not be negative")
        if self.lookahead and self.bidirectional:
            fail("lookahead", "a lookahead convolution is for unidirectional models only")


@dataclass
class ModelConfig:
    """DeepSpeech2: convolutions, recurrent stack, fully connected output."""

    conv: ConvConfig = field(default_factory=ConvConfig)
    rnn: RNNConfig = field(default_factory=RNNConfig)
    # Width of the fully connected layer before the output; 0 goes straight to the output.
    fc_hidden: int = 0
    dropout: float = 0.0

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.fc_hidden < 0:
            fail("fc_hidden", "must not be negative")
        if not 0.0 <= self.dropout < 1.0:
            fail("dropout", "must be in [0, 1)")


@dataclass
class OptimConfig:
    """Optimizer and learning-rate schedule."""

    name: Literal["sgd", "adamw"] = field(default="sgd", metadata=KEPT_ON_RESUME)
    lr: float = 3e-4
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    warmup_steps: int = 0
    # "anneal": Deep Speech 2's division of the rate by `anneal` after every epoch;
    # "cosine": down to final_lr_fraction of the rate at the last step.
    schedule: Literal["constant", "anneal", "cosine"] = "anneal"
    anneal: float = 1.1
    final_lr_fraction: float = 0.01
    grad_clip: float = 400.0
    # Validate, keep and hand off an exponential moving average of the weights with this
    # decay per step (deepspeech.training.ema); 0 uses the weights as they are.
    ema_decay: float = field(default=0.0, metadata=KEPT_ON_RESUME)

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.lr <= 0:
            fail("lr", f"must be positive, got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            fail("momentum", "must be in [0, 1)")
        if self.weight_decay < 0:
            fail("weight_decay", "must not be negative")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            fail("betas", "must be two numbers in [0, 1)")
        if self.warmup_steps < 0:
            fail("warmup_steps", "must not be negative")
        if self.anneal < 1.0:
            fail("anneal", "must be at least 1 (the rate is divided by it each epoch)")
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            fail("final_lr_fraction", "must be in [0, 1]")
        if self.grad_clip < 0:
            fail("grad_clip", "must not be negative (0 disables clipping)")
        if not 0.0 <= self.ema_decay < 1.0:
            fail("ema_decay", f"must be in [0, 1) (0: no averaging), got {self.ema_decay}")
        if self.nesterov and self.name == "sgd" and self.momentum == 0:
            fail("nesterov", "Nesterov momentum needs optim.momentum > 0")


@dataclass
class TrainConfig:
    """The training loop."""

    output_dir: str = "runs/default"
    seed: int = field(default=0, metadata=KEPT_ON_RESUME)
    epochs: int = 10
    # Stop after this many optimizer steps (0: no limit); counts across resumes.
    max_steps: int = 0
    # Utterances per global batch; with batch_seconds, the most that one batch may hold.
    batch_size: int = field(default=16, metadata=KEPT_ON_RESUME)
    # Global batches sized by audio instead: up to this many seconds of it (by the
    # manifests' durations), from the same length buckets, so long utterances make small
    # batches (memory) and short ones large batches; an utterance longer than this alone
    # is a batch of its own. Steps per epoch then differ a little by epoch. 0: off.
    batch_seconds: float = field(default=0.0, metadata=KEPT_ON_RESUME)
    # Utterances per forward/backward; the batch is accumulated from micro-batches.
    micro_batch_size: int = field(default=0, metadata=KEPT_ON_RESUME)
    sortagrad: bool = field(default=True, metadata=KEPT_ON_RESUME)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Before the first step, run the micro-batch with the most padded audio of the first
    # epoch once, forward and backward, and leave no trace of it: a batch that does not fit
    # in memory then fails within a minute, not hours in (icefall's pessimistic batches).
    # auto: on CUDA devices, where memory is tight; off on the CPU.
    worst_batch_first: Literal["auto", True, False] = "auto"
    # Intra-op threads per process: part of the determinism contract, since
    # oneDNN's convolution gradients change with the thread count.
    num_threads: int = 2
    resume: str = field(default="", metadata=EXISTING_FILE)
    # Another run's weights to start from (a new vocabulary re-initializes the output);
    # with features.normalize global and the same input, its feature statistics too.
    init_from: str = field(default="", metadata=EXISTING_FILE)
    checkpoint_every: int = 200
    log_every: int = 10
    eval_batch_size: int = 32
    # Validation utterances used each epoch (0: all).
    val_limit: int = 0

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        for name in ("epochs", "batch_size", "num_threads", "checkpoint_every", "log_every",
                     "eval_batch_size"):
            if getattr(self, name) < 1:
                fail(name, f"must be at least 1, got {getattr(self, name)}")
        for name in ("max_steps", "micro_batch_size", "val_limit"):
            if getattr(self, name) < 0:
                fail(name, "must not be negative")
        if self.batch_seconds < 0:
            fail("batch_seconds", f"must not be negative (0: batches of train.batch_size "
                                  f"utterances), got {self.batch_seconds:g}")
        if self.batch_seconds and self.micro_batch_size > self.batch_size:
            fail("micro_batch_size",
                 f"must not exceed train.batch_size ({self.batch_size}), the most utterances "
                 f"a batch of train.batch_seconds holds; got {self.micro_batch_size}")
        if (not self.batch_seconds and self.micro_batch_size
                and self.batch_size % self.micro_batch_size):
            fail("micro_batch_size",
                 f"must divide train.batch_size ({self.batch_size}), got {self.micro_batch_size}")
        if not self.output_dir:
            fail("output_dir", "must not be empty")
        if self.resume and self.init_from:
            fail("init_from", "give either train.resume or train.init_from, not both")
        if not isinstance(self.worst_batch_first, bool) and self.worst_batch_first != "auto":
            fail("worst_batch_first", f"must be auto, true or false, got "
                                      f"{self.worst_batch_first!r}")


@dataclass
class DistributedConfig:
    """Data-parallel training across processes."""

    # Who sums the gradients. ``ring``: the bundled all-reduce (deepspeech.distributed) as
    # a whole, not only its ring algorithm: per bucket size it runs the pipelined ring,
    # recursive doubling or the node-aware variant, or what an allreduce_tuning file says.
    # ``mpi``: the MPI library's MPI_Allreduce. ``torch``: torch.distributed (gloo; NCCL
    # for CUDA tensors).
    backend: Literal["ring", "mpi", "torch"] = "ring"
    # Bitwise-identical weights whatever the number of processes (fixed-point sums).
    deterministic: bool = False
    bucket_mb: float = 25.0
    timeout_s: float = 300.0
    # Rules file of `deepspeech bench allreduce --tune` (which algorithm for which bucket
    # size, measured on this machine); empty: $DEEPSPEECH_ALLREDUCE_TUNING, else built-in.
    allreduce_tuning: str = field(default="", metadata=EXISTING_FILE)

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.bucket_mb <= 0:
            fail("bucket_mb", "must be positive")
        if self.timeout_s <= 0:
            fail("timeout_s", "must be positive")


AUTO_TRUE_FALSE = ("auto", True, False)


@dataclass
class ExecutionConfig:
    """How a run computes, apart from what the model is: every key here leaves the weights'
    shapes alone, so checkpoints and packages load under any setting.

    ``deepspeech.execution.resolve_plan`` settles each ``auto`` once per run, applies the
    environment's overrides and logs the result. A resumed run may change any of these;
    one that alters the arithmetic is named with a warning that the results will differ
    from the run before.
    """

    # The recurrence's implementation, one of deepspeech/model/rnn_kernels.py's RNN_KERNELS:
    # "torch" is torch.nn.GRU/LSTM (cuDNN on a GPU). "persistent" (GRU only): the project's
    # Triton recurrence, every time step in one launch per pass on a GPU, bitwise
    # reproducible (torch.nn.GRU's own loop on CPU tensors).
    rnn_kernel: Literal["torch", "persistent"] = "torch"
    # Training batch norm over the valid frames on a GPU: "torch", a dozen element-wise
    # kernels forward and as many backward, or "fused", the project's Triton passes
    # (deepspeech/model/kernels/batch_norm.py: three reads forward, two backward; float32
    # statistics, bitwise reproducible, equal to torch's to float rounding). The CPU
    # keeps the torch form, the arithmetic its recipes' weights were trained with.
    batch_norm: Literal["torch", "fused"] = "torch"
    # Mixed precision: the dtype autocast runs matrix work in (fp16 on CUDA only, with a
    # loss scaler).
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # Replay each micro-batch's forward, loss and backward as a CUDA graph, one per padded
    # shape (deepspeech/training/cuda_graphs.py): the eager step spends its time launching
    # kernels. auto: on CUDA devices, where graphs can run; true where they cannot is refused.
    cuda_graphs: Literal["auto", True, False] = "auto"
    # Where training features are computed: in the loader workers, utterance by utterance,
    # or on train.device, batched, from waveforms the workers only decode (and augment).
    # On an H100 with 16 workers both fed about 7,400x real time: decoding, not the
    # features, bounds the loader there. The two agree to float rounding, not bit for bit.
    features_on: Literal["workers", "device"] = "workers"
    # The all-reduce reads the GPU buffers of the node's other ranks through CUDA IPC from
    # 1 MiB up instead of staging them through host memory. auto: off (the all-reduce alone
    # is measured on a GPU, training through it is not yet); DEEPSPEECH_CUDA_IPC=0|1
    # overrides.
    cuda_ipc: Literal["auto", True, False] = "auto"
    # Hand GPU buffers to MPI directly. auto: where the MPI library says it is CUDA-aware
    # (Open MPI's MPIX_Query_cuda_support); otherwise they are staged through pinned host
    # memory, which is always correct. DEEPSPEECH_MPI_CUDA_AWARE=0|1 overrides.
    mpi_cuda_aware: Literal["auto", True, False] = "auto"

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        for name in ("cuda_graphs", "cuda_ipc", "mpi_cuda_aware"):
            value = getattr(self, name)
            if not isinstance(value, bool) and value != "auto":
                fail(name, f"must be auto, true or false, got {value!r}")


MOVED_KEYS = {
    "model.rnn.kernel": "execution.rnn_kernel",
    "train.precision": "execution.precision",
    "train.cuda_graphs": "execution.cuda_graphs",
    "data.features_on": "execution.features_on",
}
"""Keys of earlier releases -> where they live now: configs, checkpoints and packages
written before the execution section still load (``moved_keys``)."""


def moved_keys(data: dict[str, Any], source: str) -> list[str]:
    """Move ``MOVED_KEYS`` found in plain config ``data`` to their new place, in place;
    returns a note for each. Both places given at once is refused: which one was meant?"""
    notes = []
    for old, new in MOVED_KEYS.items():
        *old_sections, old_key = old.split(".")
        parent = data
        for section in old_sections:
            parent = parent.get(section) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or old_key not in parent:
            continue
        new_section, new_key = new.split(".")
        target = data.setdefault(new_section, {})
        if not isinstance(target, dict):
            continue  # the builder names the section that is not a mapping
        if new_key in target:
            raise ConfigError(f"{source}: {old} and {new} are both given; {old} is {new} "
                              f"now: keep only {new}")
        target[new_key] = parent.pop(old_key)
        notes.append(f"{old} is {new} now")
    return notes


# Bounds on the beam search, so that a slip of the keyboard is refused rather than run.
# flashlight's decoder keeps up to ``beam`` hypotheses for every output frame, so memory
# and time grow with beam x frames: on 4 s of audio (CPU, no LM) beam 2000 took 2.3 s and
# 2 GB at peak, 5000 took 7 s and 4 GB, and 10^8 had filled 15 GB on 16 utterances when
# it was stopped. WER stops improving far below 5000: the default and the recipes use 50.
MAX_BEAM = 5000
# lm_weight scales the LM's log-probability and word_bonus is added per word. Tuned values
# (docs/RECIPES.md) and decode tune's default grid lie within [0, 2] and [-1, 2]; past 100
# one term outweighs everything else (lm_weight 1e308 deleted every word). A negative LM
# weight would favour the words the LM finds unlikely: 0 turns the LM off.
MAX_DECODE_WEIGHT = 100.0


@dataclass
class DecodeConfig:
    """Turning CTC outputs into text."""

    mode: Literal["greedy", "beam"] = "greedy"
    lm: str = field(default="", metadata=EXISTING_FILE)
    lexicon: str = field(default="", metadata=EXISTING_FILE)
    beam: int = 50
    lm_weight: float = 0.5
    word_bonus: float = 0.0
    beam_threshold: float = 25.0
    # Vocal tract length normalization: each utterance's features are computed at warp
    # factors from low to high, vtln_step apart, and the output the model is most confident
    # of is decoded. Helps models trained on few speakers. [1.0, 1.0]: off.
    vtln: list[float] = field(default_factory=lambda: [1.0, 1.0])
    vtln_step: float = 0.025

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if not 1 <= self.beam <= MAX_BEAM:
            fail("beam", f"must lie in [1, {MAX_BEAM}], got {self.beam} (memory and time grow "
                         "with it; WER stops improving long before)")
        if not 0.0 <= self.lm_weight <= MAX_DECODE_WEIGHT:
            fail("lm_weight", f"must lie in [0, {MAX_DECODE_WEIGHT:g}], got {self.lm_weight:g} "
                              "(0: the LM has no say; tuned weights lie between 0 and a few)")
        if not -MAX_DECODE_WEIGHT <= self.word_bonus <= MAX_DECODE_WEIGHT:
            fail("word_bonus", f"must lie in [-{MAX_DECODE_WEIGHT:g}, {MAX_DECODE_WEIGHT:g}], "
                               f"got {self.word_bonus:g} (tuned bonuses lie within a few of 0)")
        if self.beam_threshold < 0:
            fail("beam_threshold", f"must be at least 0, got {self.beam_threshold:g} (a "
                                   "negative threshold prunes every hypothesis: no words at all)")
        if len(self.vtln) != 2 or not self.vtln[0] <= self.vtln[1]:
            fail("vtln", f"must be [low, high] with low <= high, got {self.vtln}")
        if self.vtln[0] < 0.7 or self.vtln[1] > 1.3:
            fail("vtln", f"must lie in [0.7, 1.3], got {self.vtln}")
        if not 0.001 <= self.vtln_step <= 0.6:
            fail("vtln_step", f"must lie in [0.001, 0.6], got {self.vtln_step}")
        if self.lm and self.mode != "beam":
            fail("lm", "a language model is used by decode.mode=beam only")

    @property
    def vtln_enabled(self) -> bool:
        return self.vtln != [1.0, 1.0]


@dataclass
class Config:
    """The whole run configuration."""

    data: DataConfig = field(default_factory=DataConfig)
    # Every key of these two shapes the model's input or output.
    features: FeaturesConfig = field(default_factory=FeaturesConfig, metadata=KEPT_ON_RESUME)
    model: ModelConfig = field(default_factory=ModelConfig, metadata=KEPT_ON_RESUME)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def check(self, fail: typing.Callable[[str, str], None]) -> None:
        if self.execution.rnn_kernel == "persistent" and self.model.rnn.kind != "gru":
            fail("execution.rnn_kernel", f"persistent is a GRU kernel; model.rnn.kind is "
                                         f"{self.model.rnn.kind} (use rnn_kernel torch)")
        if self.execution.cuda_graphs is True and self.train.device == "cpu":
            fail("execution.cuda_graphs", "true needs a CUDA device, and train.device is cpu")
        if self.data.shards.order == "sequential" and self.train.sortagrad:
            fail("data.shards.order", "sequential streams shards in a seeded order, and "
                                      "SortaGrad's shortest-first epoch needs the whole corpus "
                                      "sorted: set train.sortagrad: false")
        if self.data.shards.order == "sequential" and self.train.batch_seconds:
            fail("data.shards.order", "sequential cuts each stream into batches of "
                                      "utterances, not of seconds: set train.batch_seconds: 0")
        if self.distributed.deterministic and not self.train.micro_batch_size:
            fail("distributed.deterministic",
                 "needs train.micro_batch_size: fixed micro-batches are what make the sum "
                 "the same for any number of processes")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (YAML/JSON/checkpoint safe)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def digest(self) -> str:
        """Short SHA-256 of the resolved config, to tell runs apart."""
        return config_digest(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>",
                  check_files: bool = False) -> Config:
        """Build and validate from plain data (e.g. the copy stored in a checkpoint); keys
        that moved since ``data`` was written are read at their new place, with a warning."""
        data = copy.deepcopy(data) if isinstance(data, dict) else data
        if isinstance(data, dict):
            for note in moved_keys(data, source):
                log.warning("%s: %s; read as such", source, note)
        return _Builder(source, check_files).build(cls, data, "")


class _Builder:
    """Fills dataclasses from nested dicts, naming ``source`` and the dotted key on error."""

    def __init__(self, source: str, check_files: bool) -> None:
        self.source = source
        self.check_files = check_files

    def fail(self, key: str, message: str) -> typing.NoReturn:
        raise ConfigError(f"{self.source}: {key}: {message}")

    def build(self, cls: type, data: Any, prefix: str) -> Any:
        where = prefix or "top level"
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.fail(where, f"expected a mapping of keys, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in data:
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean '{_join(prefix, close[0])}'?)" if close else ""
                self.fail(_join(prefix, str(key)), f"unknown key{hint}")
        values = {}
        for name, spec in fields.items():
            if name in data:
                key = _join(prefix, name)
                values[name] = self.convert(hints[name], data[name], key)
                if spec.metadata.get("path") and values[name] and self.check_files \
                        and not Path(values[name]).is_file():
                    self.fail(key, f"file not found: {values[name]}")
        instance = cls(**values)
        check = getattr(instance, "check", None)
        if check is not None:
            check(lambda name, message: self.fail(_join(prefix, name), message))
        return instance

    def convert(self, hint: Any, value: Any, key: str) -> Any:
        origin = typing.get_origin(hint)
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, key)
        if origin is Literal:
            choices = typing.get_args(hint)
            if value not in choices:
                self.fail(key, f"must be one of {', '.join(map(str, choices))}; got {value!r}")
            return value
        if origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(hint) if a is not type(None)]
            if value is None:
                return None
            return self.convert(options[0], value, key)
        if origin is list:
            if not isinstance(value, list):
                self.fail(key, f"expected a list, got {value!r}")
            (item,) = typing.get_args(hint)
            return [self.convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        if hint is bool:
            if not isinstance(value, bool):
                self.fail(key, f"expected true or false, got {value!r}")
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(key, f"expected an integer, got {value!r}")
            return value
        if hint is float:
            if isinstance(value, str):
                # YAML 1.1 reads 1e-3 (no dot) as a string; users mean a number.
                try:
                    value = float(value)
                except ValueError:
                    self.fail(key, f"expected a number, got {value!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(key, f"expected a number, got {value!r}")
            if not math.isfinite(value):
                # Every comparison with nan is false, so no range check would catch it.
                self.fail(key, f"expected a finite number, got {value!r}")
            return float(value)
        if hint is str:
            if value is None:
                return ""
            if not isinstance(value, str):
                self.fail(key, f"expected a string, got {value!r}")
            return value
        raise TypeError(f"unsupported config type {hint} for {key}")


def config_digest(data: dict[str, Any]) -> str:
    """Short SHA-256 of a resolved config as plain data (``Config.to_dict``)."""
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping: plain YAML keeps
    the last one silently, so a second ``train:`` section would drop the whole first one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                continue
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {first_line[key]})",
                    key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def apply_override(data: dict[str, Any], override: str, source: str = "command line") -> None:
    """Apply one ``a.b.c=value`` override in place; the value is parsed as YAML."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{source}: override {override!r} must look like key=value")
    try:
        value = yaml.load(raw, Loader=_StrictLoader) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{source}: override {override!r}: value is not valid YAML: {exc}") from None
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: override {key}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.load(read_utf8(path, ConfigError), Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def load_decode_file(path: str | Path) -> dict[str, Any]:
    """The ``decode`` section of a YAML file: what ``deepspeech decode tune -o`` writes.

    Its relative file paths (``lm``, ``lexicon``) are resolved against the file's folder,
    so that the file and its LM can move together; absolute ones are kept."""
    data = load_yaml(path)
    others = sorted(set(data) - {"decode"})
    if others:
        raise ConfigError(f"{path}: only a decode section is read here, not {', '.join(others)}")
    section = data.get("decode")
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: no decode section (decode: with the settings under it)")
    folder = Path(path).absolute().parent
    for spec in dataclasses.fields(DecodeConfig):
        value = section.get(spec.name)
        if spec.metadata.get("path") and isinstance(value, str) and value \
                and not Path(value).is_absolute():
            section[spec.name] = str((folder / value).resolve())
    return section


def load_config(path: str | Path | None, overrides: typing.Sequence[str] = (),
                check_files: bool = True) -> Config:
    """Load, override and validate; the single gate every command goes through."""
    data = load_yaml(path) if path else {}
    for override in overrides:
        apply_override(data, override)
    source = str(path) if path else "defaults"
    if overrides:
        source += " (with overrides)"
    return Config.from_dict(data, source=source, check_files=check_files)


def save_config(config: Config, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(config.to_yaml(), encoding="utf-8")

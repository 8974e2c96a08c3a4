"""Where a training step's time goes, by layer and by kind of work (``bench train --profile``).

``profile_step`` runs one step under ``torch.profiler`` and charges every measured
microsecond to a (layer, kind) group; the groups and an "unattributed" rest add up to
the step. What is measured: on a GPU the device's busy time (kernels, copies and
memsets, summed); on a CPU the step's wall time, of which each operator's self time is
charged (the rest, unattributed, is host time between operators: Python, the hooks
below, the profiler itself).

**Layers.** The model carries no profiling code. For the profiled step only, forward
hooks on each of ``DeepSpeech2.layers()`` open a ``record_function`` scope named after
the layer (``conv``, ``rnns.0``, ..., ``lookahead``, ``fc``, ``output``) and close it
when the layer returns; hooks on the model and on its batch-norm modules mark those too,
and ``profile_step`` scopes the loss-and-backward and the update. A forward operator
belongs to the innermost layer scope around it.

The backward pass runs in the autograd engine, outside every forward scope (on a GPU in
another thread), so scopes cannot reach it; sequence numbers can. Each autograd node
carries the sequence number of the forward operator that created it, and the profiler
records the engine's ``autograd::engine::evaluate_function: <node>`` range with that
number and the forward thread (the same link its traces draw as forward-backward
arrows). Every operator and kernel inside that range goes where the forward operator
with that (thread, number) went: a ``ConvolutionBackward0`` to ``conv``, an LSTM's
``MkldnnRnnLayerBackward0`` to its ``rnns.N``. A forward operator that creates no node
shares its number with the next one that does; of the operators holding a number, the
last to start decides: it is the node's creator or one of its inner operators, in the
same scope. The nodes that accumulate parameter gradients (``AccumulateGrad``) have no
forward operator: the engine runs each as soon as its gradient exists, right after the
node that produced it, so it goes with that node.

Outside the layers: the loss phase's forward operators after the model returned (CTC,
the division by the batch size, loss scaling, the backward's seed gradient) and their
backward nodes go to ``ctc loss``; the update scope (unscaling, clipping, the optimizer
step, ``zero_grad``) to ``optimizer``; collective operators to ``all-reduce``; the rest
(the model's glue between layers, such as gathering the valid frames) to ``other``.

**Kinds** come from the operator's, autograd node's or kernel's name: the first pattern
of ``KIND_PATTERNS`` that it contains, else ``other``. Inside a batch-norm module, work
that the names call element-wise, reduction or other is ``normalization`` (the masked
batch norm's statistics are sums and products), in the backward pass too. The recurrent
layers' masked norm on a GPU (``RecurrentLayer._normalize_valid``) computes its
statistics without calling the norm module, so there its sums count as reductions.

A CUDA graph replays as one launch, with no layer scope around it: its kernels go to
``other``, each still of its own kind.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from deepspeech.model import DeepSpeech2

LAYER_SCOPE = "deepspeech.layer: "
NORM_SCOPE = "deepspeech.norm"
MODEL_SCOPE = "deepspeech.model"
LOSS_SCOPE = "deepspeech.loss_and_backward"
UPDATE_SCOPE = "deepspeech.update"
BACKWARD_NODE = "autograd::engine::evaluate_function: "

KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern)) for kind, pattern in (
        # Searched in the lower-cased name, a backward node's without its "Backward0".
        # Collectives first: NCCL's kernels are named after the reduction they run.
        ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|c10d|"
                          r"record_param_comms|\bmpi"),
        # torch's CTC; alpha_kernel, occupancy_kernel: the GPU loss (model/kernels/ctc_triton.py)
        ("ctc", r"ctc|alpha_kernel|occupancy_kernel"),
        ("optimizer", r"adam|sgd|_foreach_|multi_tensor_apply"),
        # cuDNN's and oneDNN's RNNs, ATen's GRU/LSTM cells, the persistent GRU's gru_*_steps
        ("recurrence", r"rnn|lstm|gru"),
        # before the GEMMs: cuDNN names convolution kernels fprop/dgrad/wgrad_implicit_gemm
        ("convolution", r"conv(?!er)|fprop|dgrad|wgrad|winograd"),
        # ATen's products; cuBLAS's and CUTLASS's kernels (sm90_xmma_gemm, nvjet_*, ...)
        ("gemm", r"gemm|gemv|matmul|\b(mm|bmm|addmm|addmv|baddbmm|mv|dot|linear)\b|"
                 r"cutlass|cublas|nvjet|xmma|sm\d+_|splitk"),
        ("normalization", r"batch_?norm|layer_?norm|group_?norm|welford|bn_[fb]w"),
        ("reduction", r"reduce|norm|softmax|\b(sum|mean|var|std|prod|amax|amin|max|min|"
                      r"argmax|argmin|all|any|logsumexp|cumsum)_?\b"),
        # copies, casts, indexing, masking, arithmetic, fills, views, layout changes;
        # allocation alone (empty, resize_) is other
        ("elementwise", r"copy|elementwise|vectorized|unrolled|memcpy|memset|index|gather|"
                        r"scatter|masked|where|transpose|permute|contiguous|clone|addc|"
                        r"\b(cat|stack|add|sub|mul|div|neg|exp|log|sqrt|rsqrt|pow|square|"
                        r"lerp|clamp|maximum|minimum|hardtanh|threshold|relu|sigmoid|tanh|"
                        r"lt|le|gt|ge|eq|ne|bitwise|fill|zero|zeros|new_zeros|ones|full|"
                        r"arange|t|to|view|"
                        r"reshape|expand|unsqueeze|squeeze|pad|constant_pad_nd|flip|slice|"
                        r"select|narrow|split|unbind|as_strided|alias|detach|dropout|"
                        r"bernoulli|nonzero|item|_local_scalar_dense)(_|\b)"),
    )
)
"""(kind, pattern) in the order they are tried; a name none of them finds is ``other``."""

# What the names above call these: with a norm's statistics around them, they are the norm.
_NORM_WORK = {"elementwise", "reduction", "other"}
_DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def classify(name: str) -> str:
    """The kind of work an operator, autograd node or kernel named ``name`` does."""
    name = re.sub(r"Backward\d*$", "", name.removeprefix(BACKWARD_NODE)).lower()
    for kind, pattern in KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return "other"


@dataclass(frozen=True)
class StepProfile:
    """One step's time in milliseconds by (layer, kind), and how much of it was backward."""

    measure: str
    """What is summed: the device's busy time, or the operators' self time on the CPU."""
    step_ms: float
    """The time to account for: the device's busy time on a GPU, the wall time on a CPU."""
    wall_ms: float
    groups: dict[tuple[str, str], float]
    backward: dict[str, float]
    """Per layer, the part of its groups' time spent in the backward pass."""

    @property
    def attributed_ms(self) -> float:
        return sum(self.groups.values())

    @property
    def unattributed_ms(self) -> float:
        return self.step_ms - self.attributed_ms

    def by_layer(self) -> dict[str, float]:
        """Each layer's time, the largest first."""
        return _sorted_totals((layer, ms) for (layer, _), ms in self.groups.items())

    def by_kind(self) -> dict[str, float]:
        """Each kind's time, the largest first."""
        return _sorted_totals((kind, ms) for (_, kind), ms in self.groups.items())

    def to_dict(self) -> dict:
        """The same numbers as plain data, for ``--json``."""
        layers = {layer: {kind: round(ms, 3) for kind, ms in self._row(layer).items()}
                  for layer in self.by_layer()}
        return {
            "measure": self.measure, "step_ms": round(self.step_ms, 3),
            "wall_ms": round(self.wall_ms, 3), "attributed_ms": round(self.attributed_ms, 3),
            "unattributed_ms": round(self.unattributed_ms, 3),
            "unattributed_share": round(self.unattributed_ms / self.step_ms, 4),
            "by_layer": {layer: round(ms, 3) for layer, ms in self.by_layer().items()},
            "by_kind": {kind: round(ms, 3) for kind, ms in self.by_kind().items()},
            "backward_by_layer": {layer: round(self.backward.get(layer, 0.0), 3)
                                  for layer in self.by_layer()},
            "by_layer_and_kind": layers,
        }

    def table(self) -> str:
        """Layers (rows, the largest first) by kinds (columns), in ms and % of the step."""
        by_kind = self.by_kind()
        widths = {kind: max(len(kind), 7) for kind in by_kind}

        def row(label: str, ms: str, share: str, backward: str, cells: dict[str, str]) -> str:
            columns = "".join(f"  {cells.get(kind, '-'):>{width}}"
                              for kind, width in widths.items())
            return f"  {label:<13}{ms:>9}  {share:>6}  {backward:>4}{columns}".rstrip()

        def percent(ms: float) -> str:
            return f"{100 * ms / self.step_ms:.1f}%"

        lines = [f"  {self.step_ms:.1f} ms to account for: {self.measure} (wall "
                 f"{self.wall_ms:.1f} ms); attributed {percent(self.attributed_ms)}",
                 row("layer", "ms", "step", "bwd", {kind: kind for kind in by_kind})]
        for layer, ms in self.by_layer().items():
            backward = f"{100 * self.backward.get(layer, 0.0) / ms:.0f}%" if ms else ""
            lines.append(row(layer, f"{ms:.1f}", percent(ms), backward,
                             {kind: f"{cell:.1f}" for kind, cell in self._row(layer).items()}))
        lines.append(row("all layers", f"{self.attributed_ms:.1f}",
                         percent(self.attributed_ms), "",
                         {kind: f"{ms:.1f}" for kind, ms in by_kind.items()}))
        lines.append(row("", "", "", "", {kind: percent(ms) for kind, ms in by_kind.items()}))
        lines.append(row("unattributed", f"{self.unattributed_ms:.1f}",
                         percent(self.unattributed_ms), "", {kind: "" for kind in by_kind}))
        return "\n".join(lines)

    def _row(self, layer: str) -> dict[str, float]:
        return _sorted_totals((kind, ms) for (name, kind), ms in self.groups.items()
                              if name == layer)


def _sorted_totals(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for key, ms in pairs:
        totals[key] += ms
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def profile_step(model: DeepSpeech2, loss_and_backward: Callable[[], object],
                 update: Callable[[], object], device: torch.device) -> StepProfile:
    """Run one training step of ``model`` (``loss_and_backward``, then ``update``) under the
    profiler and attribute its time."""
    names = {module: name for name, module in model.named_modules()}
    layers = {names[layer]: layer for layer in model.layers()}
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with _scopes(model, layers), profile(activities=activities) as prof:
        with record_function(LOSS_SCOPE):
            loss_and_backward()
        with record_function(UPDATE_SCOPE):
            update()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    return attribute(prof.events(), on_device=device.type == "cuda")


@contextmanager
def _scopes(model: nn.Module, layers: dict[str, nn.Module]) -> Iterator[None]:
    """Forward hooks that put each layer, each batch norm and the model in a named scope."""
    scoped = [(MODEL_SCOPE, model)] + [(LAYER_SCOPE + name, layer)
                                       for name, layer in layers.items()]
    scoped += [(NORM_SCOPE, module) for module in model.modules()
               if isinstance(module, nn.modules.batchnorm._BatchNorm)]
    with ExitStack() as hooks:
        for name, module in scoped:
            _scope_forward(module, name, hooks)
        yield


def _scope_forward(module: nn.Module, name: str, hooks: ExitStack) -> None:
    """Open a ``record_function(name)`` as ``module``'s forward starts and close it as it
    returns (or raises); ``hooks`` removes the hooks."""
    open_scopes: list[record_function] = []

    def enter(*_: object) -> None:
        open_scopes.append(record_function(name).__enter__())

    def leave(*_: object) -> None:
        open_scopes.pop().__exit__(None, None, None)

    hooks.enter_context(module.register_forward_pre_hook(enter))
    hooks.enter_context(module.register_forward_hook(leave, always_call=True))


Context = tuple[str, bool]
"""Where an operator's time goes: the layer, and whether it is a batch norm's work."""


def attribute(events: Iterable[FunctionEvent], on_device: bool) -> StepProfile:
    """Charge the profiled step in ``events`` to (layer, kind) groups (see the module's
    docstring); ``on_device``: a GPU step, whose kernels are charged, not the CPU's time."""
    events = list(events)
    cpu = sorted((e for e in events if e.device_type == DeviceType.CPU and not e.is_async),
                 key=lambda e: e.time_range.start)
    phases = {e.name: e for e in cpu if e.name in (LOSS_SCOPE, UPDATE_SCOPE)}
    if set(phases) != {LOSS_SCOPE, UPDATE_SCOPE}:
        raise RuntimeError(f"the profile holds no {LOSS_SCOPE!r} and {UPDATE_SCOPE!r} scopes: "
                           f"was the step run by profile_step?")
    start, end = phases[LOSS_SCOPE].time_range.start, phases[UPDATE_SCOPE].time_range.end
    model_end = max((e.time_range.end for e in cpu if e.name == MODEL_SCOPE), default=end)

    def scope_context(event: FunctionEvent) -> Context:
        begin = event.time_range.start
        layer, norm, in_model, phase = None, False, False, None
        while event is not None:
            if layer is None and event.name.startswith(LAYER_SCOPE):
                layer = event.name.removeprefix(LAYER_SCOPE)
            norm |= event.name == NORM_SCOPE
            in_model |= event.name == MODEL_SCOPE
            phase = event.name if event.name in phases else phase
            event = event.cpu_parent
        if phase == UPDATE_SCOPE:
            return "optimizer", False
        if layer is not None or in_model:
            return layer or "other", norm
        return ("ctc loss" if phase == LOSS_SCOPE and begin >= model_end else "other"), False

    def backward_node(event: FunctionEvent) -> FunctionEvent | None:
        while event is not None and not event.name.startswith(BACKWARD_NODE):
            event = event.cpu_parent
        return event

    # Forward operators by (thread, sequence number), the last to start deciding.
    forward: dict[tuple[int, int], Context] = {}
    for event in cpu:
        if event.sequence_nr >= 0 and backward_node(event) is None:
            forward[event.thread, event.sequence_nr] = scope_context(event)
    nodes: dict[int, Context] = {}
    previous: dict[int, Context] = {}
    for event in cpu:
        if event.name.startswith(BACKWARD_NODE):
            if event.sequence_nr >= 0:
                context = forward.get((event.fwd_thread, event.sequence_nr), ("other", False))
            else:  # AccumulateGrad: with the node that produced its gradient
                context = previous.get(event.thread, ("other", False))
            nodes[id(event)] = previous[event.thread] = context

    def context_of(event: FunctionEvent) -> tuple[Context, bool]:
        node = backward_node(event)
        if node is not None:
            return nodes[id(node)], True
        return scope_context(event), False

    groups: dict[tuple[str, str], float] = defaultdict(float)
    backward: dict[str, float] = defaultdict(float)

    def charge(event: FunctionEvent, name: str, us: float) -> None:
        (layer, norm), in_backward = context_of(event)
        kind = classify(name)
        if kind == "communication":
            layer = "all-reduce"
        elif norm and kind in _NORM_WORK:
            kind = "normalization"
        groups[layer, kind] += us / 1e3
        if in_backward:
            backward[layer] += us / 1e3

    wall_us = end - start
    if on_device:
        launched_by = {e.id: e for e in cpu if e.linked_correlation_id == 0}
        device_work = [e for e in events if e.device_type != DeviceType.CPU
                       and e.activity_type in _DEVICE_WORK]
        step_us = sum(e.time_range.elapsed_us() for e in device_work)
        for kernel in device_work:
            launcher = launched_by.get(kernel.linked_correlation_id)
            if launcher is not None:
                charge(launcher, kernel.name, kernel.time_range.elapsed_us())
        measure = "GPU busy time (kernels, copies, memsets)"
    else:
        step_us = wall_us
        for event in cpu:
            if not event.is_user_annotation and start <= event.time_range.start < end:
                charge(event, event.name, event.self_cpu_time_total)
        measure = "CPU operators' self time"
    return StepProfile(measure=measure, step_ms=step_us / 1e3, wall_ms=wall_us / 1e3,
                       groups=dict(groups), backward=dict(backward))

"""``execution.rnn_kernel: persistent``: a GRU direction whose recurrence runs as one Triton
launch per pass (``gru_triton.py``) instead of a kernel or two per time step.

The input projection of every time step, ``x W_ih^T + b_ih``, is one large matrix
product before the recurrence, and the weight gradients are large products after it
(cuBLAS, under autocast in bf16/fp16): the kernels do only what must go step by step.
The products inside the kernels take their inputs in the projection's dtype (bf16
under bf16 autocast) and accumulate in float32; the state itself is float32.

The one-launch pass meets at a grid barrier every step, which only works while every
program of the grid is resident at once. One program per SM fits an idle GPU, but not
one whose SMs another process holds (MPS, a second rank on the same GPU): there the
waiting programs would spin on a barrier that the unscheduled ones never reach. So
the grid is launched cooperatively, and CUDA itself refuses a grid that cannot be
resident (`GridNotResident`, naming the way out) instead of hanging. A Triton without
cooperative launches gets one launch per step, which needs no residency.

Where Triton cannot run the kernels, on CPU tensors outside Triton's interpreter,
the module is ``torch.nn.GRU`` on the same parameters, said once in the log: a config
that names this kernel runs everywhere.
"""

from __future__ import annotations

import functools
import logging
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger(__name__)

BLOCK_H = 16  # hidden units per program: the narrowest tile tl.dot takes
# Programs the interpreter "has": small enough that small tests split the batch too.
INTERPRETER_PROGRAMS = 4


class PersistentGRU(nn.GRU):
    """One direction of one layer, called as a batch-first ``torch.nn.GRU``.

    It is an ``nn.GRU`` (one layer, batch first): the same parameters, created and
    initialized the same way, so checkpoints move between kernels and a seeded model
    starts from the same weights.
    """

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__(input_size, hidden, batch_first=True)

    def forward(self, x: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``[B, T, D]``, ``state`` ``[1, B, H]`` or None -> ``([B, T, H], [1, B, H])``."""
        if not _triton_runs_on(x.device):
            _say_fallback_once(x.device.type)
            return super().forward(x, state)
        gx = F.linear(x, self.weight_ih_l0, self.bias_ih_l0)
        h0 = x.new_zeros(x.shape[0], self.hidden_size, dtype=torch.float32) if state is None \
            else state[0].float()
        y, h_last = gru_recurrence(gx, h0, self.weight_hh_l0, self.bias_hh_l0)
        return y, h_last[None]


def gru_recurrence(gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor,
                   grid_barrier: bool | None = None) -> tuple[Tensor, Tensor]:
    """The GRU recurrence on input-gate preactivations ``gx`` [B, T, 3H] (``x W_ih^T + b_ih``).

    Returns ``y`` [B, T, H] in ``gx``'s dtype and ``h_T`` [B, H] likewise; differentiable
    in ``gx``, ``h0``, ``w_hh`` and ``b_hh``. ``grid_barrier``: one launch per pass (the
    default where every program fits on the GPU at once) or one launch per step
    (always so in Triton's interpreter).
    """
    if grid_barrier is None:
        grid_barrier = _chosen_launch(gx.shape[0], h0.shape[-1], gx.device)
    return _Recurrence.apply(gx, h0, w_hh, b_hh, grid_barrier)


class GridNotResident(RuntimeError):
    """CUDA refused a cooperative launch: the grid's programs cannot all be resident."""


def grid_barrier_launch(on_cuda: bool, fits_at_once: bool, cooperative: bool) -> str | None:
    """Why a pass cannot be one launch with grid barriers (None: it can).

    ``fits_at_once``: at most one program per SM; ``cooperative``: Triton launches a
    grid cooperatively, so CUDA guarantees that all of it is resident or refuses it.
    Without that guarantee a GPU shared with another process could hang in the barrier.
    """
    if not on_cuda:
        return "Triton's interpreter runs programs one after another"
    if not fits_at_once:
        return "more programs than SMs"
    if not cooperative:
        return ("this Triton cannot launch a grid cooperatively (launch_cooperative_grid), "
                "so nothing guarantees that every program is resident")
    return None


def describe_launch(batch: int, hidden: int, device: torch.device) -> str:
    """How a pass over ``batch`` x ``hidden`` runs on ``device``, in words."""
    slices, groups = _plan(batch, hidden, device).grid
    why_not = _why_not_grid_barrier(batch, hidden, device)
    how = "one cooperative launch per pass, a grid barrier per step" if why_not is None \
        else f"one launch per step ({why_not})"
    return f"{slices * groups} programs ({slices} unit slices x {groups} batch groups), {how}"


def barrier_give_ups(device: torch.device) -> int:
    """Programs that gave up waiting at a grid barrier on ``device`` (nonzero: wrong results)."""
    return int(_give_ups(device).item())


class _Recurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor,
                grid_barrier: bool) -> tuple[Tensor, Tensor]:
        from deepspeech.model.kernels.gru_triton import gru_forward_steps

        batch, steps, _ = gx.shape
        hidden = h0.shape[-1]
        gx = gx if gx.stride(-1) == 1 else gx.contiguous()
        # Triton's interpreter multiplies bf16 tiles as raw integers (numpy has no bf16):
        # there the products run in float32.
        dot_dtype = gx.dtype if gx.is_cuda else torch.float32
        w_dot = w_hh.detach().to(dot_dtype).contiguous()
        hs = _unfilled((steps + 1, batch, hidden), torch.float32, gx.device)
        hs_dot = _unfilled((steps + 1, batch, hidden), dot_dtype, gx.device)
        hs[0] = h0
        hs_dot[0] = h0
        saved = _unfilled((steps, batch, 4 * hidden), torch.float32, gx.device)
        plan = _plan(batch, hidden, gx.device)
        launch = gru_forward_steps[plan.grid]
        common = dict(plan.constants, PRECISION=_precision(dot_dtype))
        args = (gx, gx.stride(0), gx.stride(1), w_dot, b_hh.detach().float().contiguous(),
                hs, hs_dot, saved)
        give_ups = _give_ups(gx.device)
        if grid_barrier:
            _launch_whole_pass(launch, plan, gx.device, *args, _sync(gx.device), give_ups, 0,
                               steps, batch, hidden, GRID_BARRIER=True, **common)
        else:  # the counters go unused
            for t in range(steps):
                launch(*args, give_ups, give_ups, t, t + 1, batch, hidden, GRID_BARRIER=False,
                       **common)
        ctx.save_for_backward(w_dot, hs, hs_dot, saved)
        ctx.grid_barrier = grid_barrier
        ctx.dtypes = (gx.dtype, h0.dtype, w_hh.dtype, b_hh.dtype)
        return (hs_dot[1:].transpose(0, 1).contiguous().to(gx.dtype),
                hs_dot[steps].to(gx.dtype, copy=True))

    @staticmethod
    def backward(ctx, dy: Tensor | None, dh_last: Tensor | None):
        from deepspeech.model.kernels.gru_triton import gru_backward_steps

        w_dot, hs, hs_dot, saved = ctx.saved_tensors
        steps, batch, hidden = hs.shape[0] - 1, hs.shape[1], hs.shape[2]
        dot_dtype = hs_dot.dtype
        if dy is None:
            dy = hs_dot.new_zeros(batch, steps, hidden)
        elif dy.stride(-1) != 1:  # e.g. the expanded gradient of a sum
            dy = dy.contiguous()
        dh = hs.new_zeros(batch, hidden)  # the kernel overwrites it: never the caller's
        if dh_last is not None:
            dh.copy_(dh_last)
        gx_dtype, h0_dtype, w_dtype, b_dtype = ctx.dtypes
        dgx = _unfilled((batch, steps, 3 * hidden), gx_dtype, hs.device)
        dgh = _unfilled((steps, batch, 3 * hidden), dot_dtype, hs.device)
        plan = _plan(batch, hidden, hs.device)
        launch = gru_backward_steps[plan.grid]
        common = dict(plan.constants, PRECISION=_precision(dot_dtype))
        args = (dy, dy.stride(0), dy.stride(1), w_dot, hs, saved,
                dgx, dgx.stride(0), dgx.stride(1), dgh, dh)
        # Steps T - 1 .. 0, then "-1": the gradient through step 0's gates into h_0.
        give_ups = _give_ups(hs.device)
        if ctx.grid_barrier:
            _launch_whole_pass(launch, plan, hs.device, *args, _sync(hs.device), give_ups,
                               steps - 1, steps + 1, batch, steps, hidden, GRID_BARRIER=True,
                               **common)
        else:
            for t in range(steps - 1, -2, -1):
                launch(*args, give_ups, give_ups, t, 1, batch, steps, hidden,
                       GRID_BARRIER=False, **common)
        with torch.autocast(hs.device.type, enabled=False):
            flat_dgh = dgh.view(steps * batch, 3 * hidden)
            dw_hh = flat_dgh.t().mm(hs_dot[:steps].view(steps * batch, hidden))
            db_hh = flat_dgh.sum(0, dtype=torch.float32)
        return dgx, dh.to(h0_dtype), dw_hh.to(w_dtype), db_hh.to(b_dtype), None


class _Plan:
    """Tile sizes and grid of one launch: ``(hidden slices, batch groups)`` programs."""

    def __init__(self, batch: int, hidden: int, programs: int) -> None:
        block_b = min(64, max(16, _next_power_of_2(batch)))
        block_k = min(64, max(16, _next_power_of_2(hidden)))
        slices = -(-hidden // BLOCK_H)
        tiles = -(-batch // block_b)
        # More programs than slices split the batch, up to one program per SM.
        groups = max(1, min(tiles, programs // slices))
        self.grid = (slices, groups)
        self.constants = dict(BLOCK_B=block_b, BLOCK_H=BLOCK_H, BLOCK_K=block_k,
                              TILES=-(-tiles // groups), K_STEPS=-(-hidden // block_k),
                              num_warps=4)


def _plan(batch: int, hidden: int, device: torch.device) -> _Plan:
    return _Plan(batch, hidden, _programs(device))


def _launch_whole_pass(launch, plan: _Plan, device: torch.device, *args, **kwargs) -> None:
    """``launch`` (a grid-barrier kernel) cooperatively; CUDA's refusal as `GridNotResident`."""
    try:
        launch(*args, launch_cooperative_grid=True, **kwargs)
    except RuntimeError as error:
        refused = not_resident(error, plan.grid, device)
        if refused is None:
            raise
        raise refused from error


def not_resident(error: RuntimeError, grid: tuple[int, int],
                 device: torch.device) -> GridNotResident | None:
    """``error`` as `GridNotResident` where it is CUDA refusing a cooperative launch
    (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), else None."""
    if "cooperative launch" not in str(error).lower():
        return None
    programs = grid[0] * grid[1]
    return GridNotResident(
        f"execution.rnn_kernel=persistent: CUDA refused to run the GRU recurrence's "
        f"{programs} programs at once on {device}: its grid barrier needs every program "
        f"resident, and another process holds some of the GPU (MPS, a second rank on the "
        f"same GPU?). Give each process a GPU of its own, or set "
        f"execution.rnn_kernel: torch (cuDNN's recurrence) [{error}]")


def _chosen_launch(batch: int, hidden: int, device: torch.device) -> bool:
    """Whether a pass is one launch with grid barriers (else one launch per step)."""
    why_not = _why_not_grid_barrier(batch, hidden, device)
    if why_not is not None and device.type == "cuda":
        _say_per_step_once(why_not)
    return why_not is None


def _why_not_grid_barrier(batch: int, hidden: int, device: torch.device) -> str | None:
    on_cuda = device.type == "cuda"
    return grid_barrier_launch(on_cuda, on_cuda and _fits_at_once(batch, hidden, device),
                               _cooperative_launches())


@functools.cache
def _cooperative_launches() -> bool:
    """Whether the installed Triton launches CUDA grids cooperatively on request."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "launch_cooperative_grid" in CUDAOptions.__dataclass_fields__


@functools.cache
def _say_per_step_once(why_not: str) -> None:
    log.info("execution.rnn_kernel=persistent: one launch per time step, not one per pass "
             "(%s)", why_not)


def _fits_at_once(batch: int, hidden: int, device: torch.device) -> bool:
    """A grid barrier needs every program resident: at most one per SM."""
    slices, groups = _plan(batch, hidden, device).grid
    return slices * groups <= _programs(device)


def _programs(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_PROGRAMS


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _precision(dtype: torch.dtype) -> str:
    """float32 products in TF32 only where torch's own matmuls may use it."""
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _unfilled(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.empty`` without deterministic mode's NaN fill (a GiB per direction at ds2
    sizes): the kernels write every element before anything reads it."""
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        return torch.empty(shape, dtype=dtype, device=device)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill


def _sync(device: torch.device) -> Tensor:
    """A fresh arrival counter per launch (a memset, which CUDA graphs capture)."""
    return torch.zeros(1, dtype=torch.int32, device=device)


@functools.cache
def _give_ups(device: torch.device) -> Tensor:
    """One counter per device for the run's life: allocated before any graph captures it."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def _triton_runs_on(device: torch.device) -> bool:
    if device.type == "cuda":
        return _triton_importable()
    return device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" \
        and _triton_importable()


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _say_fallback_once(device_type: str) -> None:
    log.info("execution.rnn_kernel=persistent: Triton does not run on %s tensors here "
             "(TRITON_INTERPRET=1 runs it on the CPU); the recurrence is torch.nn.GRU's, "
             "on the same parameters", device_type)

"""Triton kernels of the persistent GRU recurrence: every time step of one direction in
one launch, the programs meeting at a grid-wide barrier once per step.

Program ``(i, j)`` owns hidden units ``[16 i, 16 i + 16)`` for the batch rows of its
group ``j``: batch tiles ``j, j + groups, ...``, ``TILES`` of them, some maybe past the
batch. Loop bounds are constexpr or ``while`` loops: Triton's interpreter cannot
``range`` over a runtime scalar. Per step it multiplies the whole
previous state by its slice of ``W_hh`` (tensor cores: ``dot``-dtype inputs, float32
accumulation), computes its units' gates and writes ``h_t``; the next step needs every
unit of ``h_t``, hence the barrier. ``W_hh`` (6 MiB in bf16 at 1024 units) stays in
the chip's L2 cache across steps: Triton has no way to pin a ``[1024, 48]`` slice in
shared memory, and holding it in registers would cap the batch tile of the products
at 16 rows. The backward pass walks the steps back: the gradient reaching ``h_t``
through step ``t + 1``'s gates (``dgh_{t+1} @ W_hh``, each program its own columns),
then step ``t``'s gate gradients, then the barrier. Each value has exactly one
program computing it in a fixed order and nothing float is accumulated atomically,
so two runs give the same bits.

The barrier counts arrivals in ``sync[0]`` (release) and spins on it (acquire). It
is only correct when every program is resident at once, so the host launches at
most one program per SM with ``GRID_BARRIER``, and cooperatively: CUDA then refuses a
grid that cannot be resident (another process on the GPU, MPS) rather than letting it
spin forever (``gru.GridNotResident``). Otherwise, and in Triton's interpreter (which
runs programs one after another), it launches the same code once per step
(``t_begin``/``t_end``, ``t_first``/``steps``) with no barrier.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Polls of the barrier counter a program may spend over one launch (some seconds; a
# launch needs a few per step). One that runs out stops waiting and counts itself in
# ``give_ups``: its results are then wrong, but the GPU is not hung for good.
SPIN_BUDGET = tl.constexpr(1 << 24)


@triton.jit
def _grid_barrier(sync, give_ups, step, programs, budget):
    """Return once all ``programs`` have arrived here for the ``step``-th time (1, 2, ...),
    or the ``budget`` of polls is spent; returns what is left of it."""
    tl.debug_barrier()  # all threads' stores of this step come before the release
    tl.atomic_add(sync, 1, sem="release", scope="gpu")
    target = step * programs
    arrived = tl.atomic_add(sync, 0, sem="acquire", scope="gpu")
    while (arrived < target) & (budget > 0):
        arrived = tl.atomic_add(sync, 0, sem="acquire", scope="gpu")
        budget -= 1
    if arrived < target:
        tl.atomic_add(give_ups, 1, sem="relaxed", scope="gpu")
    tl.debug_barrier()
    return budget


@triton.jit
def _tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def gru_forward_steps(gx, gx_stride_b, gx_stride_t, w_hh, b_hh, hs, hs_dot, saved,
                      sync, give_ups, t_begin, t_end, B, H,
                      BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
                      TILES: tl.constexpr, K_STEPS: tl.constexpr,
                      GRID_BARRIER: tl.constexpr, PRECISION: tl.constexpr):
    """Steps ``t_begin..t_end - 1``.

    ``gx`` [B, T, 3H]: ``x W_ih^T + b_ih``, any strides over batch and time; ``w_hh``
    [3H, H] in the dot dtype; ``b_hh`` [3H] float32; ``hs``/``hs_dot`` [T + 1, B, H]:
    ``h_0..h_T`` in float32 and in the dot dtype (slot 0 filled by the host); ``saved``
    [T, B, 4H] float32: ``r, z, n, W_hn h + b_hn`` of each step, for the backward pass.
    """
    groups = tl.num_programs(1)
    units = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    unit_ok = units < H
    ks = tl.arange(0, BLOCK_K)
    bias_r = tl.load(b_hh + units, mask=unit_ok, other=0.0)[None, :]
    bias_z = tl.load(b_hh + H + units, mask=unit_ok, other=0.0)[None, :]
    bias_n = tl.load(b_hh + 2 * H + units, mask=unit_ok, other=0.0)[None, :]
    budget = SPIN_BUDGET
    t = t_begin
    while t < t_end:
        for tile in range(TILES):
            rows = (tl.program_id(1) + tile * groups) * BLOCK_B + tl.arange(0, BLOCK_B)
            row_ok = rows < B
            step_rows = (t * B + rows).to(tl.int64)  # rows of the [(T + 1) B, H] states
            acc_r = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
            acc_z = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
            acc_n = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
            for kc in range(K_STEPS):
                k = kc * BLOCK_K + ks
                k_ok = k < H
                # Other programs wrote h_{t-1}: read it from L2, never from a stale L1 line.
                h = tl.load(hs_dot + step_rows[:, None] * H + k[None, :],
                            mask=row_ok[:, None] & k_ok[None, :], other=0.0,
                            cache_modifier=".cg")
                w = w_hh + units[None, :] * H + k[:, None]  # W_hh^T, [BLOCK_K, BLOCK_H]
                w_ok = k_ok[:, None] & unit_ok[None, :]
                acc_r = tl.dot(h, tl.load(w, mask=w_ok, other=0.0), acc_r,
                               input_precision=PRECISION)
                acc_z = tl.dot(h, tl.load(w + H * H, mask=w_ok, other=0.0), acc_z,
                               input_precision=PRECISION)
                acc_n = tl.dot(h, tl.load(w + 2 * H * H, mask=w_ok, other=0.0), acc_n,
                               input_precision=PRECISION)
            tile = row_ok[:, None] & unit_ok[None, :]
            x = gx + (rows.to(tl.int64) * gx_stride_b + t * gx_stride_t)[:, None] + units[None, :]
            x_r = tl.load(x, mask=tile, other=0.0).to(tl.float32)
            x_z = tl.load(x + H, mask=tile, other=0.0).to(tl.float32)
            x_n = tl.load(x + 2 * H, mask=tile, other=0.0).to(tl.float32)
            r = tl.sigmoid(x_r + acc_r + bias_r)
            z = tl.sigmoid(x_z + acc_z + bias_z)
            gh_n = acc_n + bias_n
            n = _tanh(x_n + r * gh_n)
            here = step_rows[:, None] * H + units[None, :]
            h_prev = tl.load(hs + here, mask=tile, other=0.0)
            h_new = (1.0 - z) * n + z * h_prev
            tl.store(hs + here + B * H, h_new, mask=tile)
            tl.store(hs_dot + here + B * H, h_new.to(hs_dot.dtype.element_ty), mask=tile)
            s = saved + step_rows[:, None] * (4 * H) + units[None, :]
            tl.store(s, r, mask=tile)
            tl.store(s + H, z, mask=tile)
            tl.store(s + 2 * H, n, mask=tile)
            tl.store(s + 3 * H, gh_n, mask=tile)
        if GRID_BARRIER:
            budget = _grid_barrier(sync, give_ups, t - t_begin + 1,
                                   tl.num_programs(0) * groups, budget)
        t += 1


@triton.jit
def gru_backward_steps(dy, dy_stride_b, dy_stride_t, w_hh, hs, saved,
                       dgx, dgx_stride_b, dgx_stride_t, dgh, dh,
                       sync, give_ups, t_first, steps, B, T, H,
                       BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
                       TILES: tl.constexpr, K_STEPS: tl.constexpr,
                       GRID_BARRIER: tl.constexpr, PRECISION: tl.constexpr):
    """Steps ``t_first, t_first - 1, ...`` (``steps`` of them); step -1 only carries the
    gradient on into ``h_0``.

    ``dy`` [B, T, H]: gradient of the outputs; ``dh`` [B, H] float32: on entry the
    gradient reaching ``h_{t_first}`` from later steps (of ``h_T`` at first), on exit
    that reaching ``h_{t_first - steps + 1}``; ``dgx`` [B, T, 3H]: gradient of ``gx``;
    ``dgh`` [T, B, 3H] in the dot dtype: gradient of ``W_hh h + b_hh``.
    """
    groups = tl.num_programs(1)
    units = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
    unit_ok = units < H
    ks = tl.arange(0, BLOCK_K)
    budget = SPIN_BUDGET
    i = 0
    while i < steps:
        t = t_first - i
        for tile in range(TILES):
            rows = (tl.program_id(1) + tile * groups) * BLOCK_B + tl.arange(0, BLOCK_B)
            row_ok = rows < B
            tile = row_ok[:, None] & unit_ok[None, :]
            carry_at = dh + rows[:, None] * H + units[None, :]
            carry = tl.load(carry_at, mask=tile, other=0.0)
            # What reaches h_t through step t + 1's gates: dgh_{t+1} @ W_hh, own columns.
            next_ok = row_ok[:, None] & (t + 1 < T)
            next_rows = ((t + 1) * B + rows).to(tl.int64)
            acc = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
            for kc in range(K_STEPS):
                k = kc * BLOCK_K + ks
                k_ok = k < H
                g = dgh + next_rows[:, None] * (3 * H) + k[None, :]
                w = w_hh + k[:, None] * H + units[None, :]
                g_ok = next_ok & k_ok[None, :]
                w_ok = k_ok[:, None] & unit_ok[None, :]
                for gate in tl.static_range(3):
                    acc = tl.dot(tl.load(g + gate * H, mask=g_ok, other=0.0,
                                         cache_modifier=".cg"),
                                 tl.load(w + gate * H * H, mask=w_ok, other=0.0), acc,
                                 input_precision=PRECISION)
            carry += acc
            # Step t's own gates (none at t = -1).
            here_ok = tile & (t >= 0)
            step_rows = (t * B + rows).to(tl.int64)
            y = dy + (rows.to(tl.int64) * dy_stride_b + t * dy_stride_t)[:, None] + units[None, :]
            grad = carry + tl.load(y, mask=here_ok, other=0.0).to(tl.float32)
            s = saved + step_rows[:, None] * (4 * H) + units[None, :]
            r = tl.load(s, mask=here_ok, other=0.0)
            z = tl.load(s + H, mask=here_ok, other=0.0)
            n = tl.load(s + 2 * H, mask=here_ok, other=0.0)
            gh_n = tl.load(s + 3 * H, mask=here_ok, other=0.0)
            h_prev = tl.load(hs + step_rows[:, None] * H + units[None, :], mask=here_ok,
                             other=0.0)
            d_n = grad * (1.0 - z) * (1.0 - n * n)
            d_z = grad * (h_prev - n) * z * (1.0 - z)
            d_r = d_n * gh_n * r * (1.0 - r)
            x = dgx + (rows.to(tl.int64) * dgx_stride_b + t * dgx_stride_t)[:, None] \
                + units[None, :]
            x_type = dgx.dtype.element_ty
            tl.store(x, d_r.to(x_type), mask=here_ok)
            tl.store(x + H, d_z.to(x_type), mask=here_ok)
            tl.store(x + 2 * H, d_n.to(x_type), mask=here_ok)
            g = dgh + step_rows[:, None] * (3 * H) + units[None, :]
            g_type = dgh.dtype.element_ty
            tl.store(g, d_r.to(g_type), mask=here_ok)
            tl.store(g + H, d_z.to(g_type), mask=here_ok)
            tl.store(g + 2 * H, (d_n * r).to(g_type), mask=here_ok)
            tl.store(carry_at, tl.where(t >= 0, grad * z, carry), mask=tile)
        if GRID_BARRIER:
            budget = _grid_barrier(sync, give_ups, i + 1, tl.num_programs(0) * groups,
                                   budget)
        i += 1

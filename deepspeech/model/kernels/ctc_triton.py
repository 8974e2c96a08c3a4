"""Triton kernels of the GPU CTC loss (``ctc.py`` launches them): one program per utterance.

``alpha_kernel`` runs the forward recursion over an utterance's frames, all label positions
of a frame at once, and keeps every alpha; ``occupancy_kernel`` runs the beta recursion
backwards and writes how much probability passes through each label position at each
frame. Frames are walked in order and nothing is accumulated atomically: the bits do not
depend on thread timing. Log space, float32.
"""

from __future__ import annotations

import triton
import triton.language as tl

MINUS_INF = tl.constexpr(float("-inf"))


@triton.jit
def _log_add3(a, b, c):
    top = tl.maximum(tl.maximum(a, b), c)
    shift = tl.where(top == MINUS_INF, 0.0, top)
    total = tl.exp(a - shift) + tl.exp(b - shift) + tl.exp(c - shift)
    return tl.where(top == MINUS_INF, MINUS_INF, shift + tl.log(total))


@triton.jit
def _utterance(lengths, target_lengths, extended, positions, BLOCK: tl.constexpr):
    """This program's utterance: its frames, its used label positions and their labels."""
    utterance = tl.program_id(0)
    s = tl.arange(0, BLOCK)
    frames = tl.load(lengths + utterance)
    used = 2 * tl.load(target_lengths + utterance) + 1
    inside = s < used
    label = tl.load(extended + utterance * positions + s, mask=inside, other=0)
    return utterance, s, frames, used, inside, label


@triton.jit
def alpha_kernel(log_probs, stride_batch, stride_frame, lengths, target_lengths, extended,
                  skippable, alpha, nll, max_frames, positions, BLOCK: tl.constexpr):
    utterance, s, frames, used, inside, label = _utterance(lengths, target_lengths, extended,
                                                           positions, BLOCK)
    skip = tl.load(skippable + utterance * positions + s, mask=inside, other=0) != 0
    emissions = log_probs + utterance * stride_batch + label
    rows = alpha + utterance * max_frames * positions

    emit = tl.load(emissions, mask=inside, other=MINUS_INF)
    current = tl.where(s < 2, emit, MINUS_INF)
    tl.store(rows + s, current, mask=inside)
    # Every program steps through the batch's longest utterance; a shorter one keeps
    # its last alpha, which the loss below reads. (`while`, not `range`: Triton's
    # interpreter, which runs the tests on CPUs, cannot take a runtime `range` bound.)
    t = 1
    while t < max_frames:
        # every position of frame t - 1 is stored before any is read shifted
        tl.debug_barrier()
        previous = rows + (t - 1) * positions
        one_back = tl.load(previous + s - 1, mask=inside & (s >= 1), other=MINUS_INF,
                           cache_modifier=".cg")
        two_back = tl.load(previous + s - 2, mask=inside & skip, other=MINUS_INF,
                           cache_modifier=".cg")
        emit = tl.load(emissions + t * stride_frame, mask=inside, other=MINUS_INF)
        running = t < frames
        current = tl.where(running, _log_add3(current, one_back, two_back) + emit, current)
        tl.store(rows + t * positions + s, current, mask=inside & running)
        t += 1

    last = tl.max(tl.where(s == used - 1, current, MINUS_INF), axis=0)
    before_last = tl.max(tl.where(s == used - 2, current, MINUS_INF), axis=0)
    # A tensor, not the constexpr itself: Triton 3.8's interpreter cannot take a constexpr
    # argument into tl.where inside the called function.
    nothing = tl.full([], MINUS_INF, last.dtype)
    tl.store(nll + utterance, -_log_add3(last, before_last, nothing))


@triton.jit
def occupancy_kernel(log_probs, stride_batch, stride_frame, lengths, target_lengths, extended,
                      skippable, alpha, nll, betas, occupancy, max_frames, positions,
                      BLOCK: tl.constexpr):
    utterance, s, frames, used, inside, label = _utterance(lengths, target_lengths, extended,
                                                           positions, BLOCK)
    # a label reached from two positions below: the skip seen from the position it skips from
    skip_up = tl.load(skippable + utterance * positions + s + 2, mask=(s + 2) < used,
                      other=0) != 0
    log_likelihood = -tl.load(nll + utterance)
    emissions = log_probs + utterance * stride_batch + label
    alphas = alpha + utterance * max_frames * positions
    out = occupancy + utterance * max_frames * positions
    pair = betas + utterance * 2 * BLOCK  # beta of two frames, alternating

    current = tl.full([BLOCK], MINUS_INF, tl.float32)
    t = max_frames - 1
    while t >= 0:
        # beta of frame t + 1 is whole before it is read shifted; the other half of
        # the pair, written next, was last read before the previous barrier
        tl.debug_barrier()
        following = pair + ((t + 1) % 2) * BLOCK
        one_ahead = tl.load(following + s + 1, mask=((s + 1) < used) & (t + 1 < frames),
                            other=MINUS_INF, cache_modifier=".cg")
        two_ahead = tl.load(following + s + 2, mask=skip_up & (t + 1 < frames),
                            other=MINUS_INF, cache_modifier=".cg")
        emit = tl.load(emissions + t * stride_frame, mask=inside, other=MINUS_INF)
        last_frame = tl.where(s >= used - 2, emit, MINUS_INF)
        current = tl.where(t == frames - 1, last_frame,
                           _log_add3(current, one_ahead, two_ahead) + emit)
        running = t < frames
        tl.store(pair + (t % 2) * BLOCK + s, current, mask=inside & running)
        a = tl.load(alphas + t * positions + s, mask=inside & running, other=MINUS_INF)
        tl.store(out + t * positions + s, tl.exp(a + current - emit - log_likelihood),
                 mask=inside & running)
        t -= 1

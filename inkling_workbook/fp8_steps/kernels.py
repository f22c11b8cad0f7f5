"""The fused SiLU-and-mul + FP8 per-token-group kernel built step by step (notebook 07).

Every step is a real kernel of its own, a small diff from the one before, and every step writes
the same bits as :func:`inkling_kernels.silu_and_mul_fp8_group_quant` (``check_steps``,
``tests/test_fp8_steps.py``): each idea changes how fast the bytes arrive, never the bytes.

0. ``naive``: one fused pass; gate and up as two loads (stride-2 gathers when interleaved), the
   group maximum on the integer bits, IEEE divisions, e4m3 rounding in integer operations.
1. ``hw_e4m3``: the hardware conversion ``cvt.rn.satfinite.e4m3x2.f32`` and ``max.f32``.
2. ``div_free``: no IEEE division an element (one reciprocal a group, split in two halves), and at
   decode none at all (the scale as a corrected product, the reciprocal from one MUFU.RCP).
3. ``pair_words``: interleaved 16-bit (gate, up) pairs read as one 32-bit word; bf16 widened and
   rounded on the bits.
4. ``decode_chain``: at decode, a warp holds one group: its maximum by one ``redux.sync``, the
   scales stored straight from that layout.
5. ``work_list``: the 3-D masked layout as a work list over the tiles holding a present row,
   shared out over a grid sized to the GPU.

Ideas that exist only compiled (inline PTX, sm_89+ or sm_90 proofs) are switched on by the
package's own rule (``_kernel_flags``); under Triton's interpreter a step then runs the
interpreter-equivalent path, which the package proves gives the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._activation import _silu_mul  # library helpers
from inkling_kernels.fp8 import (  # library helpers
    ACT_INTERLEAVED,
    ACT_NON_INTERLEAVED,
    FP8_DTYPE,
    empty_scales,
)

# library helpers: the package's jit helpers and launch rules that the steps adopt (one import
# block, so a move of these names inside the package is fixed here only)
from inkling_kernels.fp8._format import (  # library helpers
    _bf16_round,
    _div_by_scale,
    _e4m3_hw,
    _e4m3_signed,
    _group_scale,
    _warp_group_max,
)
from inkling_kernels.fp8._kernel import _store_b32, _work_counts  # library helpers
from inkling_kernels.fp8._launch import (  # library helpers
    DECODE_ROWS,
    _kernel_flags,
    _launch_config,
    _pair_words,
    _redux_aligned,
    _warp_redux_ok,
)
from inkling_kernels.fp8._layout import _canonical_scales  # library helpers


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    idea: str


STEPS = [
    Step(0, "naive", "one fused pass: two loads, the group max on the bits, IEEE divisions, integer e4m3 rounding"),
    Step(1, "hw_e4m3", "the hardware conversion cvt.rn.satfinite.e4m3x2.f32 (sm_89+) and max.f32 for the group max"),
    Step(2, "div_free", "no division an element: one split reciprocal a group; at decode a corrected product "
                        "and one MUFU.RCP instead of any division, and the sigmoid's reciprocal by MUFU too"),
    Step(3, "pair_words", "interleaved 16-bit (gate, up) pairs read as one 32-bit word, bf16 handled on the bits"),
    Step(4, "decode_chain", "decode: one warp a group, its max by one redux.sync, scales stored from that layout"),
    Step(5, "work_list", "3-D masked: a work list over the tiles holding a present row, on a GPU-sized grid"),
]  # fmt: skip
STEP_NAMES = [s.name for s in STEPS]


# ---- shared pieces ---------------------------------------------------------------------------


@triton.jit
def _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, GROUP: tl.constexpr, G):
    """A ``[BLOCK_M rows, BLOCK_G groups, GROUP]`` tile: its rows, groups, columns and masks."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    valid = rows < n_rows  # rows present: read and written
    pad = (rows >= T) & (rows < T_PAD)  # padding rows of a column-major scale buffer: scale 0
    g = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
    g_ok = g < G
    cols = g[None, :, None] * GROUP + tl.arange(0, GROUP)[None, None, :]
    mask = valid[:, None, None] & g_ok[None, :, None]
    return rows, valid, pad, g, g_ok, cols, mask


@triton.jit
def _load_two(x_ptr, row_off, cols, mask, N: tl.constexpr, ACT: tl.constexpr):
    """gate and up as two loads: stride-2 gathers when interleaved, two halves otherwise."""
    if ACT == 1:
        gate = tl.load(x_ptr + row_off + 2 * cols, mask=mask, other=0)
        up = tl.load(x_ptr + row_off + 2 * cols + 1, mask=mask, other=0)
    else:
        gate = tl.load(x_ptr + row_off + cols, mask=mask, other=0)
        up = tl.load(x_ptr + row_off + N + cols, mask=mask, other=0)
    return gate, up


@triton.jit
def _amax_bits(y):
    """Each group's max of |y| over its non-NaN elements, on the bits (+-Inf capped at FLT_MAX)."""
    mag = y.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    mag = tl.where(mag > 0x7F800000, 0, mag)  # NaN: not part of the max
    amax = tl.minimum(tl.max(mag, axis=2), 0x7F7FFFFF).to(tl.float32, bitcast=True)
    return tl.maximum(amax, 1e-10)


@triton.jit
def _amax_f32(y, HW: tl.constexpr):
    """Compiled: ``max.f32`` returns the non-NaN operand, so the float max is the bits' max."""
    if HW:
        amax = tl.max(tl.abs(y), axis=2)
        return tl.minimum(tl.maximum(amax, 1e-10), 3.4028234663852886e38)
    return _amax_bits(y)


@triton.jit
def _store_scales(s_ptr, s_off, s, valid, s_mask, SCALE_ASM: tl.constexpr):
    s = tl.where(valid[:, None], s, 0.0)  # padding rows: 0
    if SCALE_ASM:
        _store_b32(s_ptr + s_off, s.to(tl.int32, bitcast=True), s_mask)
    else:
        tl.store(s_ptr + s_off, s, mask=s_mask)


# ---- step 0: naive -------------------------------------------------------------------------


@triton.jit
def _tile_naive(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, F: tl.constexpr):  # fmt: skip
    rows, valid, pad, g, g_ok, cols, mask = _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M, BLOCK_G, GROUP, N // GROUP)
    gate, up = _load_two(x_ptr, e * sxe + rows[:, None, None] * sxm, cols, mask, N, ACT)
    y = _silu_mul(gate, up).to(x_ptr.dtype.element_ty).to(tl.float32)  # rounded as silu_and_mul stores it
    amax = _amax_bits(y)
    s, r, r_lo = _group_scale(amax, UE8M0, False, False)  # IEEE: s = div_rn(amax, 448)
    if UE8M0:
        t = y * r[:, :, None]  # a power of two: the product is the exact quotient
    else:
        t = tl.math.div_rn(y, s[:, :, None] + tl.zeros_like(y))
    q = _e4m3_signed(t).to(tl.uint8)
    tl.store(q_ptr + e * sqe + rows[:, None, None] * sqm + cols, q, mask=mask)
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    _store_scales(s_ptr, e * sse + rows[:, None] * ssm + g[None, :] * ssg, s, valid, s_mask, False)


# ---- step 1: hardware e4m3 -------------------------------------------------------------------


@triton.jit
def _tile_hw_e4m3(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                  N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, F: tl.constexpr):  # fmt: skip
    HW: tl.constexpr = F[0]
    rows, valid, pad, g, g_ok, cols, mask = _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M, BLOCK_G, GROUP, N // GROUP)
    gate, up = _load_two(x_ptr, e * sxe + rows[:, None, None] * sxm, cols, mask, N, ACT)
    y = _silu_mul(gate, up).to(x_ptr.dtype.element_ty).to(tl.float32)  # rounded as silu_and_mul stores it
    amax = _amax_f32(y, HW)
    s, r, r_lo = _group_scale(amax, UE8M0, False, False)  # IEEE: s = div_rn(amax, 448)
    if UE8M0:
        t = y * r[:, :, None]  # a power of two: the product is the exact quotient
    else:
        t = tl.math.div_rn(y, s[:, :, None] + tl.zeros_like(y))
    if HW:
        q = _e4m3_hw(t)  # cvt.rn.satfinite.e4m3x2.f32: four bytes in one 32-bit register
    else:
        q = _e4m3_signed(t).to(tl.uint8)  # the interpreter: the same bytes by integer operations
    tl.store(q_ptr + e * sqe + rows[:, None, None] * sqm + cols, q, mask=mask)
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    _store_scales(s_ptr, e * sse + rows[:, None] * ssm + g[None, :] * ssg, s, valid, s_mask, False)


# ---- step 2: division-free -------------------------------------------------------------------


@triton.jit
def _tile_div_free(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                   N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, F: tl.constexpr):  # fmt: skip
    HW: tl.constexpr = F[0]
    SPLIT_DIV: tl.constexpr = F[1]
    FAST_SCALE: tl.constexpr = F[2]
    FTZ_EXP: tl.constexpr = F[3]
    rows, valid, pad, g, g_ok, cols, mask = _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M, BLOCK_G, GROUP, N // GROUP)
    gate, up = _load_two(x_ptr, e * sxe + rows[:, None, None] * sxm, cols, mask, N, ACT)
    y = _silu_mul(gate, up, FTZ_EXP).to(x_ptr.dtype.element_ty).to(tl.float32)
    amax = _amax_f32(y, HW)
    s, r, r_lo = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)  # once a group
    if UE8M0:
        t = y * r[:, :, None]  # a power of two: the product is the exact quotient
    else:
        t = _div_by_scale(y, s[:, :, None], r[:, :, None], r_lo[:, :, None], SPLIT_DIV)  # fma(y, r, y * r_lo)
    if HW:
        q = _e4m3_hw(t)  # cvt.rn.satfinite.e4m3x2.f32: four bytes in one 32-bit register
    else:
        q = _e4m3_signed(t).to(tl.uint8)  # the interpreter: the same bytes by integer operations
    tl.store(q_ptr + e * sqe + rows[:, None, None] * sqm + cols, q, mask=mask)
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    _store_scales(s_ptr, e * sse + rows[:, None] * ssm + g[None, :] * ssg, s, valid, s_mask, False)


# ---- step 3: pair words ----------------------------------------------------------------------


@triton.jit
def _load_words(x_ptr, e, rows, sxe, sxm, cols, mask, N: tl.constexpr, ACT: tl.constexpr, PAIR_WORDS: tl.constexpr,
                BF16_BITS: tl.constexpr):  # fmt: skip
    """Interleaved 16-bit pairs as one little-endian 32-bit word each (gate in the low half)."""
    if PAIR_WORDS:
        # offsets in words from the halved strides (even by the launcher's rule): the compiler
        # keeps their alignment, so the loads stay vectorized
        words_ptr = x_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
        words = tl.load(words_ptr + e * (sxe // 2) + rows[:, None, None] * (sxm // 2) + cols, mask=mask, other=0)
        if BF16_BITS:  # a bf16 is the top half of the fp32 of the same value
            gate = (words << 16).to(tl.float32, bitcast=True)
            up = (words & 0xFFFF0000).to(tl.float32, bitcast=True)
        else:
            gate = (words & 0xFFFF).to(tl.uint16).to(x_ptr.dtype.element_ty, bitcast=True)
            up = (words >> 16).to(tl.uint16).to(x_ptr.dtype.element_ty, bitcast=True)
    else:
        gate, up = _load_two(x_ptr, e * sxe + rows[:, None, None] * sxm, cols, mask, N, ACT)
    return gate, up


@triton.jit
def _tile_pair_words(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                     N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, F: tl.constexpr):  # fmt: skip
    HW: tl.constexpr = F[0]
    SPLIT_DIV: tl.constexpr = F[1]
    FAST_SCALE: tl.constexpr = F[2]
    FTZ_EXP: tl.constexpr = F[3]
    PAIR_WORDS: tl.constexpr = F[4]
    BF16_BITS: tl.constexpr = F[5]
    rows, valid, pad, g, g_ok, cols, mask = _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M, BLOCK_G, GROUP, N // GROUP)
    gate, up = _load_words(x_ptr, e, rows, sxe, sxm, cols, mask, N, ACT, PAIR_WORDS, BF16_BITS)
    if BF16_BITS:
        y = _bf16_round(_silu_mul(gate, up, FTZ_EXP))  # cvt.rn.bf16x2.f32, widened on the bits
    else:
        y = _silu_mul(gate, up, FTZ_EXP).to(x_ptr.dtype.element_ty).to(tl.float32)
    amax = _amax_f32(y, HW)
    s, r, r_lo = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)  # once a group
    if UE8M0:
        t = y * r[:, :, None]  # a power of two: the product is the exact quotient
    else:
        t = _div_by_scale(y, s[:, :, None], r[:, :, None], r_lo[:, :, None], SPLIT_DIV)  # fma(y, r, y * r_lo)
    if HW:
        q = _e4m3_hw(t)  # cvt.rn.satfinite.e4m3x2.f32: four bytes in one 32-bit register
    else:
        q = _e4m3_signed(t).to(tl.uint8)  # the interpreter: the same bytes by integer operations
    tl.store(q_ptr + e * sqe + rows[:, None, None] * sqm + cols, q, mask=mask)
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    _store_scales(s_ptr, e * sse + rows[:, None] * ssm + g[None, :] * ssg, s, valid, s_mask, False)


# ---- step 4: the decode chain ----------------------------------------------------------------


@triton.jit
def _tile_decode(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                 N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, F: tl.constexpr):  # fmt: skip
    HW: tl.constexpr = F[0]
    SPLIT_DIV: tl.constexpr = F[1]
    FAST_SCALE: tl.constexpr = F[2]
    FTZ_EXP: tl.constexpr = F[3]
    PAIR_WORDS: tl.constexpr = F[4]
    BF16_BITS: tl.constexpr = F[5]
    WARP_REDUX: tl.constexpr = F[6]
    SCALE_ASM: tl.constexpr = F[7]
    rows, valid, pad, g, g_ok, cols, mask = _coords(pid_m, pid_g, n_rows, T, T_PAD, BLOCK_M, BLOCK_G, GROUP, N // GROUP)
    gate, up = _load_words(x_ptr, e, rows, sxe, sxm, cols, mask, N, ACT, PAIR_WORDS, BF16_BITS)
    if BF16_BITS:
        y = _bf16_round(_silu_mul(gate, up, FTZ_EXP))  # cvt.rn.bf16x2.f32, widened on the bits
    else:
        y = _silu_mul(gate, up, FTZ_EXP).to(x_ptr.dtype.element_ty).to(tl.float32)
    if WARP_REDUX:  # every element gets its group's max: a thread's four, then one redux.sync
        amax = _warp_group_max(y).to(tl.float32, bitcast=True)
        amax = tl.minimum(tl.maximum(amax, 1e-10), 3.4028234663852886e38)
        sb, rb, lb = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)  # in y's shape
        s = tl.max(sb, axis=2)  # one a group again, for the store
    else:
        amax = _amax_f32(y, HW)
        s, r, r_lo = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)
        sb, rb, lb = s[:, :, None], r[:, :, None], r_lo[:, :, None]
    if UE8M0:
        t = y * rb
    else:
        t = _div_by_scale(y, sb, rb, lb, SPLIT_DIV)
    if HW:
        q = _e4m3_hw(t)  # cvt.rn.satfinite.e4m3x2.f32: four bytes in one 32-bit register
    else:
        q = _e4m3_signed(t).to(tl.uint8)  # the interpreter: the same bytes by integer operations
    tl.store(q_ptr + e * sqe + rows[:, None, None] * sqm + cols, q, mask=mask)
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    _store_scales(s_ptr, e * sse + rows[:, None] * ssm + g[None, :] * ssg, s, valid, s_mask, SCALE_ASM)


# ---- the kernels: a program per tile slot (steps 0-4), a work list (step 5) -------------------


@triton.jit(do_not_specialize=["T", "T_PAD"])
def fp8_step_kernel(x_ptr, m_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                    N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                    HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
                    STEP: tl.constexpr, F: tl.constexpr):  # fmt: skip
    """Steps 0-4: program (tile slot, expert); masked, a slot with no present row (and no padding
    scale row) returns at once."""
    G_TILES: tl.constexpr = (N // GROUP + BLOCK_G - 1) // BLOCK_G
    pid = tl.program_id(0)
    e = tl.program_id(1)
    n_rows = T
    run = True
    if HAS_MASK:
        n_rows = tl.minimum(tl.maximum(tl.load(m_ptr + e).to(tl.int32), 0), T)
        first = (pid // G_TILES) * BLOCK_M
        run = (first < n_rows) | ((first + BLOCK_M > T) & (first < T_PAD))
    if run:
        pid_m, pid_g = pid // G_TILES, pid % G_TILES
        if STEP == 0:
            _tile_naive(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                        N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip
        elif STEP == 1:
            _tile_hw_e4m3(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                          N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip
        elif STEP == 2:
            _tile_div_free(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                           N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip
        elif STEP == 3:
            _tile_pair_words(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm,
                             ssg, N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip
        else:
            _tile_decode(e, pid_m, pid_g, n_rows, x_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg,
                         N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip


@triton.jit(do_not_specialize=["T", "T_PAD", "E"])
def fp8_work_list_kernel(x_ptr, m_ptr, q_ptr, s_ptr, T, T_PAD, sxe, sxm, sqe, sqm, sse, ssm, ssg, E,
                         N: tl.constexpr, GROUP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, E_POW2: tl.constexpr,
                         F: tl.constexpr):  # fmt: skip
    """Step 5: the tiles holding a present row (or a padding scale row), expert after expert,
    shared out over the grid; every program reads the E counts itself (nothing on the host)."""
    G_TILES: tl.constexpr = (N // GROUP + BLOCK_G - 1) // BLOCK_G
    eo, cnt, rt, tiles, ends, total = _work_counts(m_ptr, E, T, T_PAD, BLOCK_M, G_TILES, E_POW2)
    pad_lo = T // BLOCK_M  # row tiles holding a padding row start here
    t = tl.program_id(0)
    while t < total:
        e = tl.sum((ends <= t).to(tl.int32), 0)  # the item's expert
        sel = eo == e
        local = t - tl.sum(tl.where(sel, ends - tiles, 0), 0)
        rt_e = tl.sum(tl.where(sel, rt, 0), 0)
        j = local // G_TILES
        pid_m = tl.where(j < rt_e, j, tl.maximum(rt_e, pad_lo) + (j - rt_e))  # then the padding tiles
        _tile_decode(e, pid_m, local % G_TILES, tl.sum(tl.where(sel, cnt, 0), 0), x_ptr, q_ptr, s_ptr, T, T_PAD,
                     sxe, sxm, sqe, sqm, sse, ssm, ssg, N, GROUP, ACT, UE8M0, BLOCK_M, BLOCK_G, F)  # fmt: skip
        t += tl.num_programs(0)


# ---- launcher --------------------------------------------------------------------------------


def step_flags(step: int, device: torch.device, dtype: torch.dtype, *, interleaved_words: bool, redux_ok: bool,
               decode: bool) -> tuple:  # fmt: skip
    """The compiled-only switches a step has adopted, by the package's own rule (``_kernel_flags``):
    (HW, SPLIT_DIV, FAST_SCALE, FTZ_EXP, PAIR_WORDS, BF16_BITS, WARP_REDUX, SCALE_ASM). Under the
    interpreter every compiled-only one is off."""
    lib = _kernel_flags(device, dtype, _backend.uses_interpreter(device))
    on = [step >= 1, step >= 2, step >= 2, step >= 2, step >= 3, step >= 3, step >= 4, step >= 4]
    values = [
        lib["HW"],
        lib["SPLIT_DIV"],
        lib["FAST_SCALE"] and decode,  # at decode only, as the package launches it
        lib["FTZ_EXP"],
        interleaved_words,
        lib["BF16_BITS"],
        lib["WARP_REDUX"] and redux_ok,
        lib["SCALE_ASM"],
    ]
    off = [False, False, False, 0, False, False, False, False]
    return tuple(v if o else z for v, o, z in zip(values, on, off, strict=True))


def _resolve(step) -> int:
    if isinstance(step, Step):
        step = step.name
    if isinstance(step, int) and not isinstance(step, bool) and 0 <= step < len(STEPS):
        return step
    if isinstance(step, str) and step in STEP_NAMES:
        return STEP_NAMES.index(step)
    raise ValueError(f"step must be one of {STEP_NAMES} (or its index), got {step!r}")


def run_step(
    step,
    gateup: torch.Tensor,
    *,
    interleaved: bool = True,
    group_size: int = 128,
    scale_ue8m0: bool = False,
    column_major_scales: bool = False,
    masked_m: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step`` (name, index or :class:`Step`) on ``gateup`` (``[M, 2N]`` or ``[E, T, 2N]``,
    bf16/fp16/fp32, unit stride within a row), compiled on CUDA, interpreted on CPU. Returns
    ``(q, scales)`` in the package's layouts; ``out`` as the package's (q, scales) to write into."""
    index = _resolve(step)
    if not isinstance(gateup, torch.Tensor):
        raise TypeError(f"gateup must be a torch.Tensor, got {type(gateup).__name__}")
    if gateup.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"gateup must be bf16, fp16 or fp32, got {gateup.dtype}")
    if gateup.dim() not in (2, 3) or gateup.shape[-1] % 2 or gateup.stride(-1) != 1:
        raise ValueError(f"gateup must be [M, 2N] or [E, T, 2N] with unit stride in a row, got {tuple(gateup.shape)}")
    N = gateup.shape[-1] // 2
    if group_size not in (16, 32, 64, 128, 256, 512, 1024) or N % group_size or N == 0:
        raise ValueError(f"group_size must be a power of two in [16, 1024] dividing N = {N}, got {group_size}")
    if masked_m is not None and (gateup.dim() != 3 or masked_m.shape != (gateup.shape[0],)):
        raise ValueError("masked_m must be [E] for a 3-D gateup [E, T, 2N]")
    if gateup.numel() >= 2**31:
        raise ValueError("gateup: the steps use 32-bit offsets (fewer than 2**31 elements)")
    lead, G, device = tuple(gateup.shape[:-1]), N // group_size, gateup.device
    if out is None:
        q = torch.empty((*lead, N), dtype=FP8_DTYPE, device=device)
        scales = empty_scales(lead, G, column_major_scales, device)
    else:
        q, scales = out
    x3 = gateup if gateup.dim() == 3 else gateup.unsqueeze(0)
    q3 = q if q.dim() == 3 else q.unsqueeze(0)
    E, T = x3.shape[0], x3.shape[1]
    if E == 0 or T == 0:
        return q, scales
    pad = column_major_scales and _canonical_scales(scales, lead, G, True)
    t_pad = -(-T // 4) * 4 if pad else T
    s_strides = tuple(scales.stride()) if scales.dim() == 3 else (0, *scales.stride())
    interpreted = _backend.uses_interpreter(device)
    block_m, block_g, warps = _launch_config(T, G, group_size, interpreted)
    act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
    words = interleaved and _pair_words(x3)
    redux = _warp_redux_ok(act, words, group_size, block_m * block_g * group_size, warps, T, _redux_aligned(x3, q3))
    flags = step_flags(index, device, gateup.dtype, interleaved_words=words, redux_ok=redux, decode=T <= DECODE_ROWS)
    args = (x3, masked_m if masked_m is not None else x3, q3.view(torch.uint8), scales, T, t_pad,
            x3.stride(0), x3.stride(1), q3.stride(0), q3.stride(1), *s_strides)  # fmt: skip
    consts = dict(N=N, GROUP=group_size, ACT=act, UE8M0=scale_ue8m0, BLOCK_M=block_m, BLOCK_G=block_g, F=flags)
    tiles = -(-t_pad // block_m) * -(-G // block_g)
    if index == 5 and masked_m is not None:
        programs = 64 if interpreted else 16 * _backend.sm_count(_backend.cuda_index(device))
        grid = (max(1, min(E * tiles, programs)),)
        e_pow2 = 1 << (E - 1).bit_length()
        _backend.launch(fp8_work_list_kernel, grid, device, *args, E, E_POW2=e_pow2, num_warps=warps, **consts)
    else:
        grid = (tiles, E)
        _backend.launch(fp8_step_kernel, grid, device, *args, HAS_MASK=masked_m is not None, STEP=min(index, 4),
                        num_warps=warps, **consts)  # fmt: skip
    return q, scales


# ---- sources for the notebook ----------------------------------------------------------------

#: each step's new code: the tile function (steps 0-4) or the kernel (step 5)
SOURCES = ["_tile_naive", "_tile_hw_e4m3", "_tile_div_free", "_tile_pair_words", "_tile_decode", "fp8_work_list_kernel"]


def step_source(step) -> str:
    """The Python source of a step's tile function (step 5: the work-list kernel)."""
    import inspect

    fn = globals()[SOURCES[_resolve(step)]]
    return inspect.getsource(getattr(fn, "fn", fn))


def step_diff(step) -> str:
    """What a step changes: a unified diff of its tile's source against the previous step's
    (steps 0 and 5, the first tile and the work-list kernel: their whole source)."""
    import difflib

    index = _resolve(step)
    if index in (0, 5):
        return step_source(index)
    before, after = _body(step_source(index - 1)), _body(step_source(index))
    lines = difflib.unified_diff(before, after, SOURCES[index - 1], SOURCES[index], n=0, lineterm="")
    return "\n".join(line for line in lines if not line.startswith("@@"))


def _body(src: str) -> list[str]:
    """A jit function's lines after its signature (which differs only in the name)."""
    lines = src.splitlines()
    end = next(i for i, line in enumerate(lines) if line.rstrip().endswith(":") or "# fmt: skip" in line)
    return lines[end + 1 :]

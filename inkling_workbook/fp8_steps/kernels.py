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
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend

# library helpers: the package's jit helpers and launch rules that the steps adopt (one import
# block, so a move of these names inside the package is fixed here only)
from inkling_kernels._fp8_format import (  # library helpers
    _bf16_round,
    _div_by_scale,
    _e4m3_hw,
    _e4m3_signed,
    _group_scale,
    _warp_group_max,
)
from inkling_kernels._fp8_kernel import _store_b32, _work_counts  # library helpers
from inkling_kernels._fp8_launch import (  # library helpers
    DECODE_ROWS,
    _kernel_flags,
    _launch_config,
    _pair_words,
    _redux_aligned,
    _warp_redux_ok,
)
from inkling_kernels._fp8_layout import _canonical_scales  # library helpers
from inkling_kernels.fp8 import (  # library helpers
    ACT_INTERLEAVED,
    ACT_NON_INTERLEAVED,
    FP8_DTYPE,
    empty_scales,
    silu_and_mul_fp8_group_quant,
)
from inkling_kernels.reference import fp8_group_quant_ref
from inkling_kernels.silu_and_mul import _silu_mul  # library helpers
from inkling_workbook.measure import provenance


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


# ---- the bitwise check -----------------------------------------------------------------------

Q_POISON = 0xA5  # every output byte before a run: a byte left unwritten shows as this
S_POISON = 0x7FA5A5A5  # every scale word before a run (a NaN no kernel writes)


@dataclass(frozen=True)
class Case:
    name: str
    lead: tuple  # (M,) or (E, T)
    N: int
    dtype: torch.dtype = torch.bfloat16
    interleaved: bool = True
    group_size: int = 128
    scale_ue8m0: bool = False
    column_major_scales: bool = False
    masked: tuple | None = None  # rows present per expert (3-D only)

    def kwargs(self, device) -> dict:
        masked_m = None if self.masked is None else torch.tensor(self.masked, dtype=torch.int32, device=device)
        return dict(interleaved=self.interleaved, group_size=self.group_size, scale_ue8m0=self.scale_ue8m0,
                    column_major_scales=self.column_major_scales, masked_m=masked_m)  # fmt: skip


#: small enough for the interpreter: both layouts, 2-D and 3-D masked, groups of 64 and 128,
#: bf16/fp16/fp32, column-major and ue8m0 scales
CPU_CASES = [
    Case("il_bf16", (5,), 256),
    Case("nil_bf16", (5,), 256, interleaved=False),
    Case("il_fp16_g64", (4,), 256, torch.float16, group_size=64),
    Case("nil_fp16_colmajor", (5,), 256, torch.float16, interleaved=False, column_major_scales=True),
    Case("il_fp32_ue8m0", (3,), 128, torch.float32, scale_ue8m0=True),
    Case("il_bf16_3d", (2, 3), 256),
    Case("il_bf16_masked_colmajor", (3, 5), 256, masked=(5, 0, 2), column_major_scales=True),
    Case("nil_bf16_masked_g64_ue8m0", (3, 4), 128, interleaved=False, group_size=64, scale_ue8m0=True,
         masked=(1, 4, 0)),
]  # fmt: skip
#: timed on the GPU (bf16, groups of 128): decode, prefill, the masked layout on ragged counts
TIMED_CASES = [
    Case("M16_N3072_il", (16,), 3072),
    Case("M16_N3072_nil", (16,), 3072, interleaved=False),
    Case("M8192_N3072_il", (8192,), 3072),
    Case("M8192_N3072_nil", (8192,), 3072, interleaved=False),
    Case("masked_ragged_E8_T256_N3072", (8, 256), 3072, masked=(256, 0, 17, 128, 255, 64, 1, 200)),
]
#: checked compiled: the timed cases (their compiles serve the timing too), and fp16, fp32 with
#: ue8m0, column-major scales with padding rows, groups of 64 and a masked decode layout
GPU_CASES = TIMED_CASES + [
    Case("il_fp16_decode", (8,), 1536, torch.float16),
    Case("nil_bf16_colmajor", (1000,), 1536, interleaved=False, column_major_scales=True),
    Case("il_fp32_ue8m0", (3,), 128, torch.float32, scale_ue8m0=True),
    Case("il_bf16_masked_decode_g64", (8, 16), 1536, group_size=64, masked=(16, 0, 3, 9, 1, 16, 7, 2),
         column_major_scales=True),
]  # fmt: skip


def make_gateup(case: Case, device, seed: int = 0) -> torch.Tensor:
    """Fresh random ``gateup`` for ``case`` (never zeros) with edge values planted in the first
    rows of 16-bit inputs: a group of zeros, e4m3 ties (16 * up with the group max 448, so the
    scale is 1 and 17, 432 and 2**-10 are exact ties), a NaN and an Inf."""
    gen = torch.Generator().manual_seed(seed)
    rows = 1
    for d in case.lead:
        rows *= d
    gate = torch.randn(rows, case.N, generator=gen) * 3
    up = torch.randn(rows, case.N, generator=gen) * 3
    if case.dtype != torch.float32 and rows >= 3:
        k = case.group_size
        gate[0, :k] = 0.0  # a group of zeros: amax 0, the scale from eps
        gate[1, :k] = 16.0  # silu(16) rounds to 16 in bf16 and fp16: y = 16 * up exactly
        up[1, :k] = torch.randn(k, generator=gen).mul(4).round().div(4)
        up[1, :6] = torch.tensor([28.0, 27.0, 1.0625, 2.0**-14, -3 * 2.0**-14, -26.5])  # 448, ties
        gate[2, 0] = float("nan")
        gate[2, k - 1] = 16.0
        up[2, k - 1] = float("inf")
    from inkling_kernels.reference import join_gateup

    gateup = join_gateup(gate.to(case.dtype), up.to(case.dtype), case.interleaved)
    return gateup.reshape(*case.lead, 2 * case.N).to(device)


def _poisoned_out(case: Case, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scales) in the package's layout, every byte of their storage (padding too) poisoned."""
    G = case.N // case.group_size
    q = torch.full((*case.lead, case.N), Q_POISON, dtype=torch.uint8, device=device).view(FP8_DTYPE)
    scales = empty_scales(case.lead, G, case.column_major_scales, device)
    _storage_words(scales).fill_(S_POISON)
    return q, scales


def _poison(out: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Refill outputs from :func:`_poisoned_out` with the poison, padding included."""
    out[0].view(torch.uint8).fill_(Q_POISON)
    _storage_words(out[1]).fill_(S_POISON)


def _storage_words(scales: torch.Tensor) -> torch.Tensor:
    """Every 32-bit word of the storage under ``scales`` (padding rows included), as int32."""
    return torch.empty(0, dtype=torch.int32, device=scales.device).set_(scales.untyped_storage())


def _present(case: Case, device) -> torch.Tensor | None:
    """Boolean [E, T] of the rows present (masked cases), else None."""
    if case.masked is None:
        return None
    E, T = case.lead
    return torch.arange(T, device=device)[None, :] < torch.tensor(case.masked, device=device)[:, None]


def reference(case: Case, gateup: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch formula (:func:`inkling_kernels.reference.fp8_group_quant_ref`) on the kernels'
    own activation (``silu_and_mul``, rounded to gateup's dtype), row-major scales, all rows.
    The formula runs on the CPU: torch's CUDA division by a scalar multiplies by its reciprocal,
    which is not the formula's IEEE division (on the H200 it moved scales of 8 of 9 cases)."""
    from inkling_kernels import silu_and_mul

    y = silu_and_mul(gateup.reshape(-1, gateup.shape[-1]), interleaved=case.interleaved)
    q, s = fp8_group_quant_ref(y.cpu(), case.group_size, scale_ue8m0=case.scale_ue8m0)
    return q.reshape(*case.lead, case.N).to(gateup.device), s.reshape(*case.lead, -1).to(gateup.device)


def _run_package(case, gateup, out):
    return silu_and_mul_fp8_group_quant(gateup, out=out, enable_pdl=False, **case.kwargs(gateup.device))


def check_case(case: Case, device, runners: dict, seed: int = 0) -> list[dict]:
    """Every runner (name -> fn(gateup, out=..., **case kwargs)) on one case against the package
    (raw bits of q and of the whole scale storage, both poisoned first) and the reference (the
    rows present)."""
    device = torch.device(device)
    gateup = make_gateup(case, device, seed)
    pkg_out = _run_package(case, gateup, _poisoned_out(case, device))
    pkg_q, pkg_s = pkg_out[0].view(torch.uint8), _storage_words(pkg_out[1])
    ref_q, ref_s = reference(case, gateup)
    present = _present(case, device)
    rows = []
    for name, fn in runners.items():
        q, s = fn(gateup, out=_poisoned_out(case, device), **case.kwargs(device))
        qb, sw = q.view(torch.uint8), _storage_words(s)
        q_pkg = torch.equal(qb, pkg_q)
        s_pkg = torch.equal(sw, pkg_s)
        sel = (lambda t: t[present]) if present is not None else (lambda t: t)
        q_ref = torch.equal(sel(qb), sel(ref_q.view(torch.uint8)))
        s_ref = torch.equal(sel(s.contiguous().view(torch.int32)), sel(ref_s.view(torch.int32)))
        rows.append({"step": name, "case": case.name, "device": device.type, "q_equal_package": q_pkg,
                     "scales_equal_package": s_pkg, "equal_reference": q_ref and s_ref,
                     "q_bytes_differing": int((qb != pkg_q).sum()),
                     "ok": q_pkg and s_pkg and q_ref and s_ref})  # fmt: skip
    return rows


def step_runners(steps=None) -> dict:
    """name -> fn(gateup, **kwargs) for ``steps`` (default: all)."""
    names = [STEP_NAMES[_resolve(s)] for s in steps] if steps is not None else STEP_NAMES
    return {n: (lambda x, n=n, **kw: run_step(n, x, **kw)) for n in names}


def check_steps(device="cpu", cases=None, steps=None, runners=None, seed: int = 0) -> list[dict]:
    """Every step (or ``runners``) bitwise against the package and the reference on ``cases``
    (default: :data:`CPU_CASES` on CPU, :data:`GPU_CASES` on CUDA). One dict a step and case."""
    device = torch.device(device)
    if cases is None:
        cases = GPU_CASES if device.type == "cuda" else CPU_CASES
    runners = runners if runners is not None else step_runners(steps)
    rows = []
    for i, case in enumerate(cases):
        rows += check_case(case, device, runners, seed + i)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """One row a step: cases checked and how many matched the package and the reference."""
    out = {}
    for r in rows:
        d = out.setdefault(r["step"], {"step": r["step"], "cases": 0, "equal_package": 0, "equal_reference": 0})
        d["cases"] += 1
        d["equal_package"] += r["q_equal_package"] and r["scales_equal_package"]
        d["equal_reference"] += r["equal_reference"]
    return list(out.values())


# ---- timing (GPU only) -----------------------------------------------------------------------


def fp8_bytes(rows_present: int, N: int, group_size: int = 128) -> int:
    """Bytes the fused op must move: read 4N (bf16 gate and up), write N (e4m3) + 4N/group (fp32)."""
    return rows_present * (4 * N + N + 4 * N // group_size)


def time_steps(device="cuda", cases=TIMED_CASES, passes: int | None = None) -> list[dict]:
    """Every step and the package (PDL off, outputs preallocated) on ``cases`` with the workbook's
    method (:mod:`inkling_workbook.measure.bench`: CUDA-graph replay of a fixed call count, passes
    interleaved). GPU only; call :func:`bench.warm_clocks` first."""
    from inkling_workbook.measure import bench

    bench.require_gpu()
    device = torch.device(device)
    rows = []
    for case in cases:
        name, lead, N, masked = case.name, case.lead, case.N, case.masked
        gateup = make_gateup(case, device)
        out = _poisoned_out(case, device)
        kw = case.kwargs(device)
        calls = {s.name: (lambda s=s.name: run_step(s, gateup, out=out, **kw)) for s in STEPS}
        calls["package"] = lambda: silu_and_mul_fp8_group_quant(gateup, out=out, enable_pdl=False, **kw)
        # every implementation checked on the very inputs it is timed on: raw bits equal to the package's
        want = calls["package"]()
        want = (want[0].view(torch.uint8).clone(), _storage_words(want[1]).clone())
        for k, fn in calls.items():
            _poison(out)
            q, s = fn()
            if not (torch.equal(q.view(torch.uint8), want[0]) and torch.equal(_storage_words(s), want[1])):
                raise AssertionError(f"{k} on the timed inputs of {name}: bits differ from the package's")
        decode = lead[-1] <= bench.DECODE_MAX_M
        # five passes past decode, as the FP8 sweep (bench.FP8_PASSES): two left medians of the same
        # kernel apart (step 5 launches step 4's kernel on 2-D inputs)
        n_passes = passes or (bench.DECODE_PASSES if decode else bench.FP8_PASSES)
        timings = bench.time_calls(calls, n_passes)
        present = sum(masked) if masked is not None else lead[0] * (lead[1] if len(lead) == 2 else 1)
        clock = provenance.gpu_state().get("sm_clock_mhz")
        for i, k in enumerate(calls):
            rows.append({"step": i, "impl": k, "case": name, "rows_present": present, "N": N,
                         "layout": "il" if case.interleaved else "nil", "l2": "warm",
                         **timings[k].columns(fp8_bytes(present, N), 4), "sm_clock_mhz": clock})  # fmt: skip
    return rows


def measure_steps(out: str | Path | None = None, device="cuda", cases=None, command=None) -> tuple[Path, Path]:
    """Check every step on the GPU cases, then time them -> ``data/fp8_steps_<gpu>.csv`` and
    ``.json`` (provenance, method, steps, the bitwise summary). Under a minute on an H200."""
    from inkling_workbook.measure import bench
    from inkling_workbook.ports.silu_and_mul.port_steps import write_records

    bench.require_gpu()
    cases = TIMED_CASES if cases is None else cases
    out = Path(out) if out else provenance.REPO_ROOT / "data" / f"fp8_steps_{provenance.device_slug()}.csv"
    if out.suffix != ".csv":
        out = out / f"fp8_steps_{provenance.device_slug()}.csv"
    meta = provenance.collect(command)
    checks = check_steps(device)
    meta["bitwise"] = {"cases": [c.name for c in GPU_CASES], "summary": summary(checks),
                       "all_ok": all(r["ok"] for r in checks),
                       "failures": [r for r in checks if not r["ok"]]}  # fmt: skip
    meta["clock_warmup"] = bench.warm_clocks()
    meta["timing"] = {
        "method": "inkling_workbook.measure.bench: GraphTimer (>= 100 calls, >= 1 ms a replay), time_interleaved",
        "rounds": bench.ROUNDS,
        "decode_passes": bench.DECODE_PASSES,
        "other_passes": bench.FP8_PASSES,
        "l2": "warm (the same buffers every call)",
        "output_policy": "outputs preallocated, PDL off",
        "spread": "lowest and highest pass median",
        "bytes": "read 4N, write N + 4N/128 a row present",
    }
    package = {"index": len(STEPS), "name": "package", "idea": "inkling_kernels.silu_and_mul_fp8_group_quant, PDL off"}
    meta["steps"] = [s.__dict__ for s in STEPS] + [package]
    meta["cases"] = [{"case": c.name, "lead": list(c.lead), "N": c.N, "interleaved": c.interleaved,
                      "masked_m": list(c.masked) if c.masked else None} for c in cases]  # fmt: skip
    rows = time_steps(device, cases)
    meta["gpu_state_after"] = provenance.gpu_state()
    return write_records(rows, meta, out)


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

"""The NVFP4 kernel of :mod:`inkling_kernels.nvfp4` (both ops), read after that module's launch:
the kernel first, then its helpers in the order it calls them.

It follows :data:`inkling_kernels.reference.NVFP4_FORMULA` exactly. The activation is computed by
the shared ``_silu_mul`` (:mod:`inkling_kernels._activation`) and rounded to the activation dtype
in registers, exactly where the unfused path stores it, so the fused op agrees with
``nvfp4_quant(silu_and_mul(...))`` bit for bit. Rounding to e4m3 and e2m1 is done with integer and
compare operations, not with hardware conversions, so the GPU and the interpreter round
identically. The one exception: on compute capability 10.x-12.x (Blackwell) compiled launches
round to e2m1 with the hardware ``cvt.rn.satfinite.e2m1x2.f32`` (``HW_E2M1``), which gives the
software rounding's bytes on every input (``inkling_workbook.proofs.e2m1_proof``: all 2**32 fp32 inputs).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._activation import _silu_mul


@triton.jit(do_not_specialize=["M", "E", "total_scale_rows"])
def nvfp4_quant_kernel(
    x_ptr,  # ACT_NONE: x[M, N]; otherwise gateup[M, 2N] in the layout ACT names
    weight_ptr,  # [M] per-row weights (fused path only, HAS_WEIGHT)
    gs_ptr,  # [E] fp32 global scale per expert
    expert_off_ptr,  # [E+1] rows of expert e: expert_off[e] .. expert_off[e+1]
    scale_off_ptr,  # [E+1] scale rows of expert e start at scale_off[e] (== expert_off if linear)
    packed_ptr,  # [M, N/2] uint8 out
    scale_ptr,  # [total_scale_rows, SCALE_COLS] uint8 out (swizzled or linear)
    stride_x,  # row stride of x_ptr, in elements
    M,  # rows of x / packed: token rows outside [0, M) are never touched, whatever the offsets say
    E,
    total_scale_rows,
    N: tl.constexpr,
    SCALE_COLS: tl.constexpr,  # N/16, padded to a multiple of 4 when SWIZZLE
    ACT: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    SWIZZLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,  # elements of N per program, a multiple of 64
    SEARCH_STEPS: tl.constexpr,
    INT64: tl.constexpr,
    USE_PDL: tl.constexpr = False,  # wait on the grid dependency / signal dependents (sm_90+)
    HW_E2M1: tl.constexpr = False,  # e2m1 by cvt.rn.satfinite.e2m1x2.f32 (sm_100+), same bytes
):
    NB: tl.constexpr = BLOCK_K // 16  # scale blocks per program row
    K_TILES: tl.constexpr = (SCALE_COLS * 16 + BLOCK_K - 1) // BLOCK_K
    pid = tl.program_id(0)
    pid_m = pid // K_TILES
    pid_k = pid % K_TILES
    # Rows of the scale buffer this program owns (padding rows included) and their experts.
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < total_scale_rows
    if USE_PDL:
        # Programmatic dependent launch: wait for the previous kernel's writes (offsets, scales,
        # activations may all come from it) before the first global load.
        tl.extra.cuda.gdc_wait()
    e = _expert_of_rows(tl.where(r_ok, r, 0), scale_off_ptr, E, SEARCH_STEPS)
    local = r - tl.load(scale_off_ptr + e)
    row_start = tl.load(expert_off_ptr + e)
    valid = r_ok & (local < tl.load(expert_off_ptr + e + 1) - row_start)  # a real token row
    m = row_start + local
    # Offsets that were not validated (CUDA graphs, validate=False) cannot send a row out of bounds.
    valid = valid & (m >= 0) & (m < M)
    if INT64:
        m = m.to(tl.int64)
    gs = tl.load(gs_ptr + e)  # [BLOCK_M]
    # A scale block's 16 elements are held by one thread, as two [BLOCK_M, NB, 8] halves built
    # from the pointers (not by reshaping a 2-D tile): each half is 8 contiguous elements (one
    # 16-byte load), the block max needs no shuffle, and each scale is computed once per block,
    # by the one thread that owns it.
    kb = pid_k * NB + tl.arange(0, NB)  # scale column = block index along N
    row_off = m[:, None, None] * stride_x
    w = tl.zeros_like(gs)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + m, mask=valid, other=0.0, eviction_policy="evict_last").to(tl.float32)

    # 1. The activation, rounded to its storage dtype exactly as the unfused path stores it.
    lo = _activation_half(x_ptr, row_off, w, valid, kb, 0, N, ACT, HAS_WEIGHT, BLOCK_M, NB)
    hi = _activation_half(x_ptr, row_off, w, valid, kb, 1, N, ACT, HAS_WEIGHT, BLOCK_M, NB)

    # 2. One e4m3 scale per 16 elements (steps 1-5 of the formula).
    # |x| as integers: for non-negative floats the integer order is the float order, and every
    # NaN sorts above +inf, so one integer max gives amax and tells whether the block has a NaN.
    amax_bits = tl.maximum(
        tl.max(lo.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2),
        tl.max(hi.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2),
    )
    has_nan = amax_bits > 0x7F800000
    amax = amax_bits.to(tl.float32, bitcast=True)
    s = gs[:, None] * tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32))
    # An invalid global scale (NaN, +inf or negative: unchecked when the host checks do not run)
    # poisons its expert's blocks like a NaN block, so it cannot pass as plausible scales.
    gs_bad = (gs != gs) | (gs < 0.0) | (gs == float("inf"))
    s_nan = has_nan | (s != s) | gs_bad[:, None]
    s = tl.where(s_nan, 0.0, tl.minimum(tl.maximum(s, 0.0), 448.0))
    s8, sf = _e4m3_round(s)
    s8 = tl.where(s_nan, 0x7F, s8)
    sf_safe = tl.where(sf == 0.0, 1.0, sf)
    mult = tl.where(sf == 0.0, 0.0, tl.math.div_rn(gs[:, None] + tl.zeros_like(sf), sf_safe))

    # 3. Scale, round to e2m1, pack two codes a byte (element 2i in the low nibble): the low half
    # of a block makes its first 4 bytes, the high half the next 4.
    pcols = kb[None, :, None] * 8 + tl.arange(0, 4)[None, None, :]
    pmask = valid[:, None, None] & (pcols < N // 2)
    pout = packed_ptr + m[:, None, None] * (N // 2) + pcols
    tl.store(pout, _pack_half(lo, mult, s_nan, BLOCK_M, NB, HW_E2M1), mask=pmask)
    tl.store(pout + 4, _pack_half(hi, mult, s_nan, BLOCK_M, NB, HW_E2M1), mask=pmask)

    # 4. Scales: real blocks get s8; padding rows and columns get 0.
    k = kb
    s8 = tl.where(valid[:, None] & (k < N // 16)[None, :], s8, 0)
    r_s = r
    if INT64:
        r_s = r.to(tl.int64)
    if SWIZZLE:
        offs = (
            (r_s // 128)[:, None] * (SCALE_COLS * 128)
            + (k // 4)[None, :] * 512
            + (r_s % 32)[:, None] * 16
            + ((r_s % 128) // 32)[:, None] * 4
            + (k % 4)[None, :]
        )
    else:
        offs = r_s[:, None] * SCALE_COLS + k[None, :]
    # A swizzled 128-row block spans the whole block's bytes: the mask is the buffer's real extent
    # (the launcher refuses scale buffers of partial blocks; this keeps even a direct launch in bounds).
    extent = total_scale_rows * SCALE_COLS
    if INT64:
        extent = total_scale_rows.to(tl.int64) * SCALE_COLS
    in_buf = offs < extent
    tl.store(scale_ptr + offs, s8.to(tl.uint8), mask=r_ok[:, None] & (k < SCALE_COLS)[None, :] & in_buf)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _expert_of_rows(rows, offsets_ptr, E, SEARCH_STEPS: tl.constexpr):
    """For each row, the largest expert e in [0, E) with offsets[e] <= row (binary search);
    an empty expert shares its start with the next one, so the non-empty one wins."""
    lo = tl.zeros_like(rows)
    hi = tl.zeros_like(rows) + (E - 1)
    for _ in tl.static_range(SEARCH_STEPS):
        mid = (lo + hi + 1) // 2
        ok = tl.load(offsets_ptr + mid) <= rows
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    return lo


@triton.jit
def _activation_half(
    x_ptr, row_off, w, valid, kb, HALF: tl.constexpr, N: tl.constexpr, ACT: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, NB: tl.constexpr,
):  # fmt: skip
    """Elements ``8*HALF .. 8*HALF+7`` of every scale block ``kb`` of the rows at ``row_off``, as
    fp32 values of the stored activation: ``x`` itself (ACT 0), or silu(gate)*up [*w] computed by
    the shared helper and rounded to the activation dtype (ACT 1 interleaved, 2 gate || up)."""
    cols = kb[None, :, None] * 16 + HALF * 8 + tl.arange(0, 8)[None, None, :]  # [1, NB, 8]
    mask = valid[:, None, None] & (cols < N)
    if ACT == 0:
        x = tl.load(x_ptr + row_off + cols, mask=mask, other=0.0)
    else:
        if ACT == 1:
            cols2 = kb[None, :, None] * 32 + HALF * 16 + tl.arange(0, 16)[None, None, :]
            pairs = tl.load(x_ptr + row_off + cols2, mask=valid[:, None, None] & (cols2 < 2 * N), other=0.0)
            gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, NB, 8, 2)))
        else:
            gate = tl.load(x_ptr + row_off + cols, mask=mask, other=0.0)
            up = tl.load(x_ptr + row_off + N + cols, mask=mask, other=0.0)
        y = _silu_mul(gate, up)
        if HAS_WEIGHT:
            y = y * w[:, None, None]
        x = y.to(x_ptr.dtype.element_ty)
    return x.to(tl.float32)


@triton.jit
def _e4m3_round(s):
    """fp32 ``s`` in [0, 448] -> (e4m3 byte as int32, its exact fp32 value), ties to even.

    Keep 3 fractional bits for normal e4m3 values (drop 20 of fp32's 23 mantissa bits), and a
    fixed quantum of 2**-9 below 2**-6 (subnormals): drop ``141 - e`` bits there, where ``e`` is
    the biased fp32 exponent. The dropped bits are rounded half-to-even on the integer
    significand; a carry into the next binade falls out of the byte formula by itself.
    """
    bits = s.to(tl.int32, bitcast=True)
    e = bits >> 23  # biased exponent (s >= 0, so no sign bit)
    drop = tl.minimum(tl.maximum(141 - e, 20), 31)
    sig = (bits & 0x7FFFFF) | 0x800000
    half = (1 << (drop - 1)) - 1
    r = (sig + half + ((sig >> drop) & 1)) >> drop  # rounded significand, 0..16
    byte = (tl.maximum(e - 121, 0) << 3) + r
    # value = r * 2**(e - 23 + drop - 127): build the power of two from its exponent bits
    quantum = ((e - 23 + drop) << 23).to(tl.float32, bitcast=True)
    return byte, r.to(tl.float32) * quantum


@triton.jit
def _pack_half(xb, mult, s_nan, BLOCK_M: tl.constexpr, NB: tl.constexpr, HW_E2M1: tl.constexpr = False):
    """8 values of each block, scaled and rounded to e2m1, packed into 4 bytes (2i low nibble):
    by the hardware conversion (``HW_E2M1``) or in software (the same bytes)."""
    if HW_E2M1:
        even_t, odd_t = tl.split(tl.reshape(xb * mult[:, :, None], (BLOCK_M, NB, 4, 2)))
        packed = tl.where(s_nan[:, :, None], 0, _e2m1x2_hw(even_t, odd_t))  # a NaN block: bytes 0
        return packed.to(tl.uint8)
    q = _e2m1_code(xb * mult[:, :, None])
    q = tl.where(s_nan[:, :, None], 0, q)  # a NaN block stores codes +0 (its scale is NaN)
    even, odd = tl.split(tl.reshape(q, (BLOCK_M, NB, 4, 2)))
    return (even | (odd << 4)).to(tl.uint8)


@triton.jit
def _e2m1_code(t):
    """fp32 -> e2m1 code (int32 0..15), round to nearest even, saturating at 6, sign kept.

    On the bits of |t|: from 1.0 up, e2m1 keeps one mantissa bit, so round fp32's 23 to 1
    (add 2**21 - 1 plus the kept bit, shift by 22); the result minus 252 is the code
    (exponent - 126, then the mantissa bit), and anything past 6 (code 7) saturates.
    Below 1.0 the grid is {0, 0.5}: round 2|t| to an integer by adding 2**23, whose float add
    rounds to nearest even. NaN is mapped to +0 by the caller's scale rule (see the formula).
    """
    bits = t.to(tl.int32, bitcast=True)
    sign = (bits >> 28) & 8
    a_bits = bits & 0x7FFFFFFF
    normal = tl.minimum(((a_bits + 0x1FFFFF + ((a_bits >> 22) & 1)) >> 22) - 252, 7)
    small = ((a_bits.to(tl.float32, bitcast=True) * 2.0 + 8388608.0).to(tl.int32, bitcast=True)) - 0x4B000000
    return tl.where(a_bits >= 0x3F800000, normal, small) | sign


@triton.jit
def _e2m1x2_hw(even, odd):
    """``cvt.rn.satfinite.e2m1x2.f32`` (compute capability 10.x-12.x): one byte of two e2m1 codes.
    PTX packs operand ``a`` into the upper 4 bits, ``b`` into the lower, so ``a`` is the odd element
    (element 2i in the low nibble). Rounds as :func:`_e2m1_code` on every non-NaN input (proved
    over all fp32 inputs: ``inkling_workbook.proofs.e2m1_proof``); NaN blocks are zeroed by the caller."""
    return tl.inline_asm_elementwise(
        "{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, $2, $1; cvt.u32.u8 $0, t; }",
        "=r,r,r",
        [even, odd],
        dtype=tl.int32,
        is_pure=True,
        pack=1,
    )

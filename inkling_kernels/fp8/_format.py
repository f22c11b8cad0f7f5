"""The FP8 e4m3 format's jit helpers for :mod:`inkling_kernels.fp8`, in the order the tile
(:mod:`._kernel`) calls them: the bf16 rounding on the bits, the warp-wide group maximum, the group
scale and its reciprocal, the division by the scale, the rounding to e4m3 (hardware and integer).
Why each is exact is said where it is defined; the exhaustive GPU checks live in
``inkling_workbook.proofs.fp8_proofs``."""

from __future__ import annotations

import triton
import triton.language as tl

from .._activation import _rcp_approx


@triton.jit
def _bf16_round(x):
    """fp32 -> the fp32 value of its bf16 rounding (``x.to(bf16).to(fp32)``), two elements an
    instruction: ``cvt.rn.bf16x2.f32`` (the conversion the silu kernels store with), then each
    half widened on the bits (a shift, an and)."""
    return tl.inline_asm_elementwise(
        """
        {
        .reg .b32 p;
        cvt.rn.bf16x2.f32 p, $3, $2;
        shl.b32 $0, p, 16;
        and.b32 $1, p, 0xffff0000;
        }
        """,
        "=r,=r,f,f",
        [x],
        dtype=tl.uint32,
        is_pure=True,
        pack=2,
    ).to(tl.float32, bitcast=True)


@triton.jit
def _warp_group_max(y):
    """For a tensor laid out with four consecutive elements a thread and one whole group a warp
    (the decode programs: 128-element groups, one warp each): in every element, the bits of its
    group's maximum of ``|y|`` over the non-NaN elements (0 for a group of NaN only). A thread's
    four with ``max.f32`` (the non-NaN operand), then one ``redux.sync.max.u32`` across the warp:
    for non-negative floats the integer order of the bits is the float order."""
    return tl.inline_asm_elementwise(
        """
        {
        .reg .f32 a0, a1, a2, a3, m0, m1, m;
        .reg .b32 b;
        .reg .pred p;
        abs.f32 a0, $4;
        abs.f32 a1, $5;
        abs.f32 a2, $6;
        abs.f32 a3, $7;
        max.f32 m0, a0, a1;
        max.f32 m1, a2, a3;
        max.f32 m, m0, m1;
        mov.b32 b, m;
        setp.gt.u32 p, b, 0x7f800000;
        selp.b32 b, 0, b, p;
        redux.sync.max.u32 b, b, 0xffffffff;
        mov.b32 $0, b;
        mov.b32 $1, b;
        mov.b32 $2, b;
        mov.b32 $3, b;
        }
        """,
        "=r,=r,=r,=r,f,f,f,f",
        [y],
        dtype=tl.uint32,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _group_scale(amax, UE8M0: tl.constexpr, SPLIT_DIV: tl.constexpr, FAST_SCALE: tl.constexpr):
    """``(s, r, r_lo)`` for group maxima ``amax`` (floored at eps, capped at FLT_MAX), elementwise:
    the scale ``div_rn(amax, 448)`` (UE8M0: rounded up to a power of two), and what
    :func:`_div_by_scale` divides by (``SPLIT_DIV``: the split reciprocal; otherwise
    ``div_rn(1, s)``, exact for a power of two)."""
    if FAST_SCALE:
        s = _scale_fast(amax)
    else:
        s = tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32))
    if UE8M0:
        sb = _pow2_ceil_bits(s)
        s = sb.to(tl.float32, bitcast=True)
    if UE8M0 and FAST_SCALE:
        # the reciprocal of 2**k is 2**-k, exact: exponent fields sum to 254
        r = ((254 << 23) - sb).to(tl.float32, bitcast=True)
        r_lo = r
    elif SPLIT_DIV and not UE8M0 and FAST_SCALE:
        r, r_lo = _recip_split_fast(s)
    elif SPLIT_DIV and not UE8M0:
        r, r_lo = _recip_split(s)
    else:
        r = tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)
        r_lo = r
    return s, r, r_lo


# fp32 RN(1 / 448), the constant of ``_scale_fast`` (0x3B124925)
_INV_448 = tl.constexpr(0.002232142857142857)


@triton.jit
def _scale_fast(amax):
    """``div_rn(amax, 448)`` without the division's range check and slow path: the product with
    ``RN(1 / 448)``, corrected once by its exact fma residual. Equal bit for bit to the IEEE
    quotient for every fp32 ``amax`` in ``[eps, FLT_MAX]`` (all the kernel can meet, whatever the
    dtype): ``scale_paths_mismatches`` checks them all on the GPU."""
    q = amax * _INV_448
    return tl.fma(tl.fma(-q, 448.0, amax), _INV_448, q)


@triton.jit
def _pow2_ceil_bits(s):
    """The bits of ``2 ** ceil(log2(s))``, exactly, for a positive normal fp32 ``s`` (a group scale,
    >= 1e-10 / 448): the exponent, one up unless the mantissa is 0."""
    sb = s.to(tl.int32, bitcast=True)
    return ((sb >> 23) + ((sb & 0x7FFFFF) != 0).to(tl.int32)) << 23


@triton.jit
def _recip_split(s):
    """For a positive normal scale ``s`` (a group's): ``(r_hi, r_lo)``, ``r_hi`` the reciprocal
    rounded down (``div_rn(1, s)``, one ulp lower where that rounded up) and ``r_lo`` the fp32
    product of the exact residual ``1 - r_hi * s`` (an fma; it is exactly representable and
    non-negative) with ``r_hi``: together ``1 / s`` to about 2**-47 relative, with
    ``r_lo >= 0``, so ``y * r_hi`` and ``y * r_lo`` never have opposite infinite signs."""
    r = tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)
    up = tl.fma(-r, s, 1.0) < 0  # div_rn rounded up: step one ulp down (r is positive normal)
    r_hi = tl.where(up, (r.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True), r)
    return r_hi, tl.fma(-r_hi, s, 1.0) * r_hi


@triton.jit
def _recip_split_fast(s):
    """:func:`_recip_split`'s ``(r_hi, r_lo)`` from one MUFU.RCP instead of ``div_rn(1, s)``: on
    the H200 (sm_90) ``rcp.approx.ftz`` is always ``1 / s`` rounded down or up, never further, so
    the sign of the exact residual ``1 - r s`` says which (a step down where it is negative). The
    same bits as ``_recip_split`` for every scale ``_scale_fast`` can produce, by
    ``scale_paths_mismatches`` (a GPU whose MUFU.RCP strays further fails that check)."""
    ns = -s  # once, not an fadd before each residual
    r = _rcp_approx(s)
    up = tl.fma(r, ns, 1.0) < 0
    r_hi = tl.where(up, (r.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True), r)
    return r_hi, tl.fma(r_hi, ns, 1.0) * r_hi


@triton.jit
def _div_by_scale(y, s, r, r_lo, SPLIT_DIV: tl.constexpr):
    """``y / s`` for a group scale ``s``. ``SPLIT_DIV`` (compiled, 16-bit activations): the split
    reciprocal ``fma(y, r_hi, y * r_lo)`` with ``(r, r_lo)`` from :func:`_recip_split`, two
    instructions an element instead of a division; for bf16 and fp16 it gives the e4m3 byte of
    ``div_rn(y, s)`` on every pair the kernel can meet (|y| <= amax, amax from that dtype, +-Inf
    and NaN included; checked exhaustively on the GPU by ``division_mismatches``), though the fp32
    quotient itself can differ by an ulp in a few places. Otherwise (fp32 activations, the
    interpreter) the IEEE division ``div_rn``."""
    if SPLIT_DIV:
        return tl.fma(y, r, y * r_lo)
    return tl.math.div_rn(y, s + tl.zeros_like(y))


@triton.jit
def _e4m3_hw(t):
    """fp32 -> e4m3fn byte (uint8) with the hardware conversion (sm_89+):
    ``cvt.rn.satfinite.e4m3x2.f32`` rounds to nearest even, saturates +-Inf and everything beyond
    +-448 to +-448 and writes 0x7F for every NaN, as ``_e4m3_signed`` does (all 2**32 inputs:
    ``e4m3_paths_mismatches``, so no NaN select is needed). Four elements an
    instruction pair, packed straight into the 32-bit register a thread stores."""
    return tl.inline_asm_elementwise(
        """
        {
        .reg .b16 lo, hi;
        cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;
        cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;
        mov.b32 $0, {lo, hi};
        }
        """,
        "=r,f,f,f,f",
        [t],
        dtype=tl.uint8,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _e4m3_signed(t):
    """fp32 -> e4m3fn byte (int32 0..255): clamp to [-448, 448] (+-Inf included), round to
    nearest even, sign kept (-0 -> 0x80), any NaN -> 0x7F. No hardware conversion: the GPU and
    the interpreter execute the same integer and fp32 operations and round identically.

    On the bits of |t|, clamped by an integer ``min`` (so a NaN is never clamped into a number):
    from 2**-6 up, e4m3 keeps 3 of fp32's 23 mantissa bits, so drop 20 with round-half-to-even on
    the integer (a carry into the exponent is the next binade by itself) and rebias the exponent
    (127 -> 7: subtract 120 << 3). Below 2**-6 the grid is the multiples of 2**-9: ``|t| * 512``
    is exact, and adding 2**23 rounds it to an integer, half to even, in the fp32 add itself
    (the GPU contracts the two into one FMA, which rounds the same exact sum once: same bits).
    """
    bits = t.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    is_nan = mag > 0x7F800000
    mag = tl.minimum(mag, 0x43E00000)  # the bits of 448.0: +-Inf and everything above saturate
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    small = (mag.to(tl.float32, bitcast=True) * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
    byte = tl.where(mag < 0x3C800000, small, normal)  # 0x3C800000: 2**-6, the smallest normal
    return tl.where(is_nan, 0x7F, byte | sign)

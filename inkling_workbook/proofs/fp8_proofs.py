"""The exhaustive GPU checks behind the FP8 kernel's exactness claims, and the format tests'
helpers: each counts, over every input the kernel can meet, where a compiled fast path of
:mod:`inkling_kernels.fp8` differs from the plain one (0 is the claim), with a ``_perturb`` switch
so a test can see each counter count. They run the library's own jit helpers
(``inkling_kernels.fp8._format``, ``_silu_mul``), so they prove what the kernel executes.

* :func:`e4m3_paths_mismatches`: hardware e4m3 conversion against the integer rounding, all 2**32 fp32.
* :func:`sigmoid_paths_mismatches`: the compiled sigmoid forms against ``tl.sigmoid``, all 2**32 fp32.
* :func:`scale_paths_mismatches`: the decode launches' fast scale and reciprocal against ``div_rn``.
* :func:`division_mismatches`: the split-reciprocal division against ``div_rn``, every 16-bit pair.
* :func:`e4m3_signed_encode`: the integer rounding on any fp32 tensor (CPU or GPU).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._activation import _silu_mul
from inkling_kernels._validate import check_tensor
from inkling_kernels.fp8._format import (
    _div_by_scale,
    _e4m3_hw,
    _e4m3_signed,
    _pow2_ceil_bits,
    _recip_split,
    _recip_split_fast,
    _scale_fast,
)
from inkling_kernels.fp8._launch import _hw_e4m3
from inkling_kernels.reference import FP8_EPS

#: ``division_mismatches``' methods: the Markstein correction (the kernel's division before the
#: split reciprocal; kept here for comparison) and the split reciprocal the kernel runs
DIV_MARKSTEIN, DIV_SPLIT = 1, 2
#: the sigmoid level compiled launches take on sm_90 (``_kernel_flags``' ``FTZ_EXP``)
SIGMOID_FAST = 2


@triton.jit
def _div_markstein(y, s, r):
    """``y / s`` as the product ``q = y * r`` with ``r = div_rn(1, s)``, corrected once by the exact
    fma residual (``q + (y - q s) r``, kept as ``q`` where the residual is 0 or NaN): five
    instructions an element, the kernel's 16-bit division before the split reciprocal."""
    q = y * r
    rem = tl.fma(-q, s, y)
    return tl.where(tl.abs(rem) > 0, tl.fma(rem, r, q), q)


@triton.jit
def e4m3_signed_encode_kernel(t_ptr, byte_ptr, n, BLOCK: tl.constexpr):
    """Exposes ``_e4m3_signed`` for the format tests (exhaustive sweeps against torch)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    t = tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(byte_ptr + offs, _e4m3_signed(t).to(tl.uint8), mask=mask)


@triton.jit
def _e4m3_paths_kernel(start, count_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr, PERTURB: tl.constexpr):
    """Counts the fp32 bit patterns ``start + [0, BLOCK * ITERS * programs)`` (as uint32, wrapping
    past 2**32) on which ``_e4m3_hw`` and ``_e4m3_signed`` disagree. No memory is read: the
    inputs are the indices themselves. ``PERTURB`` flips the hardware byte of 1.0 (0x3F800000),
    so a test can see the counter count."""
    base = start + tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    bad = tl.zeros((BLOCK,), tl.int32)
    for i in range(ITERS):
        bits = ((base + i * BLOCK + tl.arange(0, BLOCK)) & 0xFFFFFFFF).to(tl.uint32)
        t = bits.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)
        hw = _e4m3_hw(t).to(tl.int32)
        if PERTURB:
            hw = tl.where(bits == 0x3F800000, hw ^ 1, hw)
        bad += (hw != _e4m3_signed(t)).to(tl.int32)
    tl.atomic_add(count_ptr, tl.sum(bad, axis=0))


@triton.jit
def _sigmoid_paths_kernel(
    start, count_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr, PERTURB: tl.constexpr, LEVEL: tl.constexpr
):
    """Counts the fp32 bit patterns ``g`` of ``start + [0, BLOCK * ITERS * programs)`` on which
    ``_silu_mul(g, 1.0)`` with ``FTZ_EXP = LEVEL`` and with 0 differ in any bit (NaNs included):
    ``g * sigmoid(g)``, all of the silu that depends on the sigmoid's form. No memory is read.
    ``PERTURB`` flips a bit of the fast result at g = 1.0."""
    base = start + tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    bad = tl.zeros((BLOCK,), tl.int32)
    one = tl.full((BLOCK,), 1.0, tl.float32)
    for i in range(ITERS):
        bits = ((base + i * BLOCK + tl.arange(0, BLOCK)) & 0xFFFFFFFF).to(tl.uint32)
        g = bits.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)
        ref = _silu_mul(g, one).to(tl.int32, bitcast=True)
        fast = _silu_mul(g, one, LEVEL).to(tl.int32, bitcast=True)
        if PERTURB:
            fast = tl.where(bits == 0x3F800000, fast ^ 1, fast)
        bad += (fast != ref).to(tl.int32)
    tl.atomic_add(count_ptr, tl.sum(bad, axis=0))


@triton.jit
def _scale_paths_kernel(start, count_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr, PERTURB: tl.constexpr):
    """Over the fp32 bit patterns ``start + [0, BLOCK * ITERS * programs)`` taken as a group
    maximum ``amax``, those in the kernel's domain ``[eps, FLT_MAX]`` only, counts where the
    ``FAST_SCALE`` path differs from the ``div_rn`` path: ``count_ptr[0]`` the scale
    (``_scale_fast`` against ``div_rn(amax, 448)``), ``[1]`` the split reciprocal of that scale
    (``_recip_split_fast`` against ``_recip_split``, either half), ``[2]`` UE8M0's reciprocal of
    ``2 ** ceil(log2(s))`` on the exponent bits against ``div_rn(1, s)``. No memory is read.
    ``PERTURB`` moves the fast scale at amax = 1.0 one float up."""
    base = start + tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    bad_s = tl.zeros((BLOCK,), tl.int32)
    bad_r = tl.zeros((BLOCK,), tl.int32)
    bad_u = tl.zeros((BLOCK,), tl.int32)
    one = tl.full((BLOCK,), 1.0, tl.float32)
    for i in range(ITERS):
        bits = ((base + i * BLOCK + tl.arange(0, BLOCK)) & 0xFFFFFFFF).to(tl.uint32)
        amax = bits.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)
        ok = (amax >= 1e-10) & (amax <= 3.4028234663852886e38)
        ref = tl.math.div_rn(amax, one * 448.0)
        fast = _scale_fast(amax)
        if PERTURB:
            fast = tl.where(bits == 0x3F800000, fast * 1.0000001, fast)  # one float up
        bad_s += (ok & (fast.to(tl.int32, bitcast=True) != ref.to(tl.int32, bitcast=True))).to(tl.int32)
        r_ref, lo_ref = _recip_split(ref)
        r_new, lo_new = _recip_split_fast(ref)
        miss = (r_new.to(tl.int32, bitcast=True) != r_ref.to(tl.int32, bitcast=True)) | (
            lo_new.to(tl.int32, bitcast=True) != lo_ref.to(tl.int32, bitcast=True)
        )
        bad_r += (ok & miss).to(tl.int32)
        sb = _pow2_ceil_bits(ref)
        u_ref = tl.math.div_rn(one, sb.to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True)
        bad_u += (ok & (((254 << 23) - sb) != u_ref)).to(tl.int32)
    tl.atomic_add(count_ptr, tl.sum(bad_s, axis=0))
    tl.atomic_add(count_ptr + 1, tl.sum(bad_r, axis=0))
    tl.atomic_add(count_ptr + 2, tl.sum(bad_u, axis=0))


@triton.jit
def _division_paths_kernel(
    y_ptr, amax_ptr, count_ptr, n_y, DIV: tl.constexpr, BLOCK: tl.constexpr, PERTURB: tl.constexpr
):
    """For one group maximum ``amax`` a program (``amax_ptr[program]``, already floored at eps)
    and every activation value ``y`` of the table ``y_ptr[0:n_y]`` that a group with that maximum
    can hold (``|y| <= amax``, any NaN, and +-Inf when amax is the largest finite float), counts
    the pairs where the ``DIV`` method (``DIV_SPLIT``: the kernel's ``_div_by_scale``;
    ``DIV_MARKSTEIN``: :func:`_div_markstein`) and the IEEE division ``div_rn`` give different
    e4m3 bytes (``count_ptr[0]``), different fp32 quotients where the IEEE quotient is at least
    2**-10 in magnitude (``count_ptr[1]``: the quotients that can give a nonzero byte) and where
    it is smaller (``count_ptr[2]``: with a tiny y the fma residual underflows, so the corrected
    quotient can miss by an ulp; every such quotient rounds to a signed zero). ``PERTURB``
    corrupts the quotient 112 of 1.0 by the scale of amax = 4.0 (to 140, another byte) so a test
    can see the counters count."""
    amax = tl.load(amax_ptr + tl.program_id(0))
    s = tl.math.div_rn(amax, 448.0)
    if DIV == 2:
        r, r_lo = _recip_split(s)
    else:
        r = tl.math.div_rn(1.0, s)
        r_lo = 0.0
    bad_byte = tl.zeros((BLOCK,), tl.int32)
    bad_bits = tl.zeros((BLOCK,), tl.int32)
    bad_tiny = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, n_y, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.load(y_ptr + offs, mask=offs < n_y, other=0.0)
        mag = tl.abs(y)
        meets = (mag <= amax) | (y != y) | ((mag == float("inf")) & (amax == 3.4028234663852886e38))
        meets = meets & (offs < n_y)
        sb = tl.full((BLOCK,), 0.0, tl.float32) + s
        ref = tl.math.div_rn(y, sb)
        zero = tl.full((BLOCK,), 0.0, tl.float32)
        if DIV == 2:
            fast = _div_by_scale(y, sb, zero + r, zero + r_lo, True)
        else:
            fast = _div_markstein(y, sb, zero + r)
        if PERTURB:
            fast = tl.where((y == 1.0) & (amax == 4.0), fast * 1.25, fast)
        bad_byte += (meets & (_e4m3_signed(fast) != _e4m3_signed(ref))).to(tl.int32)
        differ = meets & (y == y) & (fast.to(tl.int32, bitcast=True) != ref.to(tl.int32, bitcast=True))
        normal = tl.abs(ref) >= 0.0009765625  # 2**-10: below it every quotient's byte is a signed zero
        bad_bits += (differ & normal).to(tl.int32)
        bad_tiny += (differ & ~normal).to(tl.int32)
    tl.atomic_add(count_ptr, tl.sum(bad_byte, axis=0))
    tl.atomic_add(count_ptr + 1, tl.sum(bad_bits, axis=0))
    tl.atomic_add(count_ptr + 2, tl.sum(bad_tiny, axis=0))


def _check_sm89(device) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda" or not _hw_e4m3(device):
        raise ValueError(f"device must be a CUDA GPU of compute capability >= 8.9, got {device}")
    return device


def _count_fp32_patterns(kernel, start: int, count: int, device, perturb: bool, counters: int = 1, **consts):
    """Run a counting kernel (``_e4m3_paths_kernel``, ``_sigmoid_paths_kernel``,
    ``_scale_paths_kernel``) over the fp32 bit patterns ``[start, start + count)``, a chunk of
    2**30 a launch, and return its count (a tuple of ``counters`` counts when more than one)."""
    device = _check_sm89(device)
    block, iters = 1024, 64
    per_program = block * iters
    if start % per_program or count % per_program:
        raise ValueError(f"start and count must be multiples of {per_program}")
    total = torch.zeros(counters, dtype=torch.int32, device=device)
    chunk = 2**30
    for lo in range(start, start + count, chunk):
        n = min(chunk, start + count - lo)
        kernel[(n // per_program,)](
            lo, total, BLOCK=block, ITERS=iters, PERTURB=perturb, **consts, **_backend.COMPILE_OPTIONS
        )
    return int(total.item()) if counters == 1 else tuple(total.tolist())


def e4m3_paths_mismatches(start: int = 0, count: int = 2**32, device="cuda", _perturb: bool = False) -> int:
    """How many fp32 bit patterns in ``[start, start + count)`` the hardware conversion and the
    integer rounding map to different e4m3 bytes (0 is the claim; the default covers all 2**32).
    Needs an sm_89+ GPU. ``_perturb`` (tests only) corrupts the hardware byte of 1.0."""
    return _count_fp32_patterns(_e4m3_paths_kernel, start, count, device, _perturb)


def sigmoid_paths_mismatches(
    start: int = 0, count: int = 2**32, device="cuda", _perturb: bool = False, level: int | None = None
) -> int:
    """How many fp32 inputs in ``[start, start + count)`` give a silu (``g * sigmoid(g)``) with
    other bits when the sigmoid takes the fused FP8 kernel's compiled form (``FTZ_EXP = level``,
    by default ``SIGMOID_FAST``, the one launched) than with ``tl.sigmoid`` (every other kernel,
    helion's included). 0 is the claim; the default covers all 2**32. Needs a CUDA GPU (sm_89+,
    like the kernel that uses it). ``_perturb`` (tests only) flips a bit of the result at g = 1.0."""
    level = SIGMOID_FAST if level is None else level
    if level not in (1, 2):
        raise ValueError(f"level must be 1 or 2, got {level!r}")
    return _count_fp32_patterns(_sigmoid_paths_kernel, start, count, device, _perturb, LEVEL=level)


def scale_paths_mismatches(device="cuda", _perturb: bool = False) -> tuple[int, int, int]:
    """The ``FAST_SCALE`` path (decode launches) against the ``div_rn`` path for every group maximum
    the kernel can meet: each fp32 ``amax`` in ``[eps, FLT_MAX]`` (about 1.34e9 values; the kernel
    floors at eps and caps +-Inf at FLT_MAX, whatever the activation dtype). Returns the counts of
    maxima where (1) the scale differs from ``div_rn(amax, 448)``, (2) the split reciprocal of that
    scale differs from ``_recip_split``'s (either half) and (3) UE8M0's reciprocal on the exponent
    bits differs from ``div_rn(1, s)``. The claim is (0, 0, 0). Needs an sm_89+ GPU. ``_perturb``
    (tests only) moves the fast scale at amax = 1.0 one float up."""
    return _count_fp32_patterns(_scale_paths_kernel, 0, 2**31, device, _perturb, counters=3)


def division_mismatches(
    dtype: torch.dtype = torch.bfloat16, method: int | None = None, device="cuda", _perturb: bool = False
) -> tuple[int, int, int]:
    """Exhaustive check of the division by the group scale (``method``: ``DIV_SPLIT``, the default
    and the kernel's ``_div_by_scale``, or ``DIV_MARKSTEIN``, the correction it replaced) against
    the IEEE division for a 16-bit activation dtype:
    every group maximum the kernel can meet (each positive finite value of ``dtype`` from eps up,
    eps itself, and the largest finite fp32 that +-Inf caps to) against every one of the 65536
    values of ``dtype`` such a group can hold. Returns the pairs whose e4m3 bytes differ, whose
    fp32 quotients differ where the IEEE quotient is at least 2**-10 in magnitude (or infinite),
    and (NaN aside) whose quotients differ below that. The claim for the kernel is a first count
    of 0: the e4m3 byte is all the kernel keeps. The other two say how close the fp32 quotients
    come (Markstein: 0 above 2**-10; with a tiny y the fma residual underflows and the quotient
    can miss by an ulp, but every quotient below 2**-10 rounds to a signed zero). Needs an sm_89+
    GPU."""
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    method = DIV_SPLIT if method is None else method
    if isinstance(method, bool) or method not in (DIV_MARKSTEIN, DIV_SPLIT):
        raise ValueError(f"method must be DIV_MARKSTEIN ({DIV_MARKSTEIN}) or DIV_SPLIT ({DIV_SPLIT}), got {method!r}")
    device = _check_sm89(device)
    ys = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    pos = ys[(ys > 0) & torch.isfinite(ys)]
    amaxes = torch.cat([pos[pos >= FP8_EPS], torch.tensor([FP8_EPS, torch.finfo(torch.float32).max])])
    ys, amaxes = ys.to(device), amaxes.to(device)
    count = torch.zeros(3, dtype=torch.int32, device=device)
    _division_paths_kernel[(amaxes.numel(),)](
        ys, amaxes, count, ys.numel(), DIV=method, BLOCK=1024, PERTURB=_perturb, **_backend.COMPILE_OPTIONS
    )
    byte, bits, tiny = count.tolist()
    return byte, bits, tiny


def e4m3_signed_encode(t: torch.Tensor) -> torch.Tensor:
    """The kernel's fp32 -> e4m3fn rounding (clamp, RNE, NaN -> 0x7F) on any fp32 tensor, as uint8."""
    check_tensor("t", t, dtypes=(torch.float32,))
    flat = t.contiguous().reshape(-1)
    byte = torch.empty(flat.shape, dtype=torch.uint8, device=t.device)
    if flat.numel():
        block = 4096
        _backend.launch(
            e4m3_signed_encode_kernel,
            (triton.cdiv(flat.numel(), block),),
            t.device,
            flat,
            byte,
            flat.numel(),
            BLOCK=block,
        )
    return byte.reshape(t.shape)

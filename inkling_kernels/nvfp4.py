"""NVFP4 quantization for packed MoE experts, and the fused SiLU-and-mul + NVFP4 kernel.

After the first grouped GEMM of an NVFP4 MoE, the activation ``silu(gate) * up`` is quantized
to NVFP4 for the second GEMM. Unfused, that is two kernels and an intermediate tensor:
``silu_and_mul`` writes ``[M, N]`` bf16 (2N bytes a row), which ``nvfp4_quant`` reads back.
The fused kernel reads ``gateup`` once and writes only the packed FP4 (N/2 bytes a row) and the
scales (N/16 bytes a row): per row 4N + 0.5625N bytes instead of 4N + 2N + 2N + 0.5625N.

Both kernels follow :data:`inkling_kernels.reference.NVFP4_FORMULA` exactly. The fused one
computes silu*mul with the same helper as :mod:`inkling_kernels.silu_and_mul` and rounds it to
the activation dtype in registers, exactly where the unfused path stores it, so the two paths
agree bit for bit. Rounding to e4m3 and e2m1 is done with integer and compare operations, not
with hardware conversions, so the GPU and the interpreter round identically. The one exception:
on compute capability 10.x-12.x (Blackwell) compiled launches round to e2m1 with the hardware
``cvt.rn.satfinite.e2m1x2.f32`` (``HW_E2M1``), which gives the software rounding's bytes on every
input (``inkling_workbook.proofs.e2m1_proof``: all 2**32 fp32 inputs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _backend
from ._nvfp4_checks import _check_fused_args, _check_global_scale, _check_values
from ._validate import (
    FLOAT_DTYPES,
    check_no_grad,
    check_no_overlaps,
    check_offsets,
    check_row_major,
    check_tensor,
)
from .reference import NVFP4_BLOCK
from .silu_and_mul import INT32_LIMIT, _silu_mul

ACT_NONE, ACT_INTERLEAVED, ACT_NON_INTERLEAVED = 0, 1, 2


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


def _quant_config(N: int, interpreted: bool, fused: bool = True) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_K, num_warps). On the GPU: BLOCK_K the widest of 1024..64 dividing N, 4 warps;
    the fused kernel takes 4096 elements a program, the plain quant kernel, which does less work
    an element, at least 8 rows (8x1024 at N = 3072, 8x512 at N = 1536): the best tiles of each
    kernel in the H200 sweep (data/superseded/tune_round4_h200.csv, data/tuning_log.md). In the interpreter
    each Triton op costs the same Python overhead whatever the tile, so tiles are 16x larger
    there. Tiles never change a bit of the result: every row finds its own expert, and masks
    cover any tail."""
    block_k = next((b for b in (1024, 512, 256, 128, 64) if N % b == 0), 64)
    block_m = max(1, min(128, 4096 // block_k)) if fused else min(128, max(8, 4096 // block_k))
    if interpreted:
        block_k = (
            min(triton.next_power_of_2(N), 2048)
            if N % 64
            else next(b for b in (2048, 1024, 512, 256, 128, 64) if N % b == 0)
        )
        block_m = max(16, 65536 // block_k)
    return block_m, block_k, 4


def _check_config(config) -> None:
    """``config``: ``(BLOCK_M, BLOCK_K, num_warps)``, powers of two, ``BLOCK_K >= 64``."""
    ok = isinstance(config, tuple) and len(config) == 3
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0 for v in config)
    if not ok or config[1] < 64 or config[2] > 32:
        raise ValueError(
            f"config must be a (BLOCK_M, BLOCK_K, num_warps) tuple of powers of two, BLOCK_K >= 64 and "
            f"num_warps <= 32, got {config!r}"
        )


def _check_swizzled_rows(name: str, rows: int, M: int) -> None:
    """Swizzled scales are written in whole 128-row blocks (one block's rows interleave over all
    its bytes), so a buffer of a partial block would be overrun: refuse it, and refuse fewer rows
    than any token row needs (M > 0 needs at least one block)."""
    if rows % 128 or (M > 0 and rows < 128):
        raise ValueError(
            f"{name} must be a multiple of 128 (whole swizzled 128-row blocks), at least 128 when M > 0; "
            f"got {rows} (max_blockscale_rows(M, E) gives a bound for any expert split)"
        )


def max_blockscale_rows(M: int, E: int = 1) -> int:
    """A static upper bound on the swizzled scale rows of ``M`` token rows split over ``E``
    experts, valid for any split: ``floor((M + 127 * E) / 128) * 128``.

    Each expert's scale rows are its token count rounded up to 128, so the total
    ``sum_e round_up(c_e, 128)`` is at most ``sum_e (c_e + 127) = M + 127 E`` and a multiple of
    128, hence at most the largest multiple of 128 not above ``M + 127 E`` (reached when M >= E:
    E - 1 experts of one row and one with the rest). It depends on shapes only: the scales of the
    registered ops (and of a functional call in capture or with ``validate=False``) have this many
    rows, and a CUDA graph captured for ``M`` rows can be replayed with any expert split. Rows
    past ``blockscale_offsets[-1]`` are zero padding."""
    for name, v in (("M", M), ("E", E)):
        if isinstance(v, bool) or not isinstance(v, (int, torch.SymInt)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if M < 0 or E < 1:
        raise ValueError(f"need M >= 0 and E >= 1, got M={M}, E={E}")
    return (M + 127 * E) // 128 * 128


def default_blockscale_offsets(expert_offsets: torch.Tensor) -> torch.Tensor:
    """``[0, cumsum(round_up(counts, 128))]`` (int64), computed on ``expert_offsets``' device
    with no host synchronization (capturable in a CUDA graph). ``expert_offsets`` must be
    non-decreasing: CPU tensors are checked (a ValueError); on CUDA a decrease is not read back
    and counts as an empty expert (the ops' value checks refuse such offsets)."""
    check_tensor("expert_offsets", expert_offsets, ndim=1, dtypes=(torch.int32, torch.int64))
    if expert_offsets.numel() < 1:
        raise ValueError("expert_offsets must have E+1 >= 1 entries, got 0")
    counts = expert_offsets[1:] - expert_offsets[:-1]
    if expert_offsets.device.type == "cpu" and bool((counts < 0).any()):
        raise ValueError(f"expert_offsets must be non-decreasing, got {expert_offsets.tolist()[:16]}")
    counts = counts.clamp_min(0)
    out = torch.zeros(expert_offsets.shape[0], dtype=torch.int64, device=expert_offsets.device)
    torch.cumsum((counts + 127) // 128 * 128, 0, out=out[1:])
    return out


def _check_static(
    src_name, src, N, global_scale, expert_offsets, blockscale_offsets, topk_weights, swizzle, out, validate,
    scale_rows, memory: bool = True,
):  # fmt: skip
    """Every check of :func:`_launch_quant` that reads no tensor's values (the fake implementations
    and ``torch.compile`` run them on fake tensors; ``memory=False`` leaves out the overlap checks,
    which read addresses). Returns ``(expert_offsets, E, global_scale [E], blockscale_offsets or
    None, scale columns, packed, scales, scale rows)``: the outputs and their rows only with ``out``,
    the rows ``scale_rows`` otherwise."""
    device = src.device
    M = src.shape[0]
    if not isinstance(swizzle, bool):
        raise TypeError(f"swizzle must be a bool, got {type(swizzle).__name__}")
    if expert_offsets is None:
        # [0, M] built on the device (a kernel, not a host-to-device copy: capturable)
        expert_offsets = torch.arange(2, dtype=torch.int64, device=device) * M
    expert_offsets = check_offsets("expert_offsets", expert_offsets, device)
    E = expert_offsets.numel() - 1
    gs = _check_global_scale(global_scale, E, device)
    if swizzle and blockscale_offsets is not None:
        blockscale_offsets = check_offsets("blockscale_offsets", blockscale_offsets, device)
        if blockscale_offsets.numel() != E + 1:
            raise ValueError(
                f"blockscale_offsets must have E+1={E + 1} entries like expert_offsets, "
                f"got {blockscale_offsets.numel()}"
            )
    elif blockscale_offsets is not None:
        raise ValueError("blockscale_offsets applies to swizzled scales only (swizzle=False was given)")
    if validate is not None and not isinstance(validate, bool):
        raise TypeError(f"validate must be a bool or None, got {type(validate).__name__}")
    scale_cols = (N // NVFP4_BLOCK + 3) // 4 * 4 if swizzle else N // NVFP4_BLOCK
    packed = scales = None
    if out is not None:
        if scale_rows is not None:
            raise ValueError("scale_rows applies to calls without out (the scales in out have their own rows)")
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError("out must be a (packed, scales) pair of uint8 tensors")
        packed, scales = out
        check_tensor("out[0]", packed)
        check_tensor("out[1]", scales)
        total_rows = scales.shape[0] if scales.dim() == 2 else -1
        if packed.shape != (M, N // 2) or packed.dtype != torch.uint8 or packed.device != device:
            raise ValueError(f"out[0] must be a uint8 tensor of shape ({M}, {N // 2}) on {device}")
        if scales.dim() != 2 or scales.shape[1] != scale_cols or scales.dtype != torch.uint8 or scales.device != device:
            raise ValueError(f"out[1] must be a uint8 tensor of shape (rows, {scale_cols}) on {device}")
        if not swizzle and total_rows != M:
            raise ValueError(f"out[1] must have M={M} rows for linear scales, got {total_rows}")
        if swizzle:
            _check_swizzled_rows("out[1]'s rows", total_rows, M)
        if not (packed.is_contiguous() and scales.is_contiguous()):
            raise ValueError("out tensors must be contiguous")
        if memory:
            check_no_overlaps(
                (("out[0]", packed), ("out[1]", scales)),
                ((src_name, src), ("topk_weights", topk_weights), ("global_scale", gs),
                 ("expert_offsets", expert_offsets), ("blockscale_offsets", blockscale_offsets)),
            )  # fmt: skip
    else:
        if scale_rows is not None:
            if isinstance(scale_rows, bool) or not isinstance(scale_rows, (int, torch.SymInt)):
                raise TypeError(f"scale_rows must be an int or None, got {type(scale_rows).__name__}")
            if not swizzle and scale_rows != M:
                raise ValueError(f"scale_rows must be M={M} for linear scales, got {scale_rows}")
            if swizzle:
                _check_swizzled_rows("scale_rows", scale_rows, M)
                bound = max_blockscale_rows(M, E)
                if scale_rows > bound:
                    raise ValueError(
                        f"scale_rows={scale_rows} is more than any split of M={M} rows over E={E} experts needs "
                        f"(max_blockscale_rows = {bound}); pass out= for a larger layout"
                    )
        total_rows = scale_rows
    outs = {"out[0]": out[0], "out[1]": out[1]} if out is not None else {}
    check_no_grad(**{src_name: src}, topk_weights=topk_weights, global_scale=global_scale, **outs)
    return expert_offsets, E, gs, blockscale_offsets, scale_cols, packed, scales, total_rows


def _launch_quant(
    src_name: str,
    src: torch.Tensor,
    act: int,
    N: int,
    global_scale,
    expert_offsets,
    blockscale_offsets,
    topk_weights,
    swizzle: bool,
    out,
    validate,
    config: tuple[int, int, int] | None = None,
    scale_rows: int | None = None,
    enable_pdl: bool | None = None,
):
    device = src.device
    M = src.shape[0]
    expert_offsets, E, gs, blockscale_offsets, scale_cols, packed, scales, total_rows = _check_static(
        src_name, src, N, global_scale, expert_offsets, blockscale_offsets, topk_weights, swizzle, out, validate,
        scale_rows,
    )  # fmt: skip
    if swizzle and blockscale_offsets is None:
        blockscale_offsets = default_blockscale_offsets(expert_offsets)
    scale_offsets = blockscale_offsets if swizzle else expert_offsets
    # Value checks read device tensors on the host: by default only when no output was given and
    # the stream is not capturing (on the CPU, where a read costs no synchronization, with out
    # too); validate=True asks for them with out on CUDA too (not in capture).
    interpreted = _backend.uses_interpreter(device)
    capturing = not interpreted and torch.cuda.is_current_stream_capturing()
    if validate is True and capturing:
        raise ValueError("validate=True reads offsets on the host, which CUDA graph capture forbids: use None")
    checked_rows = None
    if validate is True or (validate is None and (out is None or interpreted) and not capturing):
        bound = max_blockscale_rows(M, E) if out is None else None
        checked_rows = _check_values(gs, expert_offsets, blockscale_offsets, M, swizzle, total_rows, bound)
    if out is None:
        if total_rows is None:
            # exact rows when the checks read the offsets anyway; else the static bound
            if not swizzle:
                total_rows = M
            elif checked_rows is not None:
                total_rows = checked_rows
            else:
                total_rows = max_blockscale_rows(M, E)
        packed = torch.empty((M, N // 2), dtype=torch.uint8, device=device)
        scales = torch.empty((total_rows, scale_cols), dtype=torch.uint8, device=device)
    if total_rows == 0:
        return packed, scales
    if config is not None:
        _check_config(config)
    else:
        ckey = (N, interpreted, act != ACT_NONE)
        config = _QUANT_CONFIGS.get(ckey)
        if config is None:
            config = _QUANT_CONFIGS[ckey] = _quant_config(N, interpreted, fused=act != ACT_NONE)
    block_m, block_k, warps = config
    grid0 = triton.cdiv(total_rows, block_m) * triton.cdiv(scale_cols * 16, block_k)
    stride_x = src.stride(0)
    int64 = max(M * max(stride_x, 1), total_rows * scale_cols) >= INT32_LIMIT
    # the kernel reads the weights at unit stride: a strided view (a slice) is copied first
    weight = topk_weights.contiguous() if topk_weights is not None else gs
    has_weight = topk_weights is not None
    steps = max(1, (E - 1).bit_length())
    if not interpreted:
        pdl = _backend.resolve_pdl(enable_pdl, device)
        hw = _hw_e2m1(device)
        spec = _backend.arg_spec
        key = (
            device.index, pdl, hw, warps, N, scale_cols, act, has_weight, swizzle, block_m, block_k, steps, int64,
            spec(src), spec(weight), spec(gs), spec(expert_offsets), spec(scale_offsets), spec(packed),
            spec(scales), spec(stride_x), spec(M, False), spec(E, False), spec(total_rows, False),
        )  # fmt: skip
        args = (
            src, weight, gs, expert_offsets, scale_offsets, packed, scales, stride_x, M, E, total_rows,
            N, scale_cols, act, has_weight, swizzle, block_m, block_k, steps, int64, pdl, hw,
        )  # fmt: skip
        _LAUNCHER(key, grid0, device.index, args, warps, pdl)
        return packed, scales
    _backend.resolve_pdl(enable_pdl, device)  # type check only: never on under the interpreter
    _backend.launch(
        nvfp4_quant_kernel, (grid0,), device, src, weight, gs, expert_offsets, scale_offsets, packed, scales,
        stride_x, M, E, total_rows, N=N, SCALE_COLS=scale_cols, ACT=act, HAS_WEIGHT=has_weight, SWIZZLE=swizzle,
        BLOCK_M=block_m, BLOCK_K=block_k, SEARCH_STEPS=steps, INT64=int64, USE_PDL=False, HW_E2M1=False,
        num_warps=warps,
    )  # fmt: skip
    return packed, scales


_QUANT_CONFIGS: dict[tuple[int, bool, bool], tuple[int, int, int]] = {}

_LAUNCHER = _backend.CudaLauncher(nvfp4_quant_kernel, _backend.kernel_constexprs(nvfp4_quant_kernel))

#: compute capability majors whose PTX target (sm_100a, 103a, 110a, 120a, 121a) has
#: ``cvt.rn.satfinite.e2m1x2.f32``; ptxas refuses it for sm_90a
HW_E2M1_MAJORS = (10, 11, 12)


def _hw_e2m1(device: torch.device) -> bool:
    """Whether compiled launches on ``device`` round to e2m1 with the hardware conversion."""
    return _backend.capability(_backend.cuda_index(device))[0] in HW_E2M1_MAJORS


def nvfp4_quant(
    x: torch.Tensor,
    global_scale: torch.Tensor,
    *,
    expert_offsets: torch.Tensor | None = None,
    blockscale_offsets: torch.Tensor | None = None,
    swizzle: bool = True,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    validate: bool | None = None,
    config: tuple[int, int, int] | None = None,
    scale_rows: int | None = None,
    enable_pdl: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x[M, N]`` to NVFP4, each expert's rows with its own global scale.

    Args:
        x: ``[M, N]`` bf16 or fp16 (fp32 accepted too), N a multiple of 16; rows may be strided.
        global_scale: fp32 ``[E]`` (``[1]`` or a 0-d tensor without experts), conventionally
            ``448 * 6 / amax`` of the expert's activations; finite and >= 0 (checked with the value
            checks; where they do not run, an invalid one gives its expert NaN scales and codes +0).
        expert_offsets: int32/int64 ``[E+1]``, rows of expert e are
            ``expert_offsets[e]:expert_offsets[e+1]`` (non-decreasing, 0 to M). Default ``[0, M]``
            (built on the device).
        blockscale_offsets: int32/int64 ``[E+1]``, where each expert's scale rows start in the
            swizzled buffer (multiples of 128, room for the expert's rows). Default: the counts
            rounded up to 128, cumulated, computed on the device (:func:`default_blockscale_offsets`).
        swizzle: write scales in the 128x4 layout of the NVFP4 GEMM (default) or linear ``[M, N/16]``.
        out: optional preallocated ``(packed, scales)``: ``packed`` uint8 ``[M, N/2]``, ``scales``
            uint8 ``[R, ceil(N/64)*4]`` with ``R >= blockscale_offsets[-1]`` and ``R`` a multiple of
            128, whole swizzled blocks (e.g. :func:`max_blockscale_rows`), or ``[M, N/16]``
            (linear); contiguous, not overlapping the input. Scale rows past the experts' rows are
            written as zero.
        validate: value checks of the device-resident arguments (offsets consistent and in range,
            ``global_scale`` finite and >= 0, the scales output big enough, and without ``out`` no
            more scale rows than :func:`max_blockscale_rows` ``(M, E)``). They read those tensors on
            the host, a synchronization on CUDA, so ``None`` (default) runs them when ``out`` is not
            given or the tensors are on the CPU, and the current stream is not capturing a CUDA
            graph; ``True`` runs them also with ``out`` on CUDA (refused during capture); ``False``
            never. Unchecked offsets cannot make the kernel access memory out of bounds (rows
            outside ``[0, M)`` and scale bytes past the output are skipped), but wrong offsets give
            wrong results.
            Shapes, dtypes and devices are always checked (no synchronization).
        config: optional ``(BLOCK_M, BLOCK_K, num_warps)`` overriding the launch heuristic
            (benchmarks; tiles never change the result).
        scale_rows: rows of the swizzled scales output when ``out`` is not given: a multiple of 128,
            at least 128 when M > 0, at most :func:`max_blockscale_rows` ``(M, E)``. Default: when
            the value checks run (``validate`` not False, not capturing), exactly
            ``blockscale_offsets[-1]`` (read on the host with the checks); otherwise (CUDA graph
            capture, ``validate=False``) :func:`max_blockscale_rows` ``(M, E)``, a bound that
            depends on shapes only. The registered ops, and so these functions inside
            ``torch.compile``, always use the bound; pass ``scale_rows`` to get one row count in
            every mode.
        enable_pdl: programmatic dependent launch, as in :func:`~inkling_kernels.silu_and_mul`
            (``None``: on for CUDA on compute capability >= 9.0); never changes the result.

    Returns:
        ``packed``: uint8 ``[M, N/2]``, element 2i in the low nibble; ``scales``: uint8 e4m3
        bytes, swizzled ``[scale_rows, ceil(N/64)*4]`` (each expert's rows from
        ``blockscale_offsets[e]``, everything else zero; see ``scale_rows`` for the row count)
        or linear ``[M, N/16]``.

    With ``out`` given (or with the default ``validate=None`` inside CUDA graph capture) the call
    never synchronizes with the host and can be captured in a CUDA graph; a graph captured with
    ``out`` and offset tensors can be replayed after writing new offsets into those tensors in
    place, as long as the scale rows still fit. Inference only: inputs that require grad are
    refused while grad mode is on.
    """
    if torch.compiler.is_compiling():
        if config is not None:
            raise ValueError("config (a benchmark override) is not supported under torch.compile")
        _check_static(
            "x", x, _check_x(x), global_scale, expert_offsets, blockscale_offsets, None, swizzle, out, validate,
            scale_rows, memory=False,
        )  # fmt: skip
        if out is None:
            return torch.ops.inkling.nvfp4_quant(
                x, global_scale, expert_offsets, blockscale_offsets, swizzle, scale_rows, validate, enable_pdl
            )
        torch.ops.inkling.nvfp4_quant_out(
            x, global_scale, expert_offsets, blockscale_offsets, swizzle, validate, enable_pdl, packed=out[0],
            scales=out[1],
        )  # fmt: skip
        return out[0], out[1]
    return _nvfp4_quant_eager(
        x, global_scale, expert_offsets, blockscale_offsets, swizzle, out, validate, config, scale_rows, enable_pdl
    )


def _check_x(x) -> int:
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    check_row_major("x", x)
    N = x.shape[1]
    if N == 0 or N % NVFP4_BLOCK:
        raise ValueError(f"x's last dimension must be a positive multiple of {NVFP4_BLOCK}, got {N}")
    return N


def _nvfp4_quant_eager(
    x, global_scale, expert_offsets, blockscale_offsets, swizzle, out, validate, config, scale_rows, enable_pdl
):
    N = _check_x(x)
    return _launch_quant(
        "x", x, ACT_NONE, N, global_scale, expert_offsets, blockscale_offsets, None, swizzle, out, validate, config,
        scale_rows, enable_pdl,
    )  # fmt: skip


def silu_and_mul_nvfp4_quant(
    gateup: torch.Tensor,
    global_scale: torch.Tensor,
    expert_offsets: torch.Tensor | None = None,
    blockscale_offsets: torch.Tensor | None = None,
    *,
    interleaved: bool = False,
    topk_weights: torch.Tensor | None = None,
    swizzle: bool = True,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    validate: bool | None = None,
    config: tuple[int, int, int] | None = None,
    scale_rows: int | None = None,
    enable_pdl: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``nvfp4_quant(silu_and_mul(gateup, topk_weights, interleaved=...), ...)`` in one kernel,
    bit for bit, with no intermediate tensor.

    Args:
        gateup: ``[M, 2N]`` bf16 or fp16, N a multiple of 16; gate || up (``interleaved=False``,
            the default here) or g0 u0 g1 u1 ... (``interleaved=True``).
        global_scale, expert_offsets, blockscale_offsets, swizzle, out, validate, config,
        scale_rows, enable_pdl: as in :func:`nvfp4_quant` (``expert_offsets`` defaults to one
            expert, ``[0, M]``).
        topk_weights: optional ``[M]`` float per-row weights, multiplied last in fp32.

    Returns:
        ``(packed uint8[M, N/2], scales uint8)`` as :func:`nvfp4_quant`. No host synchronization
        when ``out`` is given (CUDA-graph capturable); inference only.
    """
    if torch.compiler.is_compiling():
        if config is not None:
            raise ValueError("config (a benchmark override) is not supported under torch.compile")
        _check_static(
            "gateup", gateup, _check_fused_args(gateup, interleaved, topk_weights), global_scale, expert_offsets,
            blockscale_offsets, topk_weights, swizzle, out, validate, scale_rows, memory=False,
        )  # fmt: skip
        if out is None:
            return torch.ops.inkling.silu_and_mul_nvfp4_quant(
                gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
                scale_rows, validate, enable_pdl,
            )  # fmt: skip
        torch.ops.inkling.silu_and_mul_nvfp4_quant_out(
            gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle, validate,
            enable_pdl, packed=out[0], scales=out[1],
        )  # fmt: skip
        return out[0], out[1]
    return _fused_eager(
        gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle, out, validate,
        config, scale_rows, enable_pdl,
    )  # fmt: skip


def _fused_eager(
    gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle, out, validate,
    config, scale_rows, enable_pdl,
):  # fmt: skip
    N = _check_fused_args(gateup, interleaved, topk_weights)
    act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
    return _launch_quant(
        "gateup", gateup, act, N, global_scale, expert_offsets, blockscale_offsets, topk_weights, swizzle, out,
        validate, config, scale_rows, enable_pdl,
    )  # fmt: skip

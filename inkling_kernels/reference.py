"""Reference implementations in plain torch, written in the kernels' exact operation order.

Two kinds of reference live here:

* ``silu_and_mul_ref``: the activation in the kernels' order (fp32 math, weight last, one cast).
  It differs from the Triton kernels by at most one ulp of the output dtype, because
  ``torch.sigmoid`` and ``tl.sigmoid`` round their last fp32 bits differently.
* the NVFP4 format: e2m1 and e4m3 tables, ``nvfp4_quant_ref`` following the one formula of
  ``NVFP4_FORMULA`` (which the Triton kernels follow too, so they agree bit for bit),
  dequantization and the 128x4 scale swizzle.
"""

from __future__ import annotations

import torch

from ._validate import FLOAT_DTYPES, check_out_dtype, check_tensor

# ---------------------------------------------------------------------------------------------
# SiLU-and-mul


def split_gateup(gateup: torch.Tensor, interleaved: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the gate and up halves of ``gateup[M, 2N]`` for either layout."""
    M, two_n = gateup.shape
    if interleaved:
        pairs = gateup.reshape(M, two_n // 2, 2)
        return pairs[..., 0], pairs[..., 1]
    return gateup[:, : two_n // 2], gateup[:, two_n // 2 :]


def join_gateup(gate: torch.Tensor, up: torch.Tensor, interleaved: bool = True) -> torch.Tensor:
    """Inverse of :func:`split_gateup`: lay ``gate[M, N]`` and ``up[M, N]`` out as ``[M, 2N]``."""
    if interleaved:
        return torch.stack((gate, up), dim=-1).reshape(gate.shape[0], 2 * gate.shape[1]).contiguous()
    return torch.cat((gate, up), dim=1).contiguous()


def silu_and_mul_ref(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``silu(gate) * up [* w]`` in the kernels' order: upcast, ``g * sigmoid(g) * u``, weight
    last, one cast to ``out_dtype`` (default ``gateup.dtype``).

    ``compute_dtype=torch.float64`` gives the high-precision reference the notebooks measure
    ulp distances against.
    """
    check_tensor("gateup", gateup, ndim=2, dtypes=FLOAT_DTYPES)
    if gateup.shape[1] % 2:
        raise ValueError(f"gateup's last dimension must be even, got {gateup.shape[1]}")
    check_out_dtype(out_dtype)
    gate, up = split_gateup(gateup, interleaved)
    g = gate.to(compute_dtype)
    u = up.to(compute_dtype)
    y = g * torch.sigmoid(g) * u
    if topk_weights is not None:
        y = y * topk_weights.to(compute_dtype)[:, None]
    return y.to(out_dtype or gateup.dtype)


_INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Map floats to integers whose order is the floats' order (-0 and +0 both map to 0)."""
    bits = x.view(_INT_VIEW[x.dtype]).to(torch.int64)
    sign_bit = 1 << (torch.finfo(x.dtype).bits - 1)
    # sign-magnitude -> two's complement: negative floats count down from zero
    magnitude = bits & (sign_bit - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance between ``a`` and ``b`` in units in the last place (int64).

    Both tensors must have the same shape and one of the dtypes bf16, fp16, fp32. The distance
    counts representable values between the two (so +0 and -0 are 0 apart, and the largest
    finite value is 1 ulp from inf). Where either element is NaN the result is -1, unless both
    are NaN, where it is 0: NaN positions are reported, never silently counted as small.
    """
    check_tensor("a", a, dtypes=tuple(_INT_VIEW))
    check_tensor("b", b, dtypes=tuple(_INT_VIEW))
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.contiguous(), b.contiguous()
    dist = (_ordered_bits(a) - _ordered_bits(b)).abs()
    a_nan, b_nan = torch.isnan(a), torch.isnan(b)
    dist = torch.where(a_nan & b_nan, 0, dist)
    return torch.where(a_nan ^ b_nan, -1, dist)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` have the same dtype, shape and raw bits (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    # reshape(-1) of a contiguous tensor has unit stride even where a size-1 dim had another stride
    a, b = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


# ---------------------------------------------------------------------------------------------
# NVFP4

NVFP4_BLOCK = 16  # elements sharing one e4m3 scale
E2M1_MAX = 6.0
E4M3_MAX = 448.0

#: The 16 e2m1 codes (sign bit 3, then 2 exponent bits and 1 mantissa bit) and their values.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])

NVFP4_FORMULA = """\
NVFP4 quantization as this workbook defines it (reference and kernels follow it exactly).

Inputs: x, the activation in its storage dtype (bf16/fp16; the fused kernel rounds silu*mul to
that dtype first), read as fp32; gs, the fp32 global scale of the row's expert (conventionally
448 * 6 / amax(x)). For each row and each block of 16 consecutive elements x_0..x_15:

  1. amax = max_i |x_i|                  (fp32; NaN if any x_i is NaN)
  2. s    = gs * (amax / 6)              (fp32, each op rounded to nearest even; "/" is an
                                          IEEE division: div_rn in the kernels, not div.full);
                                          s = NaN when gs is invalid (NaN, +inf or < 0: the
                                          host checks refuse it when they run, see nvfp4_quant)
  3. s    = min(max(s, 0), 448)          (NaN stays NaN)
  4. s8   = e4m3(s)                      (round to nearest, ties to even; NaN -> 0x7F);
                                          the scale byte stored
  5. mult = gs / float(s8)               (IEEE division; 0 where s8 == 0; NaN where s8 is NaN)
  6. t_i  = x_i * mult                   (fp32)
  7. q_i  = e2m1(t_i)                    (round to nearest, ties to even, |t| > 6 saturates to 6,
                                          sign kept (-0 included), NaN -> +0)
  8. byte j of the row = q_{2j} | q_{2j+1} << 4

Dequantization: x'_i = value(q_i) * (float(s8) / gs), in fp32.
A block containing NaN (or of an expert with an invalid gs) therefore stores scale NaN and
dequantizes to NaN throughout; +-Inf
saturates to +-6 at the largest scale (448); an all-zero block stores scale 0 and codes +0.
"""


def e4m3_encode_ref(s: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3 byte (uint8) by torch's own float8_e4m3fn conversion, after the clamp of
    step 3 (which also turns -0 into +0); NaN of either sign becomes the canonical 0x7F."""
    s = s.float()
    clamped = s.nan_to_num(nan=0.0).clamp(0.0, E4M3_MAX) + 0.0
    return torch.where(torch.isnan(s), 0x7F, clamped.to(torch.float8_e4m3fn).view(torch.uint8)).to(torch.uint8)


def e4m3_decode_ref(b: torch.Tensor) -> torch.Tensor:
    """e4m3 byte (uint8) -> fp32, by torch's float8_e4m3fn."""
    return b.view(torch.float8_e4m3fn).float()


def _e2m1_magnitudes(device) -> torch.Tensor:
    """The 8 magnitudes, built on ``device`` (no host copy, so CUDA graphs can capture it)."""
    c = torch.arange(8, device=device, dtype=torch.float32)
    return torch.where(c < 4, c * 0.5, torch.exp2(torch.floor(c / 2) - 1) * (1 + 0.5 * (c % 2)))


def e2m1_encode_ref(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> e2m1 code (uint8, 0..15): nearest of the 8 magnitudes, ties to the even code."""
    t = t.float()
    a = t.abs().nan_to_num(nan=0.0).clamp(max=E2M1_MAX)
    mags = _e2m1_magnitudes(t.device)
    dist = (a[..., None] - mags).abs()
    best = dist.min(dim=-1, keepdim=True).values
    # among the nearest magnitudes prefer an even code (mantissa bit 0): ties to even
    candidates = dist == best
    even_first = candidates & (torch.arange(8, device=t.device) % 2 == 0)
    code = torch.where(even_first.any(-1), even_first.int().argmax(-1), candidates.int().argmax(-1))
    negative = torch.signbit(t) & ~torch.isnan(t)
    return (code + 8 * negative.int()).to(torch.uint8)


def e2m1_decode_ref(codes: torch.Tensor) -> torch.Tensor:
    mags = _e2m1_magnitudes(codes.device)
    c = codes.long()
    return torch.where(c >= 8, -mags[c & 7], mags[c & 7])


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """``[..., 2K]`` codes -> ``[..., K]`` bytes, element 2i in the low nibble."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def nvfp4_quant_ref(x: torch.Tensor, global_scale) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x[M, N]`` (N a multiple of 16) by ``NVFP4_FORMULA``, with one fp32 global
    scale (a float or 0-d/1-element tensor) or one per row (an ``[M]`` tensor).

    Returns ``packed uint8[M, N/2]`` and linear ``scales uint8[M, N/16]`` (e4m3 bytes; view them
    with ``.view(torch.float8_e4m3fn)``).
    """
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    M, N = x.shape
    if N % NVFP4_BLOCK:
        raise ValueError(f"x's last dimension must be a multiple of {NVFP4_BLOCK}, got {N}")
    gs = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device)
    gs = gs.reshape(M, 1) if gs.numel() == M and gs.numel() != 1 else gs.reshape(())
    xb = x.float().reshape(M, N // NVFP4_BLOCK, NVFP4_BLOCK)
    amax = xb.abs().amax(dim=-1)  # NaN-propagating
    s = gs * (amax / 6.0)
    s = torch.where(torch.isnan(gs) | (gs < 0) | torch.isposinf(gs), float("nan"), s)  # an invalid gs poisons
    s8 = e4m3_encode_ref(s)
    sf = e4m3_decode_ref(s8)
    mult = torch.where(sf == 0, torch.zeros_like(sf), gs / sf)
    t = xb * mult[..., None]
    codes = e2m1_encode_ref(t).reshape(M, N)
    return pack_e2m1(codes), s8


def nvfp4_dequant_ref(packed: torch.Tensor, scales: torch.Tensor, global_scale, dtype=torch.float32) -> torch.Tensor:
    """Inverse of :func:`nvfp4_quant_ref` (linear scales): ``value(q) * (float(s8) / gs)``."""
    values = e2m1_decode_ref(unpack_e2m1(packed))
    M, N = values.shape
    gs = torch.as_tensor(global_scale, dtype=torch.float32, device=packed.device).reshape(())
    per_block = e4m3_decode_ref(scales) / gs
    return (values.reshape(M, N // NVFP4_BLOCK, NVFP4_BLOCK) * per_block[..., None]).reshape(M, N).to(dtype)


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def swizzle_blockscale(scales: torch.Tensor) -> torch.Tensor:
    """Linear ``[R, C]`` scale bytes -> the 128x4-swizzled ``[R128, C4]`` buffer (R128, C4: R, C
    rounded up to multiples of 128 and 4; padding zero). Byte (m, k) lands at flat offset
    ``(m // 128) * (C4 * 128) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4``.
    """
    R, C = scales.shape
    R128, C4 = _round_up(R, 128), _round_up(C, 4)
    padded = torch.zeros((R128, C4), dtype=scales.dtype, device=scales.device)
    padded[:R, :C] = scales
    # row m = 128*a + 32*b + c, column k = 4*d + e  ->  memory order (a, d, c, b, e)
    tiles = padded.reshape(R128 // 128, 4, 32, C4 // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.contiguous().reshape(R128, C4)


def unswizzle_blockscale(swizzled: torch.Tensor, rows: int | None = None, cols: int | None = None) -> torch.Tensor:
    """Inverse of :func:`swizzle_blockscale`, cropped to ``rows x cols`` when given."""
    R128, C4 = swizzled.shape
    tiles = swizzled.reshape(R128 // 128, C4 // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    linear = tiles.contiguous().reshape(R128, C4)
    return linear[: rows if rows is not None else R128, : cols if cols is not None else C4]


def swizzled_offset(m: int, k: int, n_scale_cols: int) -> int:
    """The flat byte offset of scale (m, k) in the 128x4 layout (the formula, for checks)."""
    k4 = (n_scale_cols + 3) // 4
    return (m // 128) * (k4 * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)


def padded_blockscale_offsets(expert_offsets: torch.Tensor) -> torch.Tensor:
    """Each expert's scale rows start at a multiple of 128: cumsum of counts rounded up to 128."""
    counts = expert_offsets[1:] - expert_offsets[:-1]
    padded = (counts + 127) // 128 * 128
    return torch.cat((torch.zeros(1, dtype=expert_offsets.dtype, device=expert_offsets.device), padded.cumsum(0)))


def nvfp4_quant_experts_ref(
    x: torch.Tensor,
    global_scale: torch.Tensor,
    expert_offsets: torch.Tensor,
    blockscale_offsets: torch.Tensor | None = None,
    *,
    swizzle: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert :func:`nvfp4_quant_ref` of ``x[M, N]``: expert e owns rows
    ``expert_offsets[e]:expert_offsets[e+1]`` and scale rows from ``blockscale_offsets[e]``.

    Returns packed ``uint8[M, N/2]`` and scales: swizzled ``uint8[blockscale_offsets[-1], C4]``
    (zero padding) if ``swizzle``, else linear ``uint8[M, N/16]``.
    """
    M, N = x.shape
    eo = [int(v) for v in expert_offsets.cpu()]
    if blockscale_offsets is None:
        blockscale_offsets = padded_blockscale_offsets(expert_offsets.cpu())
    bo = [int(v) for v in blockscale_offsets.cpu()]
    gs = global_scale.float().reshape(-1).cpu()
    packed = torch.empty((M, N // 2), dtype=torch.uint8)
    linear = torch.empty((M, N // NVFP4_BLOCK), dtype=torch.uint8)
    C4 = _round_up(N // NVFP4_BLOCK, 4)
    swizzled = torch.zeros((bo[-1], C4), dtype=torch.uint8)
    for e in range(len(eo) - 1):
        rows = slice(eo[e], eo[e + 1])
        p, s = nvfp4_quant_ref(x[rows].cpu(), gs[e])
        packed[rows], linear[rows] = p, s
        if swizzle and eo[e + 1] > eo[e]:
            block = swizzle_blockscale(s)
            swizzled[bo[e] : bo[e] + block.shape[0]] = block
    return packed.to(x.device), (swizzled if swizzle else linear).to(x.device)


# ---------------------------------------------------------------------------------------------
# FP8 per-token-group (e4m3, one fp32 scale per row and group)

FP8_MAX = 448.0  # largest finite e4m3fn value
FP8_EPS = 1e-10  # floor of a group's amax (an all-zero group gets a tiny positive scale)
FP8_NAN_BYTE = 0x7F  # the one NaN byte the kernels write
FLT_MAX = float(torch.finfo(torch.float32).max)

FP8_GROUP_FORMULA = """\
FP8 per-token-group quantization as this workbook defines it (reference and kernels follow it
exactly, so they agree bit for bit).

Inputs: y, the activation in its storage dtype (bf16/fp16/fp32; the fused kernel rounds
silu(g)*u[*w] to that dtype first, exactly as silu_and_mul stores it), read as fp32. For each
row and each group of G consecutive elements y_0..y_{G-1} (G = group_size, default 128):

  1. amax = max_i |y_i| over the non-NaN y_i   (fp32; +-Inf counts as the largest finite fp32,
                                                3.4028235e38)
  2. amax = max(amax, 1e-10)                   (eps: an all-zero or all-NaN group stays finite)
  3. s    = amax / 448                         (fp32, IEEE division, round to nearest even:
                                                div_rn in the kernels, not Triton's "/")
  4. if scale_ue8m0: s = 2 ** ceil(log2(s))    (exact, on the bits: a power of two)
  5. t_i  = y_i / s                            (fp32, IEEE division; with ue8m0 the product with
                                                the exact reciprocal 1/s, which is the same number)
  6. t_i  = min(max(t_i, -448), 448)           (NaN stays NaN; +-Inf saturates)
  7. q_i  = e4m3fn(t_i)                        (round to nearest, ties to even, sign kept:
                                                -0 -> 0x80; any NaN -> 0x7F)
  8. the scale stored is s (fp32); dequantization is q_i * s in fp32.

For finite inputs this is the formula of the widely used open-source per-token-group FP8
quantizers (amax floored at eps, s = amax / 448, q = e4m3(clamp(y / s))). Where it differs:
  * division: "/" is IEEE in every step. Multiplying by the reciprocal 1/s instead moved 4.9e-4
    of the codes by one step (8192 x 3072 random normal bf16 activations, on the CPU); Triton's
    fp32 "/", an approximate division on the GPU, moved 3.4e-6 of them (H200). Either way the
    result cannot be compared bit for bit with an IEEE reference. (With ue8m0 scales, s is a
    power of two and the product with 1/s is exact, so there the kernels multiply. Compiled,
    with bf16/fp16 activations, the kernels multiply by the IEEE 1/s and correct the product
    once with an exact fma residual: the same byte as the IEEE quotient on every reachable input
    pair, checked exhaustively on the GPU.)
  * NaN: a NaN element is skipped by the group max and becomes the NaN byte 0x7F on its own,
    whatever the sign of the NaN; the other elements of its group are quantized as if it were
    absent. (Quantizers built on fmaxf drop NaN from the max the same way but keep whatever byte
    their hardware conversion makes of it.)
  * Inf: +-Inf counts as the largest finite float in the max, so the scale stays finite,
    +-Inf saturates to +-448 and its finite neighbours round to (signed) zero. (A plain
    amax / 448 makes the scale Inf and Inf / Inf a NaN code.)
"""


def ue8m0_ceil_ref(s: torch.Tensor) -> torch.Tensor:
    """``2 ** ceil(log2(s))`` for positive normal fp32 ``s``, exactly: adding 0x7FFFFF to the bits
    carries into the exponent unless the mantissa is already zero; then the mantissa is cleared."""
    bits = s.float().contiguous().view(torch.int32)
    return ((bits + 0x7FFFFF) & 0x7F800000).view(torch.float32)


def fp8_group_quant_ref(
    y: torch.Tensor, group_size: int = 128, *, scale_ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``y[..., N]`` (N a multiple of ``group_size``) by ``FP8_GROUP_FORMULA``.

    Returns ``q`` float8_e4m3fn ``[..., N]`` and ``scales`` fp32 ``[..., N // group_size]``
    (row-major).
    """
    check_tensor("y", y, dtypes=FLOAT_DTYPES)
    N = y.shape[-1]
    if N % group_size:
        raise ValueError(f"y's last dimension must be a multiple of group_size={group_size}, got {N}")
    yg = y.float().reshape(*y.shape[:-1], N // group_size, group_size)
    mag = yg.abs()
    amax = torch.where(torch.isnan(mag), 0.0, mag).amax(dim=-1).clamp(max=FLT_MAX).clamp(min=FP8_EPS)
    s = amax / FP8_MAX
    if scale_ue8m0:
        s = ue8m0_ceil_ref(s)
    t = (yg / s[..., None]).clamp(-FP8_MAX, FP8_MAX)
    q = t.to(torch.float8_e4m3fn).view(torch.uint8)
    q = torch.where(torch.isnan(t), FP8_NAN_BYTE, q).to(torch.uint8).view(torch.float8_e4m3fn)
    return q.reshape(y.shape), s


def silu_and_mul_fp8_group_quant_ref(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    *,
    interleaved: bool = True,
    group_size: int = 128,
    scale_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused op in torch: ``silu_and_mul_ref`` (rounded to gateup's dtype) then
    :func:`fp8_group_quant_ref`. ``gateup`` is ``[M, 2N]``; its silu*mul may differ from the
    Triton kernels' by an ulp (torch.sigmoid vs tl.sigmoid), so bitwise checks quantize the
    kernels' own activation with :func:`fp8_group_quant_ref` instead."""
    y = silu_and_mul_ref(gateup, topk_weights, interleaved=interleaved)
    return fp8_group_quant_ref(y, group_size, scale_ue8m0=scale_ue8m0)


def fp8_group_dequant_ref(q: torch.Tensor, scales: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """``q * s`` per group, in fp32 (scales in any layout: only their values are read)."""
    qf = q.float()
    return (qf.reshape(*q.shape[:-1], -1, group_size) * scales[..., None]).reshape(q.shape)


FP8_SCALE_LAYOUTS = ("row", "tma", "cublas", "ue8m0_packed")

FP8_SCALE_LAYOUT_FORMULA = """\
Where the FP8 ops put q and the scales (scale_layout=...), named by the consumer that reads them.
S[m, g] are the row-major scales of FP8_GROUP_FORMULA for rows m < M and groups g < G; Mp =
round_up(M, 4), except in "cublas": round_up(M, 16). 3-D inputs [E, T, ...] are laid out expert
by expert (M = T, Mp = Tp), each expert's block at a stride of its own storage; with masked_m,
rows masked_m[e] <= t < T are neither read nor written in any layout (padding rows t >= T always
are).

  row           q [M, N]; scales fp32 [M, G], strides (G, 1): S itself.
  tma           q [M, N]; scales fp32 [M, G], strides (1, Mp): a view of a [G, Mp] buffer B with
                B[g, m] = S[m, g], B[g, m] = 0 for M <= m < Mp (TMA: 16-byte aligned columns).
                column_major_scales=True is its alias.
  cublas        q [Mp, N], rows M..Mp-1 all zero bytes; scales fp32 [Mp, G], strides (1, Mp) (the
                whole buffer B of "tma", over 16-row padding: padding rows' scale 0).
                torch._scaled_mm's blockwise 1x128 activation scales need exactly strides
                (1, rows), and q^T as its second operand needs Mp % 16 == 0: pass q and the
                scales whole, in either operand order, and keep rows [:M] of the product (or
                slice q[:M] for other uses).
  ue8m0_packed  scales are ue8m0 (power of two, implied): byte(m, g) = bits(S[m, g]) >> 23, the
                exponent. Gk = ceil(G / 4) words a row: scales int32 [M, Gk], strides (1, Mp), a
                view of an int32 [Gk, Mp] buffer W with
                  W[k, m] = byte(m, 4k) | byte(m, 4k+1) << 8 | byte(m, 4k+2) << 16 | byte(m, 4k+3) << 24
                (little-endian: group 4k in the lowest byte), byte(m, g) = 0 for g >= G (padding
                groups) and for M <= m < Mp (padding rows). q [M, N]. This is DeepGEMM's
                MN-major TMA-aligned packed UE8M0 scale layout (get_mn_major_tma_aligned_packed_
                ue8m0_tensor) for the sm_100 FP8 GEMMs.
"""


def fp8_scales_in_layout_ref(scales: torch.Tensor, layout: str) -> torch.Tensor:
    """The scales of ``FP8_SCALE_LAYOUT_FORMULA``'s ``layout`` built from row-major fp32 scales
    ``[M, G]`` or ``[E, T, G]`` (e.g. :func:`fp8_group_quant_ref`'s) by plain torch ops, with the
    same shape, strides and padding storage the ops return."""
    if layout not in FP8_SCALE_LAYOUTS:
        raise ValueError(f"layout must be one of {FP8_SCALE_LAYOUTS}, got {layout!r}")
    if layout == "row":
        return scales.contiguous()
    s3 = scales.unsqueeze(0) if scales.dim() == 2 else scales
    E, M, G = s3.shape
    Mp = _round_up(M, 16 if layout == "cublas" else 4)
    if layout == "ue8m0_packed":
        byte = (s3.contiguous().view(torch.int32) >> 23).to(torch.uint8)
        Gp = _round_up(G, 4)
        padded = torch.zeros((E, Mp, Gp), dtype=torch.uint8, device=scales.device)
        padded[:, :M, :G] = byte
        words = padded.view(torch.int32)  # [E, Mp, Gp // 4], little-endian bytes
        buf = torch.zeros((E, Gp // 4, Mp), dtype=torch.int32, device=scales.device)
        buf.transpose(1, 2).copy_(words)
        keep = M
    else:
        buf = torch.zeros((E, G, Mp), dtype=torch.float32, device=scales.device)
        buf.transpose(1, 2)[:, :M] = s3
        keep = Mp if layout == "cublas" else M
    out = buf.transpose(1, 2)[:, :keep]
    return out[0] if scales.dim() == 2 else out


def fp8_q_in_layout_ref(q: torch.Tensor, layout: str) -> torch.Tensor:
    """q ``[M, N]`` / ``[E, T, N]`` as ``layout`` returns it: itself, or for ``"cublas"`` with the
    rows padded to a multiple of 16 by zero bytes."""
    if layout not in FP8_SCALE_LAYOUTS:
        raise ValueError(f"layout must be one of {FP8_SCALE_LAYOUTS}, got {layout!r}")
    if layout != "cublas":
        return q
    M = q.shape[-2]
    pad = torch.zeros((*q.shape[:-2], _round_up(M, 16) - M, q.shape[-1]), dtype=torch.uint8, device=q.device)
    return torch.cat([q.view(torch.uint8), pad], dim=-2).view(torch.float8_e4m3fn)

"""The fused SiLU-and-mul + NVFP4 kernel built step by step (notebook 05).

Every step takes the package's arguments (:func:`inkling_kernels.silu_and_mul_nvfp4_quant`'s,
checked by the package's own checks) and writes the same bits (``checks.check_steps``,
``tests/test_nvfp4_steps.py``). The arithmetic is one implementation: the package's helpers
(``_silu_mul``, ``_e4m3_round``, ``_e2m1_code``, ``_expert_of_rows``, ``_activation_half``,
``_pack_half``) and the package kernel's scale lines (:func:`_block_scale`). The steps differ
only in how the tile is laid out over the threads:

0. ``two_kernels``: ``silu_and_mul`` writes the activation, ``nvfp4_quant`` reads it back.
1. ``naive_fused``: one kernel; a ``[BLOCK_M, BLOCK_K]`` tile loaded 2-D, the activation in
   registers, reshaped to ``[BLOCK_M, NB, 16]`` for the block scales.
2. ``tile_3d``: the tile built ``[BLOCK_M, NB, 16]`` from the pointers.
3. ``block_halves``: a whole 16-element block a thread, as two ``[BLOCK_M, NB, 8]`` halves (the
   package kernel's tile).

Steps 1-3 share the package kernel's frame (:func:`nvfp4_step_kernel`: each scale row's expert,
the row and global-scale masks, the swizzled or linear scale store, PDL), the package's launch
heuristic and its checks. The package's Blackwell path (the hardware e2m1 conversion, the same
bytes) is not a step: the H200 has no such instruction, so the steps round in software.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend  # library helpers
from inkling_kernels import nvfp4 as _nvfp4  # library helpers: checks, launch heuristic, the two ops
from inkling_kernels._activation import ACT_INTERLEAVED, ACT_NON_INTERLEAVED, _silu_mul  # library helpers
from inkling_kernels._nvfp4_kernel import (  # library helpers: the package kernel's jit helpers
    _activation_half,
    _e2m1_code,
    _e4m3_round,
    _expert_of_rows,
    _pack_half,
)
from inkling_kernels.silu_and_mul import silu_and_mul


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    idea: str


STEPS = [
    Step(0, "two_kernels", "silu_and_mul writes the bf16 activation, nvfp4_quant reads it back"),
    Step(1, "naive_fused", "one kernel: a [BLOCK_M, BLOCK_K] tile loaded 2-D, the activation in registers, "
                           "reshaped to [BLOCK_M, NB, 16] for the block scales"),
    Step(2, "tile_3d", "the tile built [BLOCK_M, NB, 16] from the pointers: 8 contiguous elements a thread"),
    Step(3, "block_halves", "a whole 16-element block a thread, as two [BLOCK_M, NB, 8] halves (the package's tile)"),
]  # fmt: skip
STEP_NAMES = [s.name for s in STEPS]


# ---- shared pieces ---------------------------------------------------------------------------


@triton.jit
def _block_scale(amax_bits, gs):
    """Steps 2-5 of the formula, the package kernel's lines: each block's |x| maximum as bits
    (a NaN sorts above +inf) and the rows' global scales -> (e4m3 byte, multiplier, NaN block)."""
    has_nan = amax_bits > 0x7F800000
    amax = amax_bits.to(tl.float32, bitcast=True)
    s = gs[:, None] * tl.math.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32))
    gs_bad = (gs != gs) | (gs < 0.0) | (gs == float("inf"))
    s_nan = has_nan | (s != s) | gs_bad[:, None]
    s = tl.where(s_nan, 0.0, tl.minimum(tl.maximum(s, 0.0), 448.0))
    s8, sf = _e4m3_round(s)
    s8 = tl.where(s_nan, 0x7F, s8)
    sf_safe = tl.where(sf == 0.0, 1.0, sf)
    mult = tl.where(sf == 0.0, 0.0, tl.math.div_rn(gs[:, None] + tl.zeros_like(sf), sf_safe))
    return s8, mult, s_nan


@triton.jit
def _store_scales(scale_ptr, s8, r, r_ok, valid, kb, total_scale_rows, N: tl.constexpr, SCALE_COLS: tl.constexpr,
                  SWIZZLE: tl.constexpr, INT64: tl.constexpr):  # fmt: skip
    """The package kernel's scale store: real blocks get ``s8``, padding rows and columns 0, at
    the swizzled (128x4) or linear position, masked to the buffer's extent."""
    s8 = tl.where(valid[:, None] & (kb < N // 16)[None, :], s8, 0)
    r_s = r
    if INT64:
        r_s = r.to(tl.int64)
    if SWIZZLE:
        offs = (
            (r_s // 128)[:, None] * (SCALE_COLS * 128)
            + (kb // 4)[None, :] * 512
            + (r_s % 32)[:, None] * 16
            + ((r_s % 128) // 32)[:, None] * 4
            + (kb % 4)[None, :]
        )
    else:
        offs = r_s[:, None] * SCALE_COLS + kb[None, :]
    extent = total_scale_rows * SCALE_COLS
    if INT64:
        extent = total_scale_rows.to(tl.int64) * SCALE_COLS
    in_buf = offs < extent
    tl.store(scale_ptr + offs, s8.to(tl.uint8), mask=r_ok[:, None] & (kb < SCALE_COLS)[None, :] & in_buf)


# ---- step 1: naive fused ---------------------------------------------------------------------


@triton.jit
def _tile_naive(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N: tl.constexpr, ACT: tl.constexpr,
                HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    NB: tl.constexpr = BLOCK_K // 16
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = valid[:, None] & (cols < N)[None, :]
    row_off = m[:, None] * stride_x
    if ACT == 1:
        cols2 = pid_k * (2 * BLOCK_K) + tl.arange(0, 2 * BLOCK_K)
        pairs = tl.load(x_ptr + row_off + cols2[None, :], mask=valid[:, None] & (cols2 < 2 * N)[None, :], other=0.0)
        gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, BLOCK_K, 2)))
    else:
        gate = tl.load(x_ptr + row_off + cols[None, :], mask=mask, other=0.0)
        up = tl.load(x_ptr + row_off + N + cols[None, :], mask=mask, other=0.0)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        y = y * w[:, None]
    x = y.to(x_ptr.dtype.element_ty).to(tl.float32)  # rounded as silu_and_mul stores it
    xb = tl.reshape(x, (BLOCK_M, NB, 16))  # the block axis made from the 2-D tile; the compiler relays it out
    amax_bits = tl.max(xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
    s8, mult, s_nan = _block_scale(amax_bits, gs)
    q = _e2m1_code(xb * mult[:, :, None])
    q = tl.where(s_nan[:, :, None], 0, q)  # a NaN block stores codes +0
    even, odd = tl.split(tl.reshape(q, (BLOCK_M, BLOCK_K // 2, 2)))
    pcols = pid_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    pmask = valid[:, None] & (pcols < N // 2)[None, :]
    tl.store(packed_ptr + m[:, None] * (N // 2) + pcols[None, :], (even | (odd << 4)).to(tl.uint8), mask=pmask)
    return s8


# ---- step 2: the 3-D tile from the pointers --------------------------------------------------


@triton.jit
def _tile_3d(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N: tl.constexpr, ACT: tl.constexpr,
             HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    NB: tl.constexpr = BLOCK_K // 16
    kb = pid_k * NB + tl.arange(0, NB)  # scale column = block index along N
    cols = kb[None, :, None] * 16 + tl.arange(0, 16)[None, None, :]  # [1, NB, 16]
    mask = valid[:, None, None] & (cols < N)
    row_off = m[:, None, None] * stride_x
    if ACT == 1:
        cols2 = kb[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
        pairs = tl.load(x_ptr + row_off + cols2, mask=valid[:, None, None] & (cols2 < 2 * N), other=0.0)
        gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, NB, 16, 2)))
    else:
        gate = tl.load(x_ptr + row_off + cols, mask=mask, other=0.0)
        up = tl.load(x_ptr + row_off + N + cols, mask=mask, other=0.0)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        y = y * w[:, None, None]
    xb = y.to(x_ptr.dtype.element_ty).to(tl.float32)  # rounded as silu_and_mul stores it
    amax_bits = tl.max(xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
    s8, mult, s_nan = _block_scale(amax_bits, gs)
    q = _e2m1_code(xb * mult[:, :, None])
    q = tl.where(s_nan[:, :, None], 0, q)  # a NaN block stores codes +0
    even, odd = tl.split(tl.reshape(q, (BLOCK_M, NB, 8, 2)))
    pcols = kb[None, :, None] * 8 + tl.arange(0, 8)[None, None, :]
    pmask = valid[:, None, None] & (pcols < N // 2)
    tl.store(packed_ptr + m[:, None, None] * (N // 2) + pcols, (even | (odd << 4)).to(tl.uint8), mask=pmask)
    return s8


# ---- step 3: a whole block a thread, as two halves -------------------------------------------


@triton.jit
def _tile_halves(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N: tl.constexpr, ACT: tl.constexpr,
                 HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    NB: tl.constexpr = BLOCK_K // 16
    kb = pid_k * NB + tl.arange(0, NB)  # scale column = block index along N
    row_off = m[:, None, None] * stride_x
    lo = _activation_half(x_ptr, row_off, w, valid, kb, 0, N, ACT, HAS_WEIGHT, BLOCK_M, NB)  # elements 0-7
    hi = _activation_half(x_ptr, row_off, w, valid, kb, 1, N, ACT, HAS_WEIGHT, BLOCK_M, NB)  # elements 8-15
    amax_bits = tl.maximum(
        tl.max(lo.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2),
        tl.max(hi.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2),
    )
    s8, mult, s_nan = _block_scale(amax_bits, gs)
    pcols = kb[None, :, None] * 8 + tl.arange(0, 4)[None, None, :]
    pmask = valid[:, None, None] & (pcols < N // 2)
    pout = packed_ptr + m[:, None, None] * (N // 2) + pcols
    tl.store(pout, _pack_half(lo, mult, s_nan, BLOCK_M, NB), mask=pmask)  # a block's first 4 bytes
    tl.store(pout + 4, _pack_half(hi, mult, s_nan, BLOCK_M, NB), mask=pmask)  # and its next 4
    return s8


# ---- the kernel: the package kernel's frame, the step's tile ---------------------------------


@triton.jit(do_not_specialize=["M", "E", "total_scale_rows"])
def nvfp4_step_kernel(
    x_ptr, weight_ptr, gs_ptr, expert_off_ptr, scale_off_ptr, packed_ptr, scale_ptr, stride_x, M, E,
    total_scale_rows, N: tl.constexpr, SCALE_COLS: tl.constexpr, ACT: tl.constexpr, HAS_WEIGHT: tl.constexpr,
    SWIZZLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    INT64: tl.constexpr, STEP: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """Steps 1-3: the package kernel's arguments and frame (a program's scale rows, their experts,
    the masks that keep every access in bounds, the scale store), the tile the step's."""
    NB: tl.constexpr = BLOCK_K // 16
    K_TILES: tl.constexpr = (SCALE_COLS * 16 + BLOCK_K - 1) // BLOCK_K
    pid = tl.program_id(0)
    pid_m = pid // K_TILES
    pid_k = pid % K_TILES
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = r < total_scale_rows
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    e = _expert_of_rows(tl.where(r_ok, r, 0), scale_off_ptr, E, SEARCH_STEPS)
    local = r - tl.load(scale_off_ptr + e)
    row_start = tl.load(expert_off_ptr + e)
    valid = r_ok & (local < tl.load(expert_off_ptr + e + 1) - row_start)  # a real token row
    m = row_start + local
    valid = valid & (m >= 0) & (m < M)
    if INT64:
        m = m.to(tl.int64)
    gs = tl.load(gs_ptr + e)  # [BLOCK_M]
    w = tl.zeros_like(gs)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + m, mask=valid, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if STEP == 1:
        s8 = _tile_naive(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N, ACT, HAS_WEIGHT, BLOCK_M, BLOCK_K)
    elif STEP == 2:
        s8 = _tile_3d(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N, ACT, HAS_WEIGHT, BLOCK_M, BLOCK_K)
    else:
        s8 = _tile_halves(x_ptr, packed_ptr, m, stride_x, valid, gs, w, pid_k, N, ACT, HAS_WEIGHT, BLOCK_M, BLOCK_K)
    kb = pid_k * NB + tl.arange(0, NB)
    _store_scales(scale_ptr, s8, r, r_ok, valid, kb, total_scale_rows, N, SCALE_COLS, SWIZZLE, INT64)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


# ---- launchers -------------------------------------------------------------------------------


def _resolve(step) -> int:
    if isinstance(step, Step):
        step = step.name
    if isinstance(step, int) and not isinstance(step, bool) and 0 <= step < len(STEPS):
        return step
    if isinstance(step, str) and step in STEP_NAMES:
        return STEP_NAMES.index(step)
    raise ValueError(f"step must be one of {STEP_NAMES} (or its index), got {step!r}")


def two_kernels(gateup, global_scale, expert_offsets=None, blockscale_offsets=None, *, interleaved=False,
                topk_weights=None, swizzle=True, out=None, validate=None, config=None, scale_rows=None,
                enable_pdl=None, act=None):  # fmt: skip
    """Step 0: ``silu_and_mul`` then ``nvfp4_quant`` (``config`` is the quantizer's tile); ``act``:
    a preallocated ``[M, N]`` activation buffer (the timing's), else one is allocated."""
    y = silu_and_mul(gateup, topk_weights, interleaved=interleaved, out=act, enable_pdl=enable_pdl)
    return _nvfp4.nvfp4_quant(
        y, global_scale, expert_offsets=expert_offsets, blockscale_offsets=blockscale_offsets, swizzle=swizzle,
        out=out, validate=validate, config=config, scale_rows=scale_rows, enable_pdl=enable_pdl,
    )  # fmt: skip


@dataclass
class StepLaunch:
    """One launch of :func:`nvfp4_step_kernel`, as :func:`plan_step` builds it."""

    grid: tuple
    args: tuple
    kwargs: dict
    kernel: object = nvfp4_step_kernel


def plan_step(step, gateup, global_scale, expert_offsets=None, blockscale_offsets=None, *, interleaved=False,
              topk_weights=None, swizzle=True, out=None, validate=None, config=None, scale_rows=None,
              enable_pdl=None, compiled=None):  # fmt: skip
    """The package's launch (``nvfp4._launch_quant``: its checks, value checks, outputs, tile,
    grid and int64 switch) for step 1-3's kernel, not made: ``(packed, scales, launch)``, ``launch``
    a :class:`StepLaunch` or None when there is no scale row. ``compiled``: pick the tile of the
    compiled (True) or interpreted (False) path; default the tensors' own."""
    index = _resolve(step)
    if index == 0:
        raise ValueError("step 0 (two_kernels) is two launches of the package: call two_kernels")
    N = _nvfp4._check_fused_args(gateup, interleaved, topk_weights)
    act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
    device, M = gateup.device, gateup.shape[0]
    expert_offsets, E, gs, blockscale_offsets, scale_cols, packed, scales, total_rows = _nvfp4._check_static(
        "gateup", gateup, N, global_scale, expert_offsets, blockscale_offsets, topk_weights, swizzle, out, validate,
        scale_rows,
    )  # fmt: skip
    if swizzle and blockscale_offsets is None:
        blockscale_offsets = _nvfp4.default_blockscale_offsets(expert_offsets)
    scale_offsets = blockscale_offsets if swizzle else expert_offsets
    interpreted = _backend.uses_interpreter(device)
    capturing = not interpreted and torch.cuda.is_current_stream_capturing()
    if validate is True and capturing:
        raise ValueError("validate=True reads offsets on the host, which CUDA graph capture forbids: use None")
    checked_rows = None
    if validate is True or (validate is None and (out is None or interpreted) and not capturing):
        bound = _nvfp4.max_blockscale_rows(M, E) if out is None else None
        checked_rows = _nvfp4._check_values(gs, expert_offsets, blockscale_offsets, M, swizzle, total_rows, bound)
    if out is None:
        if total_rows is None:  # exact rows when the checks read the offsets, else the static bound
            if not swizzle:
                total_rows = M
            elif checked_rows is not None:
                total_rows = checked_rows
            else:
                total_rows = _nvfp4.max_blockscale_rows(M, E)
        packed = torch.empty((M, N // 2), dtype=torch.uint8, device=device)
        scales = torch.empty((total_rows, scale_cols), dtype=torch.uint8, device=device)
    if total_rows == 0:
        return packed, scales, None
    if config is not None:
        _nvfp4._check_config(config)
    else:
        config = _nvfp4._quant_config(N, interpreted if compiled is None else not compiled, fused=True)
    block_m, block_k, warps = config
    grid0 = triton.cdiv(total_rows, block_m) * triton.cdiv(scale_cols * 16, block_k)
    stride_x = gateup.stride(0)
    int64 = max(M * max(stride_x, 1), total_rows * scale_cols) >= _backend.INT32_LIMIT
    weight = topk_weights.contiguous() if topk_weights is not None else gs
    pdl = _backend.resolve_pdl(enable_pdl, device)
    args = (gateup, weight, gs, expert_offsets, scale_offsets, packed, scales, stride_x, M, E, total_rows)
    kwargs = dict(N=N, SCALE_COLS=scale_cols, ACT=act, HAS_WEIGHT=topk_weights is not None, SWIZZLE=swizzle,
                  BLOCK_M=block_m, BLOCK_K=block_k, SEARCH_STEPS=max(1, (E - 1).bit_length()), INT64=int64,
                  STEP=index, USE_PDL=pdl, num_warps=warps)  # fmt: skip
    if pdl:
        kwargs["launch_pdl"] = True
    return packed, scales, StepLaunch((grid0,), args, kwargs)


def run_step(step, gateup, global_scale, expert_offsets=None, blockscale_offsets=None, *, interleaved=False,
             topk_weights=None, swizzle=True, out=None, validate=None, config=None, scale_rows=None,
             enable_pdl=None):  # fmt: skip
    """Step ``step`` (name, index or :class:`Step`) with :func:`inkling_kernels.silu_and_mul_nvfp4_quant`'s
    arguments, compiled on CUDA, interpreted on CPU: ``(packed, scales)`` as the package returns them."""
    kw = dict(interleaved=interleaved, topk_weights=topk_weights, swizzle=swizzle, out=out, validate=validate,
              config=config, scale_rows=scale_rows, enable_pdl=enable_pdl)  # fmt: skip
    if _resolve(step) == 0:
        return two_kernels(gateup, global_scale, expert_offsets, blockscale_offsets, **kw)
    packed, scales, launch = plan_step(step, gateup, global_scale, expert_offsets, blockscale_offsets, **kw)
    if launch is not None:
        _backend.launch(launch.kernel, launch.grid, gateup.device, *launch.args, **launch.kwargs)
    return packed, scales


# ---- sources for the notebook ----------------------------------------------------------------

#: each step's own code: the two-kernel call (step 0) or the tile function (steps 1-3)
SOURCES = ["two_kernels", "_tile_naive", "_tile_3d", "_tile_halves"]


def step_source(step) -> str:
    """The Python source of a step's own code (step 0: the two calls; steps 1-3: the tile)."""
    fn = globals()[SOURCES[_resolve(step)]]
    return inspect.getsource(getattr(fn, "fn", fn))


def step_diff(step) -> str:
    """What a step changes: a unified diff of its tile's body against the previous step's (steps 0
    and 1: the whole source)."""
    import difflib

    index = _resolve(step)
    if index < 2:
        return step_source(index)
    before, after = _body(step_source(index - 1)), _body(step_source(index))
    lines = difflib.unified_diff(before, after, SOURCES[index - 1], SOURCES[index], n=0, lineterm="")
    return "\n".join(line for line in lines if not line.startswith("@@"))


def _body(src: str) -> list[str]:
    """A jit function's lines after its signature (which differs only in the name)."""
    lines = src.splitlines()
    end = next(i for i, line in enumerate(lines) if "# fmt: skip" in line or line.rstrip().endswith(":"))
    return lines[end + 1 :]

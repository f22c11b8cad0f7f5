"""The third port step by step (notebook 10): from a textbook fused RMS norm + per-token quant to the
original's arithmetic, one difference a step, each step a kernel checked by portcheck against the
helion original.

Every step is the same plain kernel (:func:`step_kernel`: a row a program, three loops over
``[1, BLOCK]`` tiles, masks everywhere), specialized by four compile-time flags:

0. ``naive``: the sum of squares in one tile over the row (the row rounded up to a power of two),
   the mean as ``sum / H``, ``h * rms * weight`` in fp32, the scale ``amax / 448``.
1. ``mean_by_reciprocal``: ``sum * fp32(1 / H)`` as the original (``1.0 / hidden`` is a constant).
2. ``bf16_normalized``: ``h * rms`` rounded to x's dtype, times the weight in x's dtype (two
   roundings; the row maximum then of bf16 values).
3. ``scale_by_reciprocal``: the scale ``amax * (1 / 448)``, ``1 / 448`` an fp32 division in the
   kernel, as the original's ``s * (1.0 / qtype_max)``.
4. ``config_tile_sum``: the sum of squares tile by tile with the production config's reduction
   tile and warps, the tile sums added in order, the row maximum over the config's tiles (a NaN inside
   one of them shows only on the GPU, where ``tl.max`` drops it against a number; the
   interpreter's numpy maximum keeps it), the last pass in the config's third tile (on the GPU
   a store's tile can shape the sum's register layout): the original's arithmetic complete
   (:func:`inkling_workbook.ports.rms_norm_quant.port.rms_norm_quant` has it, with its own passes).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl
from triton.language.extra import libdevice

from inkling_kernels import _backend
from inkling_workbook.ports.rms_norm_quant import port as P

NUM_WARPS = 4


@triton.jit
def step_kernel(
    x_ptr, w_ptr, res_ptr, ub_ptr, out_ptr, scale_ptr, eps, fp8_max, min_scale,
    H: tl.constexpr, RBLOCK: tl.constexpr, BLOCK: tl.constexpr, MBLOCK: tl.constexpr, QBLOCK: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_UB: tl.constexpr,
    RECIP_MEAN: tl.constexpr, BF16_NORM: tl.constexpr, RECIP_SCALE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([1], dtype=tl.float32)
    for start in tl.range(0, H, RBLOCK):  # RBLOCK: the whole row (steps 0-3) or the config's tile
        cols = start + tl.arange(0, RBLOCK)[None, :]
        h = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
        if HAS_RES:
            h = h + tl.load(res_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc = acc + tl.sum(h * h, axis=1)
    if RECIP_MEAN:
        mean = acc * (1.0 / H)
    else:
        mean = acc / H
    inv_rms = libdevice.rsqrt(mean + eps)[:, None]
    amax = tl.zeros([1], dtype=tl.float32)
    for start in tl.range(0, H, BLOCK):
        cols = start + tl.arange(0, BLOCK)[None, :]
        mask = cols < H
        h = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            h = h + tl.load(res_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        if BF16_NORM:
            n = ((h * inv_rms).to(w.dtype) * w).to(tl.float32)
        else:
            n = h * inv_rms * w.to(tl.float32)
        amax = P.nan_max(amax, P._tile_maxima(tl.where(mask, tl.abs(n), 0.0), BLOCK, MBLOCK))
    if HAS_UB:
        amax = P.nan_min(amax, tl.load(ub_ptr))
    if RECIP_SCALE:
        s = amax * (1.0 / fp8_max)
    else:
        s = amax / fp8_max
    s = P.nan_max(s, min_scale)
    tl.store(scale_ptr + row + tl.arange(0, 1), s)
    for start in tl.range(0, H, QBLOCK):
        cols = start + tl.arange(0, QBLOCK)[None, :]
        mask = cols < H
        h = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            h = h + tl.load(res_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(res_ptr + row * H + cols, h.to(res_ptr.dtype.element_ty), mask=mask)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        if BF16_NORM:
            n = ((h * inv_rms).to(w.dtype) * w).to(tl.float32)
        else:
            n = h * inv_rms * w.to(tl.float32)
        y = n / s[:, None]
        tl.store(out_ptr + row * H + cols, P.nan_min(P.nan_max(y, -fp8_max), fp8_max).to(tl.float8e4nv), mask=mask)


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    change: str  # what this step changes
    flags: tuple[bool, bool, bool, bool]  # RECIP_MEAN, BF16_NORM, RECIP_SCALE, CONFIG_TILE


STEPS = [
    Step(0, "naive", "textbook: one-tile sum, sum / H, fp32 h * rms * w, amax / 448", (False, False, False, False)),
    Step(1, "mean_by_reciprocal", "the mean as sum * fp32(1 / H)", (True, False, False, False)),
    Step(2, "bf16_normalized", "bf16(h * inv_rms) times the weight, in x's dtype", (True, True, False, False)),
    Step(3, "scale_by_reciprocal", "the scale as amax * (1 / 448), 1 / 448 divided in fp32", (True, True, True, False)),
    Step(4, "config_tile_sum", "the sum tile by tile in the config's tile, in order", (True, True, True, True)),
]  # fmt: skip
STEP_NAMES = [s.name for s in STEPS]


def run_step(name: str, x, weight, *, epsilon=1e-6, scale_ub=None, residual=None, out=None, config_rows=None):
    """Step ``name`` (compiled on CUDA, interpreted on CPU); the port's signature and outputs."""
    if name not in STEP_NAMES:
        raise ValueError(f"name must be one of {STEP_NAMES}, got {name!r}")
    M, H = P.check_args(x, weight, epsilon, scale_ub, residual, out)
    key_rows = P.check_config_rows(config_rows, M)
    result, scale = out if out is not None else P.empty_outputs(M, H, x.device)
    if M:
        recip_mean, bf16_norm, recip_scale, config_tile = STEPS[STEP_NAMES.index(name)].flags
        row = triton.next_power_of_2(H)
        cfg = P.launch_config(key_rows, H) if config_tile else P.LaunchConfig(row, min(row, 4096), NUM_WARPS)
        with P._interp_repairs(x.device):
            _backend.launch(
                step_kernel, (M,), x.device, x, weight, residual if residual is not None else x,
                scale_ub if scale_ub is not None else scale, result, scale, float(epsilon), P.FP8_MAX, P.MIN_SCALE,
                H=H, RBLOCK=cfg.RBLOCK, BLOCK=cfg.BLOCK, MBLOCK=cfg.MBLOCK or cfg.BLOCK, QBLOCK=cfg.QBLOCK or cfg.BLOCK,
                HAS_RES=residual is not None, HAS_UB=scale_ub is not None,
                RECIP_MEAN=recip_mean, BF16_NORM=bf16_norm, RECIP_SCALE=recip_scale, num_warps=cfg.num_warps,
            )  # fmt: skip
    return (result, scale) if residual is None else (result, scale, residual)


def step_fn(name: str):
    """``run_step`` bound to one step, named ``step_<name>`` (what portcheck reports and reruns)."""
    if name not in STEP_NAMES:
        raise ValueError(f"name must be one of {STEP_NAMES}, got {name!r}")
    return globals()[f"step_{name}"]


def step_naive(x, weight, **kwargs):
    return run_step("naive", x, weight, **kwargs)


def step_mean_by_reciprocal(x, weight, **kwargs):
    return run_step("mean_by_reciprocal", x, weight, **kwargs)


def step_bf16_normalized(x, weight, **kwargs):
    return run_step("bf16_normalized", x, weight, **kwargs)


def step_scale_by_reciprocal(x, weight, **kwargs):
    return run_step("scale_by_reciprocal", x, weight, **kwargs)


def step_config_tile_sum(x, weight, **kwargs):
    return run_step("config_tile_sum", x, weight, **kwargs)

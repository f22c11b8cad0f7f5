"""The second port step by step (notebook 09): from the first port's arithmetic to the original's,
one difference a step, each step a kernel checked by portcheck against the helion original.

Every step is the same naive kernel (:func:`step_kernel`: a 2-D grid of 8 x 256 tiles, masks on
every access, int64 offsets), specialized by three compile-time flags:

0. ``naive``: the first port's formula (``inkling_kernels._activation._silu_mul``: fp32
   ``g * sigmoid(g) * u``), then divided by the scale, then e4m3.
1. ``exp_div``: silu as the original computes it, ``g / (1 + libdevice.exp(-g))``, still fp32
   throughout.
2. ``bf16_intermediates``: silu rounded to x's dtype, the product in x's dtype (two roundings
   the original makes because ``torch.nn.functional.silu`` runs on its bf16 tile).
3. ``reciprocal``: times ``1 / scale`` instead of divided by it: the original's arithmetic
   complete (:func:`inkling_workbook.ports.silu_mul_fp8.port.silu_mul_fp8` has it, with its own tile).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from inkling_kernels import _backend
from inkling_kernels._activation import _silu_mul
from inkling_workbook.ports.silu_mul_fp8.port import OUT_DTYPE, check_args

BLOCK_M, BLOCK_N, NUM_WARPS = 8, 256, 4


@triton.jit
def step_kernel(
    x_ptr, scale_ptr, out_ptr, M, N, stride_x, stride_out,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EXP_DIV: tl.constexpr, ROUND_INTERMEDIATES: tl.constexpr, RECIPROCAL: tl.constexpr,
):  # fmt: skip
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    gate = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask)
    up = tl.load(x_ptr + rows[:, None] * stride_x + N + cols[None, :], mask=mask)
    if EXP_DIV:
        g = gate.to(tl.float32)
        silu = g / (libdevice.exp(-g) + 1.0)
        if ROUND_INTERMEDIATES:
            y = (silu.to(gate.dtype) * up).to(tl.float32)  # two roundings to x's dtype
        else:
            y = silu * up.to(tl.float32)
    else:
        y = _silu_mul(gate, up)  # the first port: fp32 g * sigmoid(g) * u
    scale = tl.load(scale_ptr)
    if RECIPROCAL:
        y = y * (1.0 / scale)
    else:
        y = y / scale
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(tl.float8e4nv), mask=mask)


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    change: str  # what this step changes
    flags: tuple[bool, bool, bool]  # EXP_DIV, ROUND_INTERMEDIATES, RECIPROCAL


STEPS = [
    Step(0, "naive", "the first port's arithmetic (fp32 g * sigmoid(g) * u) over the scale", (False, False, False)),
    Step(1, "exp_div", "silu as g / (1 + libdevice.exp(-g)), the original's decomposition", (True, False, False)),
    Step(2, "bf16_intermediates", "silu rounded to x's dtype, the product in x's dtype", (True, True, False)),
    Step(3, "reciprocal", "times 1 / scale (one division a program), not divided by it", (True, True, True)),
]  # fmt: skip
STEP_NAMES = [s.name for s in STEPS]


def run_step(name: str, x: torch.Tensor, scale: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Step ``name`` on ``x [..., 2N]`` (compiled on CUDA, interpreted on CPU)."""
    if name not in STEP_NAMES:
        raise ValueError(f"name must be one of {STEP_NAMES}, got {name!r}")
    M, N = check_args(x, scale, out)
    if out is None:
        out = torch.empty((*x.shape[:-1], N), dtype=OUT_DTYPE, device=x.device)
    if M == 0:
        return out
    x2d, out2d = x.view(-1, 2 * N), out.view(-1, N)
    exp_div, round_, rcp = STEPS[STEP_NAMES.index(name)].flags
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _backend.launch(step_kernel, grid, x.device, x2d, scale, out2d, M, N, x2d.stride(0), out2d.stride(0),
                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, EXP_DIV=exp_div, ROUND_INTERMEDIATES=round_, RECIPROCAL=rcp,
                    num_warps=NUM_WARPS)  # fmt: skip
    return out


def step_fn(name: str):
    """``run_step`` bound to one step, named ``step_<name>`` (what portcheck reports and reruns)."""
    if name not in STEP_NAMES:
        raise ValueError(f"name must be one of {STEP_NAMES}, got {name!r}")
    return globals()[f"step_{name}"]


def step_naive(x, scale, *, out=None):
    return run_step("naive", x, scale, out=out)


def step_exp_div(x, scale, *, out=None):
    return run_step("exp_div", x, scale, out=out)


def step_bf16_intermediates(x, scale, *, out=None):
    return run_step("bf16_intermediates", x, scale, out=out)


def step_reciprocal(x, scale, *, out=None):
    return run_step("reciprocal", x, scale, out=out)

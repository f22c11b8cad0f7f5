"""The second port (issue 31, notebook 09): vLLM's helion ``silu_mul_fp8`` in plain Triton, bit
for bit.

``out = e4m3(fp32(silu(gate) * up) * (1 / scale))`` for ``x = gate || up`` (``[..., 2N]``, the
two halves side by side), one fp32 ``scale`` for the whole tensor, e4m3fn out. The operation
order and the dtype of every intermediate are the original's
(:mod:`inkling_workbook.ports.silu_mul_fp8.helion`):

1. ``g = fp32(gate)``; ``silu = g / (1 + exp(-g))`` in fp32 with libdevice's ``exp``, then
   **rounded to x's dtype** (the original calls ``torch.nn.functional.silu`` on a bf16 tile);
2. ``silu * up`` **in x's dtype** (bf16 times bf16: a second rounding to bf16);
3. widened to fp32 and multiplied by ``1 / scale`` (one fp32 division a program, not one an
   element);
4. converted to e4m3fn by Triton's cast: round to nearest even, saturating at +-448
   (``cvt.rn.satfinite`` on the GPU; no clamp in the source), every NaN 0x7F.

The kernel (:func:`silu_mul_fp8_kernel`) reads each row's gate and up slices with two contiguous
loads, writes one byte an output, and runs on a flat 1-D grid with the column tiles fastest; the
tile is :func:`launch_config`'s. It runs compiled on CUDA tensors and in Triton's interpreter on
CPU tensors (:func:`inkling_kernels._backend.launch`), the same source lines either way. No PDL.

``python -m portcheck`` checks it against the original (``docs/portcheck.md``)::

    python -m portcheck inkling_workbook.ports.silu_mul_fp8.helion:silu_mul_fp8_helion \\
        inkling_workbook.ports.silu_mul_fp8.port:silu_mul_fp8 \\
        --cases inkling_workbook.ports.silu_mul_fp8.port:cpu_cases \\
        --reference inkling_workbook.ports.silu_mul_fp8.helion:reference
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

import portcheck
from inkling_kernels import _backend
from inkling_kernels._backend import INT32_LIMIT
from inkling_kernels._validate import FLOAT_DTYPES, check_no_grad, check_no_overlap, check_same_device, check_tensor
from inkling_kernels.silu_and_mul import launch_config as _silu_launch_config

OUT_DTYPE = torch.float8_e4m3fn


@triton.jit
def _silu_mul_scaled(gate, up, inv_scale):
    """The original's arithmetic, operation for operation (see the module docstring)."""
    g = gate.to(tl.float32)
    silu = (g / (libdevice.exp(-g) + 1.0)).to(gate.dtype)  # rounded to x's dtype
    prod = silu * up  # in x's dtype
    return (prod.to(tl.float32) * inv_scale).to(tl.float8e4nv)


@triton.jit(do_not_specialize=["M"])
def silu_mul_fp8_kernel(
    x_ptr, scale_ptr, out_ptr, M, stride_x, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    INT64: tl.constexpr,
):  # fmt: skip
    N_TILES: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    rows = (pid // N_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = (pid % N_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = None  # compiled only where a tail exists
    if not EVEN_N:
        mask = (cols < N)[None, :]
    if not EVEN_M:
        mask = (rows < M)[:, None] if EVEN_N else (rows < M)[:, None] & mask
    gate_ptrs = x_ptr + rows[:, None] * stride_x + cols[None, :]
    gate = tl.load(gate_ptrs, mask=mask)
    up = tl.load(gate_ptrs + N, mask=mask)
    inv_scale = 1.0 / tl.load(scale_ptr)
    y = _silu_mul_scaled(gate, up, inv_scale)
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y, mask=mask)


@dataclass(frozen=True)
class LaunchConfig:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int

    @property
    def label(self) -> str:
        return f"{self.BLOCK_M}x{self.BLOCK_N}/{self.num_warps}w"


#: From this many outputs (M * N, above 1024 rows) a program takes 4096 outputs with 4 warps.
LARGE_OUTPUTS = 1 << 22


def launch_config(M: int, N: int) -> LaunchConfig:
    """The port's tile: the package ``silu_and_mul`` heuristic's (measured on the H200 for the same
    ``[M, 2N]`` bf16 read; one row a program up to 1024 rows, about 2048 outputs a program above),
    changed in three places measured for this kernel's one-byte output on the H200, warm and cold
    L2 (``data/tuning_log.md``, experiments AG and AH):

    * Up to 64 rows, where the heuristic takes 1024 columns with 8 warps and a column mask
      (1024 does not divide N, e.g. N = 1536): the widest power of two up to 1024 that divides N,
      with 4 warps. 1-3% less time at 16, 32 and 64 x 1536 (one cold timing 0.4% more).
    * 65-256 rows with 1024 columns: 8 warps instead of 4. 10-16% less time cold at 128 and
      256 x 3072, 0.5-1% warm; at 512 rows 8 warps cost 2-5%, so it stays at 4.
    * Above 1024 rows from :data:`LARGE_OUTPUTS` outputs: the same column tile with 4096 outputs a
      program and 4 warps (32 outputs a thread; the heuristic's 2048 at 8 warps gives 8). 8-13% less
      time at 32768 x 768-3072, 8192 x 3072, and warm 2048 x 3072 and 8192 x 768; 1-4% more at
      8192 x 1536 and cold 2048 x 3072 and 8192 x 768. Below 4M outputs the larger tile lost 2-31%.
    """
    cfg = _silu_launch_config(M, N)
    bm, bn, warps = cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps
    if M <= 64 and bn == 1024 and N % 1024:
        dividing = next((b for b in (512, 256, 128) if N % b == 0), None)
        if dividing is not None:
            bn, warps = dividing, 4
    elif 64 < M <= 256 and bn == 1024:
        warps = 8
    elif M > 1024 and M * N >= LARGE_OUTPUTS:
        bm, warps = max(1, 4096 // bn), 4
    return LaunchConfig(bm, bn, warps)


def check_args(x, scale, out) -> tuple[int, int]:
    """The checks of :func:`silu_mul_fp8` (shared with the helion original); returns (rows, N)."""
    check_tensor("x", x, dtypes=FLOAT_DTYPES)
    if x.dim() < 1:
        raise ValueError("x must have at least 1 dimension ([..., 2N])")
    two_n = x.shape[-1]
    if two_n % 2 or two_n == 0:
        raise ValueError(f"x's last dimension must be even and at least 2 (gate || up), got {two_n}")
    if x.stride(-1) != 1 and two_n > 1:
        raise ValueError(f"x must have unit stride in its last dimension, got strides {tuple(x.stride())}")
    try:
        rows2d = x.view(-1, two_n)
    except RuntimeError as e:
        raise ValueError(f"x must be viewable as [-1, {two_n}] (rows at one stride), got strides {x.stride()}") from e
    if rows2d.shape[0] > 1 and rows2d.stride(0) < two_n:
        raise ValueError(f"x rows overlap: row stride {rows2d.stride(0)} < row length {two_n}")
    check_tensor("scale", scale, dtypes=(torch.float32,))
    check_same_device("x", x, "scale", scale)
    if scale.numel() != 1:
        raise ValueError(f"scale must hold one element (a per-tensor scale), got shape {tuple(scale.shape)}")
    n = two_n // 2
    if out is not None:
        check_tensor("out", out, dtypes=(OUT_DTYPE,))
        check_same_device("x", x, "out", out)
        want = (*x.shape[:-1], n)
        if tuple(out.shape) != want:
            raise ValueError(f"out must have shape {want}, got {tuple(out.shape)}")
        try:
            out2d = out.view(-1, n)
        except RuntimeError as e:
            raise ValueError(f"out must be viewable as [-1, {n}], got strides {out.stride()}") from e
        if n > 1 and out2d.stride(1) != 1 or out2d.shape[0] > 1 and out2d.stride(0) < n:
            raise ValueError(f"out must have unit stride in its last dimension and rows apart, got {out.stride()}")
        check_no_overlap("out", out2d, "x", rows2d)
    check_no_grad(x=x, scale=scale)
    return rows2d.shape[0], n


def silu_mul_fp8(
    x: torch.Tensor, scale: torch.Tensor, *, out: torch.Tensor | None = None, config: LaunchConfig | None = None
) -> torch.Tensor:
    """``x [..., 2N]`` (bf16, fp16 or fp32; gate || up) and a one-element fp32 ``scale`` ->
    e4m3fn ``[..., N]``, bit for bit the helion original. ``out`` (optional) is written and
    returned; ``config`` overrides :func:`launch_config`."""
    M, N = check_args(x, scale, out)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig or None, got {type(config).__name__}")
    if out is None:
        out = torch.empty((*x.shape[:-1], N), dtype=OUT_DTYPE, device=x.device)
    if M == 0:
        return out
    x2d, out2d = x.view(-1, 2 * N), out.view(-1, N)
    cfg = config or launch_config(M, N)
    int64 = max(M * x2d.stride(0), M * out2d.stride(0)) >= INT32_LIMIT
    grid = (triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N),)
    _backend.launch(
        silu_mul_fp8_kernel, grid, x.device, x2d, scale, out2d, M, x2d.stride(0), out2d.stride(0),
        N=N, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, EVEN_M=M % cfg.BLOCK_M == 0, EVEN_N=N % cfg.BLOCK_N == 0,
        INT64=int64, num_warps=cfg.num_warps,
    )  # fmt: skip
    return out


# ---- portcheck's case matrices ------------------------------------------------------------------

#: Scales: 1, a power of two (its reciprocal exact), one whose reciprocal rounds, and one small
#: enough that most outputs saturate at +-448.
SCALES = (1.0, 0.25, 0.37, 0.004)


def _out(args: tuple, kwargs: dict) -> torch.Tensor:
    x = args[0]
    return torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=OUT_DTYPE, device=x.device)


def _case(shape, dtype, value_class, stride, scale, seed, prefix="") -> portcheck.Case:
    def make(seed, device, shape=shape, dtype=dtype, value_class=value_class, stride=stride, scale=scale):
        x = portcheck.laid_out(portcheck.values(shape, dtype, value_class, seed), stride, device)
        return (x, torch.tensor([scale], dtype=torch.float32, device=device)), {}

    dt = str(dtype).removeprefix("torch.")
    name = f"{prefix}{'x'.join(map(str, shape))} {dt} {value_class} {stride} scale={scale} seed={seed}"
    return portcheck.Case(name, make=make, seed=seed, value_class=value_class, stride=stride, out=_out)


#: The scale of the result-ties cases: 1/7 rounds up in fp32 by 0.75 of its last place, enough to
#: move ``y * (1/7)`` off an exact ``y / 7``.
TIES_SCALE = 7.0


def result_ties(shape, seed: int) -> torch.Tensor:
    """bf16 ``x [M, 2N]`` whose exact results ``y / 7`` lie halfway between two e4m3 values at
    half the columns: there ``gate = 32`` (``silu(32)`` is 32 in fp32) and ``up = 7 t / 32`` for an
    e4m3 tie ``t = +-(1 + (2m + 1) / 16) * 2**e`` (m = 3..7: mantissas of 1.44 and more, where
    ``y * fp32(1/7)`` rounds to the fp32 value above ``t``), every value exact in bf16. The other
    columns are ``randn * 3``. Only at such ties can dividing by the scale and multiplying by its
    reciprocal round to different e4m3 values; random inputs almost never land on one."""
    gen = torch.Generator().manual_seed(seed)
    m_rows, two_n = shape
    n = two_n // 2
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(torch.bfloat16)
    cols = torch.randperm(n, generator=gen)[: max(1, n // 2)]
    k = (m_rows, cols.numel())
    mant = 1 + (2 * torch.randint(3, 8, k, generator=gen, dtype=torch.float64) + 1) / 16
    t = mant * torch.exp2(torch.randint(-5, 7, k, generator=gen).double())
    t = torch.where(torch.rand(k, generator=gen) < 0.5, -t, t)
    x[:, cols] = 32.0
    x[:, n + cols] = (TIES_SCALE * t / 32).to(torch.bfloat16)
    return x


def _ties_case(shape, seed, prefix="") -> portcheck.Case:
    def make(seed, device, shape=shape):
        x = result_ties(shape, seed).to(device)
        return (x, torch.tensor([TIES_SCALE], dtype=torch.float32, device=device)), {}

    name = f"{prefix}{'x'.join(map(str, shape))} bfloat16 result_ties contiguous scale={TIES_SCALE} seed={seed}"
    return portcheck.Case(name, make=make, seed=seed, value_class="ties", out=_out)


def cases(ms, ns, value_classes=portcheck.VALUE_CLASSES, prefix: str = "") -> list[portcheck.Case]:
    """``x [M, 2N]`` for every M, N: bf16 in every value class, contiguous and row-padded, the
    scales in rotation; fp16 and fp32 (random and ties) at the last shape; a 3-D ``[2, M, 2N]``
    input at the first; :func:`result_ties` at the first and the last."""
    out, seed = [], 0
    shapes = [(m, 2 * n) for m in ms for n in ns]
    for shape in shapes:
        for vc in value_classes:
            for stride in portcheck.STRIDES:
                out.append(_case(shape, torch.bfloat16, vc, stride, SCALES[seed % len(SCALES)], seed, prefix))
                seed += 1
    for dtype in (torch.float16, torch.float32):
        for vc in ("random", "ties"):
            out.append(_case(shapes[-1], dtype, vc, "contiguous", SCALES[seed % len(SCALES)], seed, prefix))
            seed += 1
    for scale in (0.37, 0.004):
        out.append(_case((2, *shapes[0]), torch.bfloat16, "random", "contiguous", scale, seed, prefix))
        seed += 1
    for shape in (shapes[0], shapes[-1]):
        out.append(_ties_case(shape, seed, prefix))
        seed += 1
    return out


def cpu_cases() -> list[portcheck.Case]:
    """The interpreter-sized matrix: M = 1 and 3 at N = 384 and an odd N = 200 (48 cases)."""
    return cases((1, 3), (384, 200))


def gpu_cases() -> list[portcheck.Case]:
    """Decode to prefill, the MoE widths and an odd one, for ``--device cuda`` (every M picks a
    config the recorded table holds)."""
    return cases((1, 3, 16, 64, 128, 4096), (768, 1536, 3072, 1000))


def gpu_quick_cases() -> list[portcheck.Case]:
    """A smoke-sized GPU matrix (``silu-mul-fp8 --quick``, the GPU job's smoke): M = 1, 16, 128 and
    512 at N = 768 and 3072, random and NaN/Inf, with the fp16, fp32, 3-D and ties cases
    :func:`cases` adds (40 cases; the full matrix, 248, runs in the GPU test suite and the
    publishing run). Its shapes pick every table entry the quick sweep's shapes pick (a test holds
    the two together), so the check, not only the timing, sees each config the smoke times."""
    return cases((1, 16, 128, 512), (768, 3072), value_classes=("random", "nan_inf"))

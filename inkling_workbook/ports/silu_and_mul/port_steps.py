"""The port of the interleaved ``silu_and_mul`` step by step: from a naive Triton kernel to the
package's, one technique a step, each step a real kernel with its own launcher, every one timed
against the original it replaces (helion's kernel with the config production ran it with).

Every step computes with :func:`inkling_kernels._activation._silu_mul` (the one operation
order) and multiplies the optional per-row weight last, then rounds once at the store, so every
step is bitwise equal to :func:`inkling_kernels.silu_and_mul` (``tests/test_port_steps.py``):
the techniques change how fast the bits arrive, never the bits. The last step is the package's
kernel in technique (notebook 02 shows the package's own source for it).

The original (row ``helion``, step -1, timed when helion is installed): helion's kernel
(:func:`helion_original.silu_and_mul_helion`) with the sm_90 table's config where the table has the
width ``2N``, else the fixed 1x256 tile (:func:`helion_config`); its row names the config.

Steps (interleaved layout ``g0 u0 g1 u1 ...``):

0. ``naive``: a 2-D grid of 8x256 tiles (axis 0 = row tiles, so neighbouring programs take
   different rows), gate and up gathered with stride 2, row and column masks on every access,
   int64 offsets always, the width ``N`` a runtime value.
1. ``slab``: one contiguous load of ``2*BLOCK_N`` elements a row, split in registers
   (``tl.reshape`` + ``tl.split``) instead of two stride-2 gathers.
2. ``static_masks``: ``N`` a compile-time constant and ``EVEN_M``/``EVEN_N`` flags: a mask
   the tile never needs is not compiled at all.
3. ``block_m_1``: one row a program up to M = 1024, so the grid covers M exactly (no row mask)
   and even one token is spread over N/256 programs.
4. ``n_fastest``: a flat 1-D grid with the column tiles fastest: neighbouring programs stream
   consecutive slices of one row.
5. ``int64_switch``: 32-bit offsets unless ``M * stride`` reaches 2**31 (a constexpr flag).
6. ``heuristic``: the tile and warps of :func:`inkling_kernels.silu_and_mul.launch_config`
   (the package kernel's technique, complete).

:func:`measure_steps` times helion, every step and the package kernel with the project's method
(:mod:`inkling_workbook.measure.timing`: fixed-count CUDA graphs, warm clocks, passes interleaved) and
writes ``data/port_steps_<gpu>.csv`` and ``.json``; each row's ``vs_helion`` is helion's median over
the row's (above 1: faster than the original).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._activation import _silu_mul
from inkling_kernels._backend import INT32_LIMIT
from inkling_kernels.silu_and_mul import launch_config, silu_and_mul
from inkling_workbook.measure import provenance
from inkling_workbook.ports.silu_and_mul import helion_original

NAIVE_BLOCK_M = 8  # rows a program in steps 0-2 (and above M = 1024 in steps 3-5)
BLOCK_N = 256  # columns a program in steps 0-5
NUM_WARPS = 4  # steps 0-5
ONE_ROW_MAX_M = 1024  # steps 3-5: one row a program up to this M


# ---- step 0: naive --------------------------------------------------------------------------


@triton.jit(do_not_specialize=["M", "N"])
def step0_naive_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, N, stride_in, stride_out,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)  # axis 0 varies fastest: neighbouring programs take other rows
    pid_n = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    base = gateup_ptr + rows[:, None] * stride_in
    gate = tl.load(base + 2 * cols[None, :], mask=mask)  # every other element: a stride-2 gather
    up = tl.load(base + 2 * cols[None, :] + 1, mask=mask)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + rows, mask=rows < M)
        y = y * w.to(tl.float32)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


# ---- step 1: contiguous slab, split in registers --------------------------------------------


@triton.jit(do_not_specialize=["M", "N"])
def step1_slab_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, N, stride_in, stride_out,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)  # the g/u pairs of these columns
    row_ok = (rows < M)[:, None]
    x = tl.load(gateup_ptr + rows[:, None] * stride_in + cols2[None, :], mask=row_ok & (cols2 < 2 * N)[None, :])
    gate, up = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N, 2)))
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + rows, mask=rows < M)
        y = y * w.to(tl.float32)[:, None]
    out_mask = row_ok & (cols < N)[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=out_mask)


# ---- steps 2-3: static masks (step 3 changes only the launcher: BLOCK_M = 1) -------------------


@triton.jit
def _slab_tile(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out, pid_m, pid_n,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, INT64: tl.constexpr,
):  # fmt: skip
    """One ``[BLOCK_M, BLOCK_N]`` output tile: slab load, register split, static masks."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)
    # static masks: None (not compiled at all) where the tile divides the shape
    in_mask = None
    out_mask = None
    if not EVEN_N:
        in_mask = (cols2 < 2 * N)[None, :]
        out_mask = (cols < N)[None, :]
    if not EVEN_M:
        row_ok = (rows < M)[:, None]
        in_mask = row_ok if EVEN_N else row_ok & in_mask
        out_mask = row_ok if EVEN_N else row_ok & out_mask
    x = tl.load(gateup_ptr + rows[:, None] * stride_in + cols2[None, :], mask=in_mask)
    gate, up = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N, 2)))
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        if EVEN_M:
            w = tl.load(weight_ptr + rows, eviction_policy="evict_last")
        else:
            w = tl.load(weight_ptr + rows, mask=rows < M, eviction_policy="evict_last")
        y = y * w.to(tl.float32)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit(do_not_specialize=["M"])
def step2_static_masks_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
):  # fmt: skip
    # still the 2-D grid with the row tiles fastest, still int64 offsets always
    _slab_tile(
        gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out, tl.program_id(0), tl.program_id(1),
        N, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N, HAS_WEIGHT, True,
    )  # fmt: skip


# ---- steps 4-6: flat grid, N tiles fastest (step 5 adds the int64 switch, step 6 the heuristic) --


@triton.jit(do_not_specialize=["M"])
def step4_flat_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, INT64: tl.constexpr,
):  # fmt: skip
    N_TILES: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    _slab_tile(
        gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out, pid // N_TILES, pid % N_TILES,
        N, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N, HAS_WEIGHT, INT64,
    )  # fmt: skip


# ---- launchers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    technique: str  # what this step adds
    expect: str  # what it should buy


STEPS = [
    Step(0, "naive", "2-D grid (row tiles fastest), stride-2 gathers, masks everywhere, int64 offsets, 8x256/4w",
         "the baseline: correct bits, half of every memory transaction wasted by the gathers"),
    Step(1, "slab", "one contiguous 2*BLOCK_N slab a row, split in registers (tl.reshape + tl.split)",
         "full-width loads: most of the gap to the bandwidth ceiling at large M"),
    Step(2, "static_masks", "N constexpr, EVEN_M / EVEN_N flags: masks compiled only where a tail exists",
         "fewer instructions a tile; vectorized stores where the mask vanishes"),
    Step(3, "block_m_1", "one row a program up to M = 1024 (grid covers M, no row mask)",
         "decode: no wasted rows in a tile, more programs for one token"),
    Step(4, "n_fastest", "flat 1-D grid, column tiles fastest",
         "neighbouring programs share DRAM pages and L2 lines of one row"),
    Step(5, "int64_switch", "32-bit offsets unless M * stride >= 2**31",
         "cheaper index math in every program"),
    Step(6, "heuristic", "launch_config: tile width and warps per M bucket and N (the package kernel's technique)",
         "the last few percent: wide tiles and enough rows a program at prefill, small tiles at decode"),
]  # fmt: skip
STEP_NAMES = [s.name for s in STEPS]
HELION = "helion"  # the original's row, before the ladder (step -1)
HELION_STEP = -1


def helion_config(N: int, weighted: bool = False) -> str:
    """The config production ran helion with at width ``N``: ``"sm90_table"`` where the sm_90
    table has ``2N``, else ``"fixed"`` (the 1x256 tile, 4 warps)."""
    return "sm90_table" if helion_original.sm90_config_index(2 * N, weighted) is not None else "fixed"


def run_helion(
    gateup: torch.Tensor, topk_weights: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """helion's original (interleaved) with :func:`helion_config` for the shape."""
    config = helion_config(gateup.shape[1] // 2, topk_weights is not None)
    return helion_original.silu_and_mul_helion(gateup, topk_weights, interleaved=True, out=out, config=config)


def _tile(name: str, M: int, N: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of a step on a shape."""
    if name == "heuristic":
        cfg = launch_config(M, N)
        return cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps
    block_n = min(BLOCK_N, triton.next_power_of_2(N))
    one_row = STEP_NAMES.index(name) >= STEP_NAMES.index("block_m_1") and M <= ONE_ROW_MAX_M
    return (1 if one_row else NAIVE_BLOCK_M), block_n, NUM_WARPS


def config_label(name: str, M: int, N: int, weighted: bool = False) -> str:
    """How a row names its config: a step's tile (``8x256/4w``), ``package <tile>``, or helion's
    (``helion sm90 table cfg 3``, ``helion fixed 1x256/4w``)."""
    if name == HELION:
        return helion_original.config_label(helion_config(N, weighted), 2 * N, weighted)
    if name in ("package", CONTROL):
        cfg = launch_config(M, N)
        return f"package {cfg.BLOCK_M}x{cfg.BLOCK_N}/{cfg.num_warps}w"
    bm, bn, warps = _tile(name, M, N)
    return f"{bm}x{bn}/{warps}w"


def run_step(
    name: str, gateup: torch.Tensor, topk_weights: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Step ``name`` on ``gateup`` (interleaved ``[M, 2N]``, unit stride within a row), compiled
    on CUDA, interpreted on CPU; allocates ``out`` (dtype of ``gateup``) unless given."""
    if name not in STEP_NAMES:
        raise ValueError(f"name must be one of {STEP_NAMES}, got {name!r}")
    if gateup.ndim != 2 or gateup.shape[1] % 2 or gateup.stride(1) != 1:
        raise ValueError("gateup must be [M, 2N] with unit stride within a row")
    M, N = gateup.shape[0], gateup.shape[1] // 2
    if out is None:
        out = torch.empty((M, N), dtype=gateup.dtype, device=gateup.device)
    if M == 0 or N == 0:
        return out
    bm, bn, warps = _tile(name, M, N)
    has_w = topk_weights is not None
    w = topk_weights if has_w else gateup
    s_in, s_out = gateup.stride(0), out.stride(0)
    dev = gateup.device
    step = STEP_NAMES.index(name)
    if step <= 1:
        kernel = step0_naive_kernel if step == 0 else step1_slab_kernel
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        _backend.launch(kernel, grid, dev, gateup, w, out, M, N, s_in, s_out, BLOCK_M=bm, BLOCK_N=bn,
                        HAS_WEIGHT=has_w, num_warps=warps)  # fmt: skip
        return out
    even = {"EVEN_M": M % bm == 0, "EVEN_N": N % bn == 0}
    if step <= 3:
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        _backend.launch(step2_static_masks_kernel, grid, dev, gateup, w, out, M, s_in, s_out, N=N, BLOCK_M=bm,
                        BLOCK_N=bn, HAS_WEIGHT=has_w, num_warps=warps, **even)  # fmt: skip
        return out
    int64 = True if step == 4 else max(M * s_in, M * s_out) >= INT32_LIMIT
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _backend.launch(step4_flat_kernel, grid, dev, gateup, w, out, M, s_in, s_out, N=N, BLOCK_M=bm, BLOCK_N=bn,
                    HAS_WEIGHT=has_w, INT64=int64, num_warps=warps, **even)  # fmt: skip
    return out


def implementations(helion: bool | None = None) -> dict[str, Callable]:
    """name -> fn(gateup, weights) -> out: helion's original (when ``helion``, by default when it
    is installed), every step, then the package kernel (PDL off)."""
    helion = helion_original.available() if helion is None else helion
    impls: dict[str, Callable] = {HELION: lambda x, w: run_helion(x, w)} if helion else {}
    impls |= {s.name: (lambda x, w, s=s.name: run_step(s, x, w)) for s in STEPS}
    impls["package"] = lambda x, w: silu_and_mul(x, w, interleaved=True, enable_pdl=False)
    return impls


#: The A/A control: the package kernel timed a second time, in a graph and an output buffer of its
#: own, in the same passes. The same code, so any gap between ``package`` and ``CONTROL`` is the
#: method's (graph, buffer placement), the smallest difference between two steps worth reading.
CONTROL = "package_again"


# ---- measurement ------------------------------------------------------------------------------

#: (M, N): decode (one token, 16 tokens), prefill, and N = 768 where grid order and offsets matter more.
SHAPES = [(1, 3072), (16, 3072), (4096, 3072), (49152, 3072), (49152, 768)]


def row(step: str, M: int, N: int, t, sm_clock_mhz=None, helion_us: float | None = None) -> dict:
    """One CSV row: the step (-1 for helion, ``len(STEPS)`` for the package), the shape, its config,
    the columns of its timing ``t`` (timing.Timing) and ``vs_helion``: ``helion_us`` (helion's median
    at this shape, same passes) over this row's median, empty where helion was not timed."""
    from inkling_workbook.measure.bench import silu_bytes

    index = HELION_STEP if step == HELION else STEP_NAMES.index(step) if step in STEP_NAMES else len(STEPS)
    index += step == CONTROL
    return {
        "step": index,
        "impl": step,
        "M": M,
        "N": N,
        "layout": "il",
        "config": config_label(step, M, N),
        "l2": "warm",
        **t.columns(silu_bytes(M, N, False), 4),
        "vs_helion": None if helion_us is None else round(helion_us / t.median_us, 4),
        "sm_clock_mhz": sm_clock_mhz,
    }


def time_steps(shapes=SHAPES, names: list[str] | None = None, passes: int | None = None) -> list[dict]:
    """Time ``names`` (default: helion when installed, every step and the package; :data:`CONTROL`
    by name) on ``shapes`` with the project's method: one :class:`timing.GraphTimer` per
    implementation on the same buffers (warm L2), passes interleaved across implementations
    (:func:`timing.time_interleaved`; decode shapes 3 passes, others 2 unless ``passes`` is given);
    each row's ``vs_helion`` from the same passes. GPU only; call :func:`timing.warm_clocks` first."""
    from inkling_workbook.measure import timing

    impls = implementations()
    names = names or list(impls)
    impls[CONTROL] = impls["package"]  # named only: the same function, a graph and an output of its own
    rows = []
    for M, N in shapes:
        x = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
        n_passes = passes or (timing.DECODE_PASSES if M <= timing.DECODE_MAX_M else timing.OTHER_PASSES)
        timings = timing.time_calls({k: lambda fn=impls[k], x=x: fn(x, None) for k in names}, n_passes)
        clock = provenance.gpu_state().get("sm_clock_mhz")
        helion_us = timings[HELION].median_us if HELION in timings else None
        rows += [row(k, M, N, timings[k], clock, helion_us) for k in names]
    return rows


def measure_steps(out: str | Path | None = None, shapes=SHAPES, command=None) -> tuple[Path, Path]:
    """helion (when installed), every step and the package kernel on :data:`SHAPES`, warm L2 ->
    ``data/port_steps_<gpu>.csv`` and ``.json`` (provenance, method, steps). About a minute on an
    H200, compiles included."""
    from inkling_workbook.measure import timing

    timing.require_gpu()
    out = Path(out) if out else provenance.REPO_ROOT / "data" / f"port_steps_{provenance.device_slug()}.csv"
    meta = provenance.collect(command)
    meta["clock_warmup"] = timing.warm_clocks()
    meta["timing"] = {
        "method": "inkling_workbook.measure.timing: GraphTimer (>= 100 calls, >= 1 ms a replay), time_interleaved",
        "rounds": timing.ROUNDS,
        "decode_passes": timing.DECODE_PASSES,
        "other_passes": timing.OTHER_PASSES,
        "decode_max_m": timing.DECODE_MAX_M,
        "l2": "warm (the same buffers every call)",
        "output_policy": "every implementation allocates its output",
        "spread": "lowest and highest pass median",
    }
    helion = helion_original.available()
    meta["helion"] = {
        "timed": helion,
        "config": "production's for the shape: the sm_90 table where it has 2N, else the fixed 1x256/4w tile",
        "vs_helion": "helion's median over the row's, same passes (above 1: faster than helion)",
    }
    if not helion:
        meta["helion"]["why_not"] = helion_original.INSTALL_HINT
    original = {"index": HELION_STEP, "name": HELION, "expect": "the original the port replaces",
                "technique": f"helion {helion_original.HELION_VERSION} original, production config"}  # fmt: skip
    meta["steps"] = ([original] if helion else []) + [s.__dict__ for s in STEPS]
    meta["steps"] += [{"index": len(STEPS), "name": "package", "technique": "inkling_kernels.silu_and_mul, PDL off",
                       "expect": ""},
                      {"index": len(STEPS) + 1, "name": CONTROL, "technique": "the package again: its own graph "
                       "and output, the same passes", "expect": "a tie with package: the A/A control"}]  # fmt: skip
    meta["shapes"] = [list(s) for s in shapes]
    rows = time_steps(shapes, names=[*implementations(helion), CONTROL])
    meta["gpu_state_after"] = provenance.gpu_state()
    return timing.write_records(rows, meta, out)

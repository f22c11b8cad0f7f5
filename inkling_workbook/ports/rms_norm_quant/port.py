"""The third port (notebook 10): vLLM's helion ``rms_norm_dynamic_per_token_quant`` (e4m3) in plain
Triton, bit for bit.

Per row ``x [H]`` (bf16; ``residual`` optional, added in fp32 and written back in bf16):
``inv_rms = rsqrt(sum(h * h) * fp32(1 / H) + eps)``, ``n = bf16(h * inv_rms) * weight`` (a bf16
product), ``s = max(min(amax |n|, scale_ub) * (1 / 448), 1 / (448 * 512))`` (fp32, stored to
``scale``), ``result = e4m3(clamp(n / s, -448, 448))``. The operation order and the dtype of every
intermediate are the original's (:mod:`inkling_workbook.ports.rms_norm_quant.helion`); so is
**the order of the sum of squares**: ``tl.sum`` over tiles of the production config's reduction
tile, the tile sums added to an fp32 accumulator one after another. A sum over the row in one
tile rounds differently (notebook 10: where the interpreter sees it, where only the GPU can).

The kernel (:func:`rms_norm_quant_kernel`) runs one program a row. The reduction pass loads
``[1, RBLOCK]`` tiles as the original does (the tile and the warps from the config vLLM picks,
:func:`launch_config`); when the row fits one tile of the other passes (``H <= 8192``) the row is
loaded once more and kept in registers for the maximum (the original reads it three times), and
when the reduction tile is that tile too the row is read once in all. The quantization works
from those registers too, unless the config's third tile is narrower than the row: then it
reads the row again in that tile, as the original does. A store of the whole row's e4m3 bytes
would give the row's tile 16 elements a thread, and Triton carries that layout back to the sum,
whose tree in the original adds 8 a thread (``tests/test_rms_norm_quant_port.py`` compiles every
config of the table for sm_90 and compares the summed tiles' layouts).
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
from inkling_kernels._validate import check_no_grad, check_same_device, check_tensor
from inkling_workbook.ports.rms_norm_quant import interp, sum_order, table
from inkling_workbook.ports.rms_norm_quant.formats import FP8_MAX, MIN_SCALE, OUT_DTYPE

__all__ = ["FP8_MAX", "MIN_SCALE", "OUT_DTYPE", "rms_norm_quant", "launch_config", "cpu_cases", "gpu_cases"]

IN_DTYPES = (torch.bfloat16, torch.float16)
MAX_ROW_TILE = 8192  # rows up to this width stay in registers between the passes


@triton.jit
def _normalized(h, inv_rms, w):
    """``bf16(h * inv_rms) * weight`` in the input's dtype (two roundings, as the original)."""
    return (h * inv_rms).to(w.dtype) * w


@triton.jit
def nan_max(a, b):
    """``a`` where ``a > b`` or ``a`` is NaN, else ``b``: Inductor's ``maximum``, which helion emits
    for ``torch.maximum`` and ``clamp(min=)``. Not ``tl.maximum``: on the GPU that is ``max.f32``,
    which returns the other operand for a NaN (so does Triton 3.9's interpreter, numpy's ``fmax``;
    3.6's uses numpy's ``maximum``, which keeps the NaN, and cannot tell the two apart)."""
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def nan_min(a, b):
    """Inductor's ``minimum`` (``clamp(max=)``): ``a`` where ``a < b`` or ``a`` is NaN, else ``b``."""
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _tile_maxima(a, BLOCK: tl.constexpr, MBLOCK: tl.constexpr):
    """The row maximum of ``a`` (``[1, BLOCK]``, masked lanes 0) as the original takes it: ``tl.max``
    inside each of its ``MBLOCK``-column tiles (``max.f32`` on the GPU, numpy's ``nanmax`` in the
    interpreter: a NaN loses to a number),
    the tiles' maxima combined by :func:`nan_max` (Inductor's ``maximum``: a NaN wins). A row whose
    one original tile is all NaN has a NaN maximum; over one wider tile its NaNs would lose to the
    masked zeros. Returns ``[1]``."""
    if MBLOCK >= BLOCK:  # one tile of the original's covers the row's (an else, not an early
        m = tl.max(a, axis=1)  # return: the compiler would build the reshape below it too)
    else:
        sub = tl.max(tl.reshape(a, [BLOCK // MBLOCK, MBLOCK]), axis=1)
        m = tl.reshape(tl.reduce(sub, 0, nan_max, keep_dims=True), [1])
    return m


@triton.jit
def _quantized(n, s, fp8_max):
    """``e4m3(clamp(n / s, -448, 448))``, the clamps NaN-propagating as the original's (the cast then
    writes 0x7F for a NaN)."""
    y = n.to(tl.float32) / s
    return nan_min(nan_max(y, -fp8_max), fp8_max).to(tl.float8e4nv)


@triton.jit(do_not_specialize=["eps"])
def rms_norm_quant_kernel(
    x_ptr, w_ptr, res_ptr, ub_ptr, out_ptr, scale_ptr, stride_x, stride_r, stride_o, eps, fp8_max, min_scale,
    H: tl.constexpr, RBLOCK: tl.constexpr, BLOCK: tl.constexpr, HAS_RES: tl.constexpr, HAS_UB: tl.constexpr,
    INT64: tl.constexpr, MBLOCK: tl.constexpr, QBLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    if INT64:
        row = row.to(tl.int64)
    x_row = x_ptr + row * stride_x
    r_row = res_ptr + row * stride_r
    # pass 1: the sum of squares in the original's order: a tl.sum a [1, RBLOCK] tile, the tile
    # sums added to the accumulator in order
    acc = tl.zeros([1], dtype=tl.float32)
    for start in tl.static_range(0, H, RBLOCK):
        cols = start + tl.arange(0, RBLOCK)[None, :]
        h = tl.load(x_row + cols, mask=cols < H, other=0.0).to(tl.float32)
        if HAS_RES:
            h = h + tl.load(r_row + cols, mask=cols < H, other=0.0).to(tl.float32)
        acc = acc + tl.sum(h * h, axis=1)
    inv_rms = libdevice.rsqrt(acc * (1.0 / H) + eps)[:, None]
    if BLOCK >= H:  # the row in registers: read again once (a no-op re-read when RBLOCK == BLOCK)
        cols = tl.arange(0, BLOCK)[None, :]
        mask = cols < H
        h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            h = h + tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
            if QBLOCK >= BLOCK:
                tl.store(r_row + cols, h.to(res_ptr.dtype.element_ty), mask=mask)
        n = _normalized(h, inv_rms, tl.load(w_ptr + cols, mask=mask, other=0.0))
        amax = _tile_maxima(tl.where(mask, tl.abs(n), 0.0).to(tl.float32), BLOCK, MBLOCK)
    else:
        amax = tl.zeros([1], dtype=tl.float32)
        for start in tl.range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)[None, :]
            mask = cols < H
            h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_RES:
                h = h + tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
            n = _normalized(h, inv_rms, tl.load(w_ptr + cols, mask=mask, other=0.0))
            amax = nan_max(amax, _tile_maxima(tl.where(mask, tl.abs(n), 0.0).to(tl.float32), BLOCK, MBLOCK))
    if HAS_UB:
        amax = nan_min(amax, tl.load(ub_ptr))
    s = nan_max(amax * (1.0 / fp8_max), min_scale)
    tl.store(scale_ptr + row + tl.arange(0, 1), s)
    s = s[:, None]
    if BLOCK >= H and QBLOCK >= BLOCK:
        tl.store(out_ptr + row * stride_o + cols, _quantized(n, s, fp8_max), mask=mask)
    else:
        # pass 3 from memory again, in QBLOCK tiles, as the original: the row tile when the row does
        # not fit, else the config's third tile (a store of the whole row's e4m3 bytes would give the
        # row tile 16 elements a thread, one 16-byte store, and Triton carries that layout back to the
        # sum, whose tree, its 8 a thread, would change)
        for start in tl.range(0, H, QBLOCK):  # own names: the row path's `cols` has another shape
            qcols = start + tl.arange(0, QBLOCK)[None, :]
            qmask = qcols < H
            hq = tl.load(x_row + qcols, mask=qmask, other=0.0).to(tl.float32)
            if HAS_RES:
                hq = hq + tl.load(r_row + qcols, mask=qmask, other=0.0).to(tl.float32)
                tl.store(r_row + qcols, hq.to(res_ptr.dtype.element_ty), mask=qmask)
            nq = _normalized(hq, inv_rms, tl.load(w_ptr + qcols, mask=qmask, other=0.0))
            tl.store(out_ptr + row * stride_o + qcols, _quantized(nq, s, fp8_max), mask=qmask)


@dataclass(frozen=True)
class LaunchConfig:
    RBLOCK: int  # the reduction's tile: the production config's, which decides the bits
    BLOCK: int  # the tile the row is loaded in (no value depends on it; a store over it can shape the sum's layout)
    num_warps: int  # the production config's (on the GPU the warps shape tl.sum's tree)
    MBLOCK: int = 0  # the maximum's tile: the production config's (a NaN-only tile gives NaN); 0: BLOCK
    QBLOCK: int = 0  # the row-in-registers path's quantizing tile: the config's third (see the kernel); 0: BLOCK

    @property
    def label(self) -> str:
        q = f"q{self.QBLOCK}" if self.QBLOCK and self.QBLOCK < self.BLOCK else ""
        return f"{self.RBLOCK}|{self.BLOCK}{q}/{self.num_warps}w"


def launch_config(M: int, H: int) -> LaunchConfig:
    """The reduction tile and the warps of the config vLLM picks for (M, H) (the sum's order is
    theirs to decide), the row in one tile up to :data:`MAX_ROW_TILE`, else 4096 columns."""
    row = triton.next_power_of_2(H)
    cfg = table.production_config(M, H)
    mblock = cfg["block_sizes"][1]
    block = row if row <= MAX_ROW_TILE else max(4096, mblock)  # whole tiles of the maximum's
    return LaunchConfig(table.reduction_tile(M, H), block, cfg["num_warps"], mblock, cfg["block_sizes"][2])


def check_args(x, weight, epsilon, scale_ub, residual, out) -> tuple[int, int]:
    """The checks of :func:`rms_norm_quant` (shared with the helion original); returns (M, H)."""
    check_tensor("x", x, dtypes=IN_DTYPES)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [num_tokens, hidden], got shape {tuple(x.shape)}")
    M, H = x.shape
    if H == 0:
        raise ValueError("x must have a hidden size of at least 1")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous (the original asserts it), got strides {tuple(x.stride())}")
    check_tensor("weight", weight, dtypes=(x.dtype,))
    check_same_device("x", x, "weight", weight)
    if tuple(weight.shape) != (H,) or weight.stride(0) != 1:
        raise ValueError(f"weight must be a contiguous [{H}], got shape {tuple(weight.shape)}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon >= 0:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if epsilon == float("inf"):
        raise ValueError("epsilon must be finite, got inf")
    if scale_ub is not None:
        check_tensor("scale_ub", scale_ub, dtypes=(torch.float32,))
        check_same_device("x", x, "scale_ub", scale_ub)
        if scale_ub.numel() != 1:
            raise ValueError(f"scale_ub must hold one element, got shape {tuple(scale_ub.shape)}")
    if residual is not None:
        check_tensor("residual", residual, dtypes=(x.dtype,))
        check_same_device("x", x, "residual", residual)
        if residual.shape != x.shape or not residual.is_contiguous():
            raise ValueError(f"residual must be a contiguous {tuple(x.shape)}, got {tuple(residual.shape)}")
        if residual.data_ptr() == x.data_ptr():
            raise ValueError("residual must not be x (it is written)")
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"out must be a (result, scale) pair, got {type(out).__name__}")
        result, scale = out
        check_tensor("out[0]", result, dtypes=(OUT_DTYPE,))
        check_tensor("out[1]", scale, dtypes=(torch.float32,))
        for name, t in (("out[0]", result), ("out[1]", scale)):
            check_same_device("x", x, name, t)
        if tuple(result.shape) != (M, H) or not result.is_contiguous():
            raise ValueError(f"out[0] must be a contiguous ({M}, {H}), got {tuple(result.shape)}")
        if tuple(scale.shape) != (M, 1) or not scale.is_contiguous():
            raise ValueError(f"out[1] must be a contiguous ({M}, 1), got {tuple(scale.shape)}")
    check_no_grad(x=x, weight=weight, residual=residual)
    return M, H


def empty_outputs(M: int, H: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(result [M, H] e4m3fn, scale [M, 1] fp32)``, uninitialised."""
    return torch.empty((M, H), dtype=OUT_DTYPE, device=device), torch.empty((M, 1), dtype=torch.float32, device=device)


def check_config_rows(config_rows, M: int) -> int:
    """The row count the config is picked for: ``config_rows``, or ``M`` when None."""
    if config_rows is None:
        return M
    if isinstance(config_rows, bool) or not isinstance(config_rows, int) or config_rows < 1:
        raise ValueError(f"config_rows must be an int >= 1 or None, got {config_rows!r}")
    return config_rows


def rms_norm_quant(x, weight, *, epsilon=1e-6, scale_ub=None, residual=None, out=None, config=None, config_rows=None):
    """``x [M, H]`` (bf16 or fp16) and ``weight [H]`` -> ``(result, scale)``: e4m3fn ``[M, H]`` and
    fp32 ``[M, 1]``, bit for bit the helion original; with ``residual`` (``x``'s shape and dtype)
    ``x + residual`` is normalized, written back into ``residual``, and returned third.
    ``scale_ub`` (a one-element fp32 tensor) caps the row maximum. ``out``: the (result, scale)
    buffers to write; ``config`` overrides :func:`launch_config` (a different ``RBLOCK`` gives
    other bits: the sum's order); ``config_rows``: the launch config for that many rows (as the
    original's)."""
    M, H = check_args(x, weight, epsilon, scale_ub, residual, out)
    key_rows = check_config_rows(config_rows, M)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig or None, got {type(config).__name__}")
    result, scale = out if out is not None else empty_outputs(M, H, x.device)
    if M:
        cfg = config or launch_config(key_rows, H)
        qblock = (cfg.QBLOCK or cfg.BLOCK) if cfg.BLOCK >= H else cfg.BLOCK  # the store's tile (see the kernel)
        int64 = M * H >= INT32_LIMIT
        with _interp_repairs(x.device):
            _backend.launch(
                rms_norm_quant_kernel, (M,), x.device, x, weight, residual if residual is not None else x,
                scale_ub if scale_ub is not None else scale, result, scale, H, H, H, float(epsilon), FP8_MAX, MIN_SCALE,
                H=H, RBLOCK=cfg.RBLOCK, BLOCK=cfg.BLOCK, MBLOCK=cfg.MBLOCK or cfg.BLOCK, QBLOCK=qblock,
                HAS_RES=residual is not None, HAS_UB=scale_ub is not None,
                INT64=int64, num_warps=cfg.num_warps,
            )  # fmt: skip
    return (result, scale) if residual is None else (result, scale, residual)


def _interp_repairs(device):
    return interp.repairs() if _backend.uses_interpreter(device) else _backend_null()


class _backend_null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- portcheck's case matrices ------------------------------------------------------------------


def _out(args: tuple, kwargs: dict):
    x = args[0]
    return (torch.empty(x.shape, dtype=OUT_DTYPE, device=x.device),
            torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device))  # fmt: skip


def _case(
    M, H, value_class, seed, *, residual=False, ub=None, dtype=torch.bfloat16, rows=None, prefix=""
) -> portcheck.Case:
    """``x [M, H]`` of ``value_class``; a weight ``N(1, 1)`` as vLLM's generator draws it (random
    values, whatever the class); a residual ``randn``; ``scale_ub`` a fraction ``ub`` of the
    largest |n| the float64 reference finds (so the cap binds on some rows); ``rows``: both sides
    pick their config for that many rows (``config_rows``)."""

    def make(seed, device, M=M, H=H, vc=value_class, residual=residual, ub=ub, dtype=dtype, rows=rows):
        gen = torch.Generator().manual_seed(seed + 7)
        x = portcheck.values((M, H), dtype, vc, seed).contiguous()
        w = (1.0 + torch.randn(H, generator=gen, dtype=torch.float64)).to(dtype)
        kwargs = {} if rows is None else {"config_rows": rows}
        if residual:
            kwargs["residual"] = torch.randn((M, H), generator=gen, dtype=torch.float64).to(dtype).to(device)
        if ub is not None:
            h = x.double() if not residual else x.double() + kwargs["residual"].double().cpu()
            n = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()).abs()
            cap = torch.nan_to_num(n, nan=0.0, posinf=0.0).amax(-1).median()
            kwargs["scale_ub"] = torch.tensor(float(cap) * ub, dtype=torch.float32, device=device)
        return (x.to(device), w.to(device)), kwargs

    dt = str(dtype).removeprefix("torch.")
    extra = (" residual" if residual else "") + (f" scale_ub={ub}" if ub is not None else "")
    extra += f" config_rows={rows}" if rows is not None else ""
    name = f"{prefix}{M}x{H} {dt} {value_class}{extra} seed={seed}"
    return portcheck.Case(name, make=make, seed=seed, value_class=value_class, out=_out)


def cases(ms, hs, value_classes=portcheck.VALUE_CLASSES, long_rows=(), prefix: str = "") -> list[portcheck.Case]:
    """For every M, H: bf16 ``x`` in every value class, with and without a residual; ``scale_ub``
    at half the median row maximum at the first shape and the last; fp16 at the last; and each
    ``(M, H, rows)`` of ``long_rows`` (random and ties, with a residual; the config picked for
    ``rows`` rows, None: for M): shapes whose production config sums the row in several tiles."""
    out, seed = [], 0
    shapes = [(m, h) for m in ms for h in hs]
    for M, H in shapes:
        for vc in value_classes:
            for res in (False, True):
                out.append(_case(M, H, vc, seed, residual=res, prefix=prefix))
                seed += 1
    for M, H in (shapes[0], shapes[-1]):
        out.append(_case(M, H, "random", seed, residual=True, ub=0.5, prefix=prefix))
        seed += 1
    out.append(_case(*shapes[-1], "random", seed, dtype=torch.float16, prefix=prefix))
    seed += 1
    return out + long_cases(long_rows, seed, prefix)


def long_cases(long_rows, seed: int = 0, prefix: str = "") -> list[portcheck.Case]:
    """Each ``(M, H, rows)`` of ``long_rows``: random and ties, with a residual, the config picked
    for ``rows`` rows (None: for M); seeds from ``seed`` on."""
    out = []
    for M, H, rows in long_rows:
        for vc in ("random", "ties"):
            out.append(_case(M, H, vc, seed, residual=True, rows=rows, prefix=prefix))
            seed += 1
    return out


def sum_order_case(H: int, rows: int = 4, prefix: str = "") -> portcheck.Case:
    """``rows`` rows at width ``H`` with the prefill config (``config_rows=4096``: a reduction tile
    of 1024) on which that tile's order and one sum over the row (4096 wide) give different
    result bytes in the interpreter (:func:`inkling_workbook.ports.rms_norm_quant.sum_order.sum_order_rows`)."""

    def make(seed, device, H=H, rows=rows):
        x, w, r = sum_order.sum_order_rows(rows, H, 1024, 4096, H)
        return (x.clone().to(device), w.clone().to(device)), {"residual": r.clone().to(device), "config_rows": 4096}

    name = f"{prefix}{rows}x{H} bfloat16 sum_order residual config_rows=4096 seed={H}"
    return portcheck.Case(name, make=make, seed=H, value_class="ties", out=_out)


#: The prefill config on a few rows: from 2049 rows at H near 4096 vLLM picks (4096, 4096), whose
#: reduction tile is 1024 (four tile sums at H = 4096 and 3200, the last one masked at 3200).
#: Rows are programs of their own, so 4 rows with that config are 4 rows of a prefill batch;
#: 2049 interpreted rows would take a minute a call.
LONG_CPU = ((4, 4096, 4096), (4, 3200, 4096))


def cpu_cases() -> list[portcheck.Case]:
    """The interpreter-sized matrix: M = 1 and 3 at H = 384 and H = 3200 (every value class, with
    and without a residual), the scale cap, fp16, the prefill config at H = 4096 and 3200, random
    and on rows where the sum's order shows, and a NaN row wider than the original's maximum tile
    (H = 5120: its config takes the row maximum over 4096-column tiles) (50 cases)."""
    out = cases((1, 3), (384, 3200), long_rows=LONG_CPU) + [sum_order_case(4096), sum_order_case(3200)]
    return out + [_case(1, 5120, "nan_inf", len(out))]


def table_rows(hidden_sizes=None) -> tuple[tuple[int, int, None], ...]:
    """``(num_tokens, hidden_size, None)`` for every entry of vLLM's H200 table (of the given
    hidden sizes): ``long_rows`` that run each entry on as many rows as it was tuned for. A
    difference in a sum's tree shows in about one element in a million, so each entry gets its
    own full batch rather than a few rows with ``config_rows``."""
    keys = sorted((e["hidden_size"], e["num_tokens"]) for e in table.table()["entries"])
    return tuple((t, h, None) for h, t in keys if hidden_sizes is None or h in hidden_sizes)


def gpu_base_cases() -> list[portcheck.Case]:
    """Decode to prefill at the hidden sizes 2048, 4096 and an odd 5120 (which picks 4096), with
    the shapes whose config sums in four tiles (M > 2048 at H near 4096)."""
    return cases(
        (1, 7, 64, 512), (2048, 4096, 5120), long_rows=((2049, 4096, None), (4096, 3200, None), (8192, 5120, None))
    )


def gpu_table_cases() -> list[portcheck.Case]:
    """Every entry of the table on its own batch (seeds from 1000: apart from the base cases')."""
    return long_cases(table_rows(), seed=1000)


def gpu_cases() -> list[portcheck.Case]:
    """The GPU matrix for ``--device cuda``: :func:`gpu_base_cases` and :func:`gpu_table_cases`
    (the GPU test runs the two halves as two tests, side by side)."""
    return gpu_base_cases() + gpu_table_cases()


#: The table entries the quick sweep's shapes pick beyond the quick matrix's own shapes
#: (M = 1024 and 4096 at H = 2048; M = 1024 at 4096); a test holds the two lists together.
QUICK_TABLE_ROWS = ((1024, 2048, None), (4096, 2048, None), (1024, 4096, None))


def gpu_quick_cases() -> list[portcheck.Case]:
    """A smoke-sized GPU matrix (``rms-norm-quant --quick``): M = 1 and 64 at H = 2048 and 4096,
    random and NaN/Inf, one prefill shape whose config sums in four tiles, and every other table
    entry the quick sweep's shapes pick, on its own batch."""
    long_rows = ((2049, 4096, None), *QUICK_TABLE_ROWS)
    return cases((1, 64), (2048, 4096), value_classes=("random", "nan_inf"), long_rows=long_rows)

"""SiLU-and-mul for the fused gate/up GEMM output of an MoE layer, in plain Triton.

``gateup[M, 2N]`` holds, per row, the gate and up projections of one token; the op writes
``out[M, N] = silu(gate) * up [* w_row]`` in one of two layouts:

* interleaved:      ``g0 u0 g1 u1 ... g{N-1} u{N-1}``
* non-interleaved:  ``g0 g1 ... g{N-1} u0 u1 ... u{N-1}``

The two kernels below are a port of helion kernels that must stay bit-identical to them, so
the arithmetic is written in exactly one order (``_silu_mul``): upcast to fp32,
``gate * sigmoid(gate) * up``, the optional per-row weight multiplied last, one rounding cast at
the store. Everything else (tiles, masks, cache hints) is free to change because it cannot move
a bit of the result.

The module reads top-down in the order of a call: the public function (and its ``torch.compile``
form), the registered ops, the hot path of a CUDA call (``_fast_cuda``), the checks (``_check_args``), the launch
heuristic (``launch_config``), the launch (``_launch``, ``_launch_cuda``), then the kernels. What
it shares with the other ops is read once, in its own module: the check primitives
(``_validate``), the launch on either backend (``_backend``) and the arithmetic (``_silu_mul``, in
``_activation``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import _backend
from ._activation import _silu_mul
from ._backend import INT32_LIMIT
from ._library import register_op
from ._validate import (
    ELEMENT_SIZE,
    FLOAT_DTYPES,
    check_no_grad,
    check_no_overlap,
    check_out_dtype,
    check_row_major,
    check_same_device,
    check_tensor,
)


def silu_and_mul(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    out: torch.Tensor | None = None,
    config: LaunchConfig | None = None,
    enable_pdl: bool | None = None,
) -> torch.Tensor:
    """``silu(gate) * up [* topk_weights[:, None]]`` over the fused gate/up GEMM output.

    Args:
        gateup: ``[M, 2N]`` bf16, fp16 or fp32, on CUDA (compiled kernels) or CPU (Triton
            interpreter). Rows may be strided; elements within a row must be contiguous.
            ``interleaved=True``: ``g0 u0 g1 u1 ...``; ``False``: ``g0..g{N-1} u0..u{N-1}``.
        topk_weights: optional ``[M]`` float tensor, multiplied last (in fp32).
        out_dtype: bf16, fp16 or fp32; defaults to ``out.dtype`` or ``gateup.dtype``.
        interleaved: the layout of ``gateup`` (keyword only).
        out: optional ``[M, N]`` output to write into (keyword only); it must not share memory
            with ``gateup`` or ``topk_weights``.
        config: optional :class:`LaunchConfig` overriding :func:`launch_config` (benchmarks).
        enable_pdl: programmatic dependent launch (keyword only): the kernel waits on the
            previous kernel's completion just before its first load, then lets the next kernel
            launch at once (its own wait holds it until this grid completes), so launches overlap
            the previous kernel's tail and this one's loads and stores in a stream or graph.
            ``None`` (default): on for CUDA tensors on compute capability >= 9.0, off otherwise;
            always off under the interpreter. It never changes a bit of the result.

    Returns:
        ``[M, N]`` tensor of ``out_dtype``: each element computed in fp32 as
        ``g * sigmoid(g) * u [* w]`` and rounded once.

    Never synchronizes with the host, so it can be captured in a CUDA graph with or without
    ``out``. Inference only: inputs that require grad are refused while grad mode is on. Inside
    ``torch.compile`` the call goes through the registered op ``torch.ops.inkling.silu_and_mul``
    (or ``silu_and_mul_out``), so the launch heuristic does not become guards on M.
    """
    if torch.compiler.is_compiling():
        return _as_registered_op(gateup, topk_weights, out_dtype, interleaved, out, config, enable_pdl)
    return _silu_and_mul_eager(gateup, topk_weights, out_dtype, interleaved, out, config, enable_pdl)


def _as_registered_op(gateup, topk_weights, out_dtype, interleaved, out, config, enable_pdl):
    """The call as torch.compile sees it: one node of the op registered below."""
    if config is not None:
        raise ValueError("config (a benchmark override) is not supported under torch.compile")
    _check_args(gateup, topk_weights, out_dtype, out, interleaved, memory=False)
    if out is None:
        return torch.ops.inkling.silu_and_mul(gateup, topk_weights, out_dtype, interleaved, enable_pdl)
    if not out.is_contiguous():
        # Dynamo refuses a non-contiguous tensor passed as an op's `out=`: write the functional
        # op's result into the strided rows instead (one more copy, compiled calls only)
        out.copy_(torch.ops.inkling.silu_and_mul(gateup, topk_weights, out.dtype, interleaved, enable_pdl))
        return out
    torch.ops.inkling.silu_and_mul_out(gateup, topk_weights, interleaved, enable_pdl, out=out)
    return out


def _silu_and_mul_eager(gateup, topk_weights, out_dtype, interleaved, out, config, enable_pdl):
    if config is None and (enable_pdl is None or enable_pdl is True or enable_pdl is False):
        res = _fast_cuda(gateup, topk_weights, out_dtype, out, interleaved, enable_pdl)
        if res is not None:
            return res
    M, N = _check_args(gateup, topk_weights, out_dtype, out, interleaved)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig or None, got {type(config).__name__}")
    if topk_weights is not None:
        topk_weights = topk_weights.contiguous()  # the kernel reads the weights at unit stride
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or gateup.dtype, device=gateup.device)
    if M == 0:
        return out
    _launch(gateup, topk_weights, out, M, N, interleaved, config, enable_pdl)
    return out


# The registered ops (``torch.ops.inkling.silu_and_mul`` and ``silu_and_mul_out``): the same
# eager call, and a fake that runs the checks that read no values, then computes the shape.


def _silu_impl(gateup, topk_weights=None, out_dtype=None, interleaved=True, enable_pdl=None):
    return _silu_and_mul_eager(gateup, topk_weights, out_dtype, interleaved, None, None, enable_pdl)


def _silu_fake(gateup, topk_weights=None, out_dtype=None, interleaved=True, enable_pdl=None):
    _check_args(gateup, topk_weights, out_dtype, None, interleaved, memory=False)
    return gateup.new_empty((gateup.shape[0], gateup.shape[1] // 2), dtype=out_dtype or gateup.dtype)


def _silu_out_impl(gateup, topk_weights, interleaved, enable_pdl, *, out):
    _silu_and_mul_eager(gateup, topk_weights, None, interleaved, out, None, enable_pdl)


def _silu_out_fake(gateup, topk_weights, interleaved, enable_pdl, *, out):
    _check_args(gateup, topk_weights, None, out, interleaved, memory=False)


register_op(
    "silu_and_mul",
    "(Tensor gateup, Tensor? topk_weights=None, ScalarType? out_dtype=None, bool interleaved=True, "
    "bool? enable_pdl=None) -> Tensor",
    _silu_impl,
    _silu_fake,
)
register_op(
    "silu_and_mul_out",
    "(Tensor gateup, Tensor? topk_weights, bool interleaved, bool? enable_pdl, *, Tensor(a!) out) -> ()",
    _silu_out_impl,
    _silu_out_fake,
)


_Tensor = torch.Tensor


def _fast_cuda(gateup, w, out_dtype, out, interleaved, enable_pdl):
    """The hot path of a CUDA call: the checks of :func:`_check_args` done with as few tensor
    attribute reads as possible, then the cached launch. Returns ``None`` whenever anything is
    unusual (a failed check, a tensor subclass, overlapping buffers, the interpreter forced on
    CUDA, M == 0): the general path then handles the call or raises the precise error."""
    if gateup.__class__ is not _Tensor or not gateup.is_cuda or (interleaved is not True and interleaved is not False):
        return None
    dtype = gateup.dtype
    if dtype not in ELEMENT_SIZE or gateup.ndim != 2:
        return None
    M, two_n = gateup.shape
    if two_n & 1 or two_n == 0 or M == 0:
        return None
    N = two_n >> 1
    s_in, s_in1 = gateup.stride()
    if s_in1 != 1 or (M > 1 and s_in < two_n):
        return None
    grad = torch.is_grad_enabled()
    if grad and gateup.requires_grad:
        return None
    dev = gateup.get_device()
    g_ptr = gateup.data_ptr()
    g_end = g_ptr + ((M - 1) * s_in + two_n) * ELEMENT_SIZE[dtype]
    if w is not None:
        if w.__class__ is not _Tensor or not w.is_cuda or w.get_device() != dev or w.ndim != 1 or w.shape[0] != M:
            return None
        w_dtype = w.dtype
        if w_dtype not in ELEMENT_SIZE or (grad and w.requires_grad) or (M > 1 and w.stride(0) != 1):
            return None  # (a strided w: the general path copies it)
        w_ptr = w.data_ptr()
        w_end = w_ptr + ((M - 1) * w.stride(0) + 1) * ELEMENT_SIZE[w_dtype]
    else:
        w_dtype, w_ptr = dtype, g_ptr
    if out is None:
        if out_dtype is not None and out_dtype not in ELEMENT_SIZE:
            return None
        out = torch.empty((M, N), dtype=out_dtype or dtype, device=gateup.device)
        o_dtype, s_out, o_ptr = out.dtype, N, out.data_ptr()
    else:
        if out.__class__ is not _Tensor or not out.is_cuda or out.get_device() != dev or out.ndim != 2:
            return None
        o_dtype = out.dtype
        if o_dtype not in ELEMENT_SIZE or (out_dtype is not None and out_dtype != o_dtype) or out.shape != (M, N):
            return None
        if grad and out.requires_grad:
            return None
        s_out, s_out1 = out.stride()
        if (s_out1 != 1 and N > 1) or (M > 1 and s_out < N):
            return None
        o_ptr = out.data_ptr()
        o_end = o_ptr + ((M - 1) * s_out + N) * ELEMENT_SIZE[o_dtype]
        if o_ptr < g_end and g_ptr < o_end:
            return None  # may overlap: the general path checks exactly
        if w is not None and o_ptr < w_end and w_ptr < o_end:
            return None
    if _backend.interpret_env():
        return None
    cfg = launch_config(M, N)
    pdl = _backend.pdl_default_index(dev) if enable_pdl is None else enable_pdl
    _launch_cuda(gateup, w, out, M, N, s_in, s_out, dtype, g_ptr, w_dtype, w_ptr, o_dtype, o_ptr, cfg, pdl, dev,
                 interleaved)  # fmt: skip
    return out


def _check_args(gateup, topk_weights, out_dtype, out, interleaved, memory: bool = True):
    """Every argument check; ``memory=False`` leaves out the overlap checks, which read addresses
    (the fake implementations and ``torch.compile`` run the rest on fake tensors)."""
    check_tensor("gateup", gateup, ndim=2, dtypes=FLOAT_DTYPES)
    if gateup.shape[1] % 2:
        raise ValueError(f"gateup's last dimension must be even (gate and up halves), got {gateup.shape[1]}")
    if gateup.shape[1] == 0:
        raise ValueError("gateup's last dimension must be at least 2 (N >= 1)")
    check_row_major("gateup", gateup)
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    check_out_dtype(out_dtype)
    M, N = gateup.shape[0], gateup.shape[1] // 2
    if topk_weights is not None:
        check_tensor("topk_weights", topk_weights, ndim=1, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "topk_weights", topk_weights)
        if topk_weights.shape[0] != M:
            raise ValueError(f"topk_weights must have shape ({M},), got {tuple(topk_weights.shape)}")
    if out is not None:
        check_tensor("out", out, ndim=2, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "out", out)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out must have shape ({M}, {N}), got {tuple(out.shape)}")
        if out_dtype is not None and out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype={out_dtype}")
        check_row_major("out", out)
        if memory:
            check_no_overlap("out", out, "gateup", gateup)
            if topk_weights is not None:
                check_no_overlap("out", out, "topk_weights", topk_weights)
    check_no_grad(gateup=gateup, topk_weights=topk_weights, out=out)
    return M, N


@dataclass(frozen=True)
class LaunchConfig:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    stream_policy: str = ""  # cache hint on the gateup loads ("evict_first", ...); "" for none

    def __post_init__(self):
        for name in ("BLOCK_M", "BLOCK_N", "num_warps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"LaunchConfig.{name} must be an int, got {type(v).__name__}")
            if v <= 0 or v & (v - 1) or (name == "num_warps" and v > 32):
                raise ValueError(f"LaunchConfig.{name} must be a positive power of two (num_warps <= 32), got {v}")
        if self.stream_policy not in ("", "evict_first", "evict_last"):
            raise ValueError(
                f"LaunchConfig.stream_policy must be '', 'evict_first' or 'evict_last', got {self.stream_policy!r}"
            )

    def grid(self, M: int, N: int) -> tuple[int]:
        return (triton.cdiv(M, self.BLOCK_M) * triton.cdiv(N, self.BLOCK_N),)


def launch_config(M: int, N: int) -> LaunchConfig:
    """The launch heuristic that replaces an autotune table (measured: data/tuning_log.md).

    * Decode (M <= 64): one row a program (``BLOCK_M == 1``: the grid covers M exactly, no row
      mask) and 256 columns a program with 4 warps, so even one token's row is spread over N/256
      programs. The call is latency-bound; smaller pieces finish sooner. From 24576 outputs
      (M * N, e.g. M = 8 at N = 3072, M = 16 at N = 1536) and N >= 1024: 1024 columns with 8
      warps, measured 4-11% faster with PDL at M = 8-16, N >= 1536 (and a tie
      without PDL) on the H200 (``data/tuning_log.md``, "FP8 with the hardware e4m3 conversion,
      decode tiles, host checks").
    * Mid-size (64 < M <= 1024): still one row a program, with the widest power-of-two tile up
      to 1024 that divides N (no column mask). When none from 128 up does and N > 1024 (N = 2880):
      1024 columns with a column mask and 8 warps, measured at 1.99 us for
      333 x 2880 against 3.45 us for 256-column tiles (four times the programs), and 2.16 against
      5.76 us with PDL (``data/tuning_log.md``, "the FP8 kernel's instruction count, the ragged
      tile fallback").
    * Prefill (M > 1024): the same ``BLOCK_N`` and enough rows for about 2048 outputs (16 KB of
      bf16 traffic) a program, which amortizes the index math.
    * ``num_warps``: one warp per 256 outputs, between 4 and 8.
    * No cache hint on the streamed ``gateup`` loads: on the H200 ``evict_first`` cost 3-5% at
      M = 49152 (the per-row weights keep their ``evict_last``).

    The result depends on M only through its bucket (<= 64 split at 24576 outputs, <= 1024,
    larger) and is cached per (bucket, N).
    """
    for name, v in (("M", M), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if M < 0 or N < 1:
        raise ValueError(f"need M >= 0 and N >= 1, got M={M}, N={N}")
    bucket = 0 if M <= 64 else (1 if M <= 1024 else 2)
    if bucket == 0 and N >= 1024 and M * N >= DECODE_WIDE_OUTPUTS:
        bucket = 3
    cfg = _CONFIGS.get((bucket, N))
    if cfg is None:
        cfg = _CONFIGS[(bucket, N)] = _launch_config(bucket, N)
    return cfg


_CONFIGS: dict[tuple[int, int], LaunchConfig] = {}

DECODE_WIDE_OUTPUTS = 24576


def _launch_config(bucket: int, N: int) -> LaunchConfig:
    if bucket == 3:
        return LaunchConfig(1, 1024, 8, "")
    if bucket == 0:
        block_n = min(256, triton.next_power_of_2(N))
        return LaunchConfig(1, block_n, 4, "")
    block_n = next((b for b in (1024, 512, 256, 128) if N % b == 0), None)
    if block_n is None and bucket == 1 and N > 1024:
        return LaunchConfig(1, 1024, 8, "")
    if block_n is None:
        block_n = min(triton.next_power_of_2(N), 256)
    block_m = 1 if bucket == 1 else max(1, 2048 // block_n)
    warps = min(8, max(4, block_m * block_n // 256))
    return LaunchConfig(block_m, block_n, warps, "")


def _launch(gateup, topk_weights, out, M, N, interleaved, config, enable_pdl):
    """The launch after the checks: compiled (thin path) on CUDA, interpreted on CPU."""
    device = gateup.device
    cfg = config or launch_config(M, N)
    stride_in, stride_out = gateup.stride(0), out.stride(0)
    weight = topk_weights if topk_weights is not None else gateup
    if device.type == "cuda" and not _backend.uses_interpreter(device):
        pdl = _backend.resolve_pdl(enable_pdl, device)
        _launch_cuda(
            gateup, topk_weights, out, M, N, stride_in, stride_out, gateup.dtype, gateup.data_ptr(), weight.dtype,
            weight.data_ptr(), out.dtype, out.data_ptr(), cfg, pdl, device.index, interleaved,
        )  # fmt: skip
        return
    int64 = max(M * stride_in, M * stride_out) >= INT32_LIMIT
    block_m, block_n = cfg.BLOCK_M, cfg.BLOCK_N
    grid0 = -(-M // block_m) * -(-N // block_n)
    _backend.resolve_pdl(enable_pdl, device)  # type check only: never on under the interpreter
    kernel = silu_and_mul_interleaved_kernel if interleaved else silu_and_mul_non_interleaved_kernel
    _backend.launch(
        kernel, (grid0,), device, gateup, weight, out, M, stride_in, stride_out, N=N, BLOCK_M=block_m,
        BLOCK_N=block_n, EVEN_M=M % block_m == 0, EVEN_N=N % block_n == 0, HAS_WEIGHT=topk_weights is not None,
        INT64=int64, STREAM_POLICY=cfg.stream_policy, USE_PDL=False, num_warps=cfg.num_warps,
    )  # fmt: skip


def _launch_cuda(gateup, w, out, M, N, s_in, s_out, dtype, g_ptr, w_dtype, w_ptr, o_dtype, o_ptr, cfg, pdl, dev,
                 interleaved):  # fmt: skip
    """The cached compiled launch. The key holds every constexpr and launch option and, for the
    runtime arguments, exactly :func:`_backend.arg_spec`'s view (dtype and 16-byte alignment of
    each pointer; width, ==1 and %16 of the strides; width of M, which is not specialized)."""
    block_m, block_n = cfg.BLOCK_M, cfg.BLOCK_N
    even_m, even_n = M % block_m == 0, N % block_n == 0
    int64 = max(M * s_in, M * s_out) >= INT32_LIMIT
    has_weight = w is not None
    key = (
        dev, pdl, block_m, block_n, cfg.num_warps, cfg.stream_policy, N, even_m, even_n, has_weight, int64,
        dtype, g_ptr & 15 == 0, w_dtype, w_ptr & 15 == 0, o_dtype, o_ptr & 15 == 0, M > _I32_MAX,
        s_in > _I32_MAX, s_in == 1, s_in & 15 == 0, s_out > _I32_MAX, s_out == 1, s_out & 15 == 0,
    )  # fmt: skip
    args = (
        gateup, w if has_weight else gateup, out, M, s_in, s_out, N, block_m, block_n, even_m, even_n, has_weight,
        int64, cfg.stream_policy, pdl,
    )  # fmt: skip
    grid0 = -(-M // block_m) * -(-N // block_n)
    _LAUNCHERS[interleaved](key, grid0, dev, args, cfg.num_warps, pdl)


_I32_MAX = 2**31 - 1


@triton.jit
def _silu_and_mul_tile(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, INT64: tl.constexpr, STREAM_POLICY: tl.constexpr, USE_PDL: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):  # fmt: skip
    """The one body of both silu kernels: a ``[BLOCK_M, BLOCK_N]`` output tile per program."""
    # Flat 1-D grid, N tiles fastest: neighbouring programs stream consecutive slices of a row.
    N_TILES: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    pid_m = pid // N_TILES
    pid_n = pid % N_TILES
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output columns
    if INTERLEAVED:
        cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)  # the g/u pairs feeding them
    # Static masks: each flag removes its mask from the compiled code altogether.
    in_mask = None  # interleaved only; the non-interleaved loads use out_mask
    out_mask = None
    if not EVEN_N:
        if INTERLEAVED:
            in_mask = (cols2 < 2 * N)[None, :]
        out_mask = (cols < N)[None, :]
    if not EVEN_M:
        row_ok = (rows < M)[:, None]
        if INTERLEAVED:
            in_mask = row_ok if EVEN_N else row_ok & in_mask
        out_mask = row_ok if EVEN_N else row_ok & out_mask
    if USE_PDL:
        # Programmatic dependent launch: everything above overlapped the previous kernel's tail;
        # wait for its writes (our inputs) before the first global load. Then let the next
        # kernel launch at once: its own wait still holds it until this grid has completed and
        # its writes are visible, and its launch overlaps our loads and stores (measured on the
        # H200: 0.85 -> 0.70 us at M = 1, 1.24 -> 0.90 us at 96 x 1536; data/tuning_log.md,
        # "decode and mid sizes").
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if INTERLEAVED:
        # One contiguous [BLOCK_M, 2*BLOCK_N] slab, streamed once, then split in registers: a
        # strided gather of every other element would halve the useful bandwidth.
        x = tl.load(
            gateup_ptr + rows[:, None] * stride_in + cols2[None, :], mask=in_mask, eviction_policy=STREAM_POLICY
        )
        gate, up = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N, 2)))
    else:
        # Two contiguous streams: the gate half and, N elements further on, the up half.
        g_ptrs = gateup_ptr + rows[:, None] * stride_in + cols[None, :]
        gate = tl.load(g_ptrs, mask=out_mask, eviction_policy=STREAM_POLICY)
        up = tl.load(g_ptrs + N, mask=out_mask, eviction_policy=STREAM_POLICY)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        # Weights are tiny and reused by every column tile of the row: keep them (evict_last).
        if EVEN_M:
            w = tl.load(weight_ptr + rows, eviction_policy="evict_last")
        else:
            w = tl.load(weight_ptr + rows, mask=rows < M, eviction_policy="evict_last")
        y = y * w.to(tl.float32)[:, None]
    # The only rounding of the whole op: fp32 -> output dtype at the store.
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=out_mask)


# Two kernels with one body: separate names keep the layouts apart in profiler traces.
@triton.jit(do_not_specialize=["M"])
def silu_and_mul_interleaved_kernel(
    gateup_ptr,  # [M, 2N] rows of g0 u0 g1 u1 ...; unit stride within a row
    weight_ptr,  # [M] per-row weights (any float dtype); unused unless HAS_WEIGHT
    out_ptr,  # [M, N]
    M,  # rows: a runtime value, so a new batch size never recompiles
    stride_in,  # row stride of gateup, in elements
    stride_out,  # row stride of out, in elements
    N: tl.constexpr,  # output width: a compile-time constant (a few per model)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_M: tl.constexpr,  # M % BLOCK_M == 0 (always true when BLOCK_M == 1): no row mask
    EVEN_N: tl.constexpr,  # N % BLOCK_N == 0: no column mask
    HAS_WEIGHT: tl.constexpr,
    INT64: tl.constexpr,  # numel >= 2**31: row offsets computed in int64
    STREAM_POLICY: tl.constexpr = "",  # cache hint for gateup ("" = none, "evict_first", ...)
    USE_PDL: tl.constexpr = False,  # wait on the grid dependency / signal dependents (sm_90+)
):
    _silu_and_mul_tile(
        gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out, N, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N,
        HAS_WEIGHT, INT64, STREAM_POLICY, USE_PDL, True,
    )  # fmt: skip


@triton.jit(do_not_specialize=["M"])
def silu_and_mul_non_interleaved_kernel(
    gateup_ptr,  # [M, 2N] rows of g0..g{N-1} u0..u{N-1}; unit stride within a row
    weight_ptr,
    out_ptr,
    M,
    stride_in,
    stride_out,
    N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    INT64: tl.constexpr,
    STREAM_POLICY: tl.constexpr = "",
    USE_PDL: tl.constexpr = False,
):
    _silu_and_mul_tile(
        gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out, N, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N,
        HAS_WEIGHT, INT64, STREAM_POLICY, USE_PDL, False,
    )  # fmt: skip


_CONSTEXPRS = ("N", "BLOCK_M", "BLOCK_N", "EVEN_M", "EVEN_N", "HAS_WEIGHT", "INT64", "STREAM_POLICY", "USE_PDL")


_LAUNCHERS = {
    True: _backend.CudaLauncher(silu_and_mul_interleaved_kernel, _CONSTEXPRS),
    False: _backend.CudaLauncher(silu_and_mul_non_interleaved_kernel, _CONSTEXPRS),
}

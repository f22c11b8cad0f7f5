"""NVFP4 quantization for packed MoE experts, and the fused SiLU-and-mul + NVFP4 kernel.

After the first grouped GEMM of an NVFP4 MoE, the activation ``silu(gate) * up`` is quantized
to NVFP4 for the second GEMM. Unfused, that is two kernels and an intermediate tensor:
``silu_and_mul`` writes ``[M, N]`` bf16 (2N bytes a row), which ``nvfp4_quant`` reads back.
The fused kernel reads ``gateup`` once and writes only the packed FP4 (N/2 bytes a row) and the
scales (N/16 bytes a row): per row 4N + 0.5625N bytes instead of 4N + 2N + 2N + 0.5625N.

Both ops run one kernel (:mod:`inkling_kernels._nvfp4_kernel`), which follows
:data:`inkling_kernels.reference.NVFP4_FORMULA` exactly. The fused one computes silu*mul with the
same helper as :mod:`inkling_kernels.silu_and_mul` and rounds it to the activation dtype in
registers, exactly where the unfused path stores it, so the two paths agree bit for bit.

The module reads top-down in the order of a call: the two public functions with their own checks
(``_check_x``, ``_check_fused_args``) and their registered ops, then what they share: the launch
(``_launch_quant``), its checks that read no values (``_check_static``) and the value checks
(``_check_values``, one host read), the launch heuristic (``_quant_config``), the compiled
launcher. The kernel, too large to fit here, is read last, in :mod:`inkling_kernels._nvfp4_kernel`;
the check primitives (``_validate``) and the launch on either backend (``_backend``) are the
helpers every op shares.
"""

from __future__ import annotations

import torch
import triton

from . import _backend
from ._activation import ACT_INTERLEAVED, ACT_NON_INTERLEAVED, ACT_NONE
from ._backend import INT32_LIMIT
from ._library import register_op
from ._nvfp4_kernel import nvfp4_quant_kernel
from ._validate import (
    ACT_DTYPES_FP4,
    FLOAT_DTYPES,
    check_no_grad,
    check_no_overlaps,
    check_offsets,
    check_row_major,
    check_same_device,
    check_tensor,
)
from .reference import NVFP4_BLOCK


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


def _nvfp4_quant_eager(
    x, global_scale, expert_offsets, blockscale_offsets, swizzle, out, validate, config, scale_rows, enable_pdl
):
    N = _check_x(x)
    return _launch_quant(
        "x", x, ACT_NONE, N, global_scale, expert_offsets, blockscale_offsets, None, swizzle, out, validate, config,
        scale_rows, enable_pdl,
    )  # fmt: skip


def _check_x(x) -> int:
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    check_row_major("x", x)
    N = x.shape[1]
    if N == 0 or N % NVFP4_BLOCK:
        raise ValueError(f"x's last dimension must be a positive multiple of {NVFP4_BLOCK}, got {N}")
    return N


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


def _check_fused_args(gateup, interleaved, topk_weights) -> int:
    check_tensor("gateup", gateup, ndim=2, dtypes=ACT_DTYPES_FP4)
    check_row_major("gateup", gateup)
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    if gateup.shape[1] % 2:
        raise ValueError(f"gateup's last dimension must be even, got {gateup.shape[1]}")
    N = gateup.shape[1] // 2
    if N == 0 or N % NVFP4_BLOCK:
        raise ValueError(f"gateup's last dimension must be 2N with N a positive multiple of {NVFP4_BLOCK}, got {2 * N}")
    if topk_weights is not None:
        check_tensor("topk_weights", topk_weights, ndim=1, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "topk_weights", topk_weights)
        if topk_weights.shape[0] != gateup.shape[0]:
            raise ValueError(f"topk_weights must have shape ({gateup.shape[0]},), got {tuple(topk_weights.shape)}")
    return N


# The registered ops (``torch.ops.inkling.nvfp4_quant``, ``silu_and_mul_nvfp4_quant`` and their
# ``_out`` forms): the same eager calls, and fakes that run the checks that read no values, then
# compute the shapes. The functional ops return ``max_blockscale_rows`` scale rows (see ops.py).


def _nvfp4_fake_outputs(src, N, expert_offsets, swizzle, scale_rows):
    M = src.shape[0]
    rows = _bound_rows(src, expert_offsets, swizzle, scale_rows) if swizzle else M
    packed = src.new_empty((M, N // 2), dtype=torch.uint8)
    return packed, src.new_empty((rows, _scale_cols(N, swizzle)), dtype=torch.uint8)


def _bound_rows(src, expert_offsets, swizzle, scale_rows):
    """The registered functional ops always return the fake's row count (the static bound)."""
    if scale_rows is not None or not swizzle:
        return scale_rows
    E = expert_offsets.shape[0] - 1 if expert_offsets is not None else 1
    return max_blockscale_rows(src.shape[0], max(E, 1))


def _quant_impl(x, global_scale, expert_offsets=None, blockscale_offsets=None, swizzle=True, scale_rows=None,
                validate=None, enable_pdl=None):  # fmt: skip
    scale_rows = _bound_rows(x, expert_offsets, swizzle, scale_rows)
    return _nvfp4_quant_eager(
        x, global_scale, expert_offsets, blockscale_offsets, swizzle, None, validate, None, scale_rows, enable_pdl
    )


def _quant_fake(x, global_scale, expert_offsets=None, blockscale_offsets=None, swizzle=True, scale_rows=None,
                validate=None, enable_pdl=None):  # fmt: skip
    _check_static(
        "x", x, _check_x(x), global_scale, expert_offsets, blockscale_offsets, None, swizzle, None, validate,
        scale_rows, memory=False,
    )  # fmt: skip
    return _nvfp4_fake_outputs(x, x.shape[1], expert_offsets, swizzle, scale_rows)


def _quant_out_impl(x, global_scale, expert_offsets, blockscale_offsets, swizzle, validate, enable_pdl, *, packed,
                    scales):  # fmt: skip
    _nvfp4_quant_eager(
        x, global_scale, expert_offsets, blockscale_offsets, swizzle, (packed, scales), validate, None, None,
        enable_pdl,
    )  # fmt: skip


def _quant_out_fake(x, global_scale, expert_offsets, blockscale_offsets, swizzle, validate, enable_pdl, *, packed,
                    scales):  # fmt: skip
    _check_static(
        "x", x, _check_x(x), global_scale, expert_offsets, blockscale_offsets, None, swizzle,
        (packed, scales), validate, None, memory=False,
    )  # fmt: skip


def _fused_impl(gateup, global_scale, expert_offsets=None, blockscale_offsets=None, interleaved=False,
                topk_weights=None, swizzle=True, scale_rows=None, validate=None, enable_pdl=None):  # fmt: skip
    scale_rows = _bound_rows(gateup, expert_offsets, swizzle, scale_rows)
    return _fused_eager(
        gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle, None, validate,
        None, scale_rows, enable_pdl,
    )  # fmt: skip


def _fused_fake(gateup, global_scale, expert_offsets=None, blockscale_offsets=None, interleaved=False,
                topk_weights=None, swizzle=True, scale_rows=None, validate=None, enable_pdl=None):  # fmt: skip
    _check_static(
        "gateup", gateup, _check_fused_args(gateup, interleaved, topk_weights), global_scale, expert_offsets,
        blockscale_offsets, topk_weights, swizzle, None, validate, scale_rows, memory=False,
    )  # fmt: skip
    return _nvfp4_fake_outputs(gateup, gateup.shape[1] // 2, expert_offsets, swizzle, scale_rows)


def _fused_out_impl(gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
                    validate, enable_pdl, *, packed, scales):  # fmt: skip
    _fused_eager(
        gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
        (packed, scales), validate, None, None, enable_pdl,
    )  # fmt: skip


def _fused_out_fake(gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
                    validate, enable_pdl, *, packed, scales):  # fmt: skip
    _check_static(
        "gateup", gateup, _check_fused_args(gateup, interleaved, topk_weights), global_scale, expert_offsets,
        blockscale_offsets, topk_weights, swizzle, (packed, scales), validate, None, memory=False,
    )  # fmt: skip


register_op(
    "nvfp4_quant",
    "(Tensor x, Tensor global_scale, Tensor? expert_offsets=None, Tensor? blockscale_offsets=None, "
    "bool swizzle=True, SymInt? scale_rows=None, bool? validate=None, bool? enable_pdl=None) -> (Tensor, Tensor)",
    _quant_impl,
    _quant_fake,
)
register_op(
    "nvfp4_quant_out",
    "(Tensor x, Tensor global_scale, Tensor? expert_offsets, Tensor? blockscale_offsets, bool swizzle, "
    "bool? validate, bool? enable_pdl, *, Tensor(a!) packed, Tensor(b!) scales) -> ()",
    _quant_out_impl,
    _quant_out_fake,
)
register_op(
    "silu_and_mul_nvfp4_quant",
    "(Tensor gateup, Tensor global_scale, Tensor? expert_offsets=None, Tensor? blockscale_offsets=None, "
    "bool interleaved=False, Tensor? topk_weights=None, bool swizzle=True, SymInt? scale_rows=None, "
    "bool? validate=None, bool? enable_pdl=None) -> (Tensor, Tensor)",
    _fused_impl,
    _fused_fake,
)
register_op(
    "silu_and_mul_nvfp4_quant_out",
    "(Tensor gateup, Tensor global_scale, Tensor? expert_offsets, Tensor? blockscale_offsets, bool interleaved, "
    "Tensor? topk_weights, bool swizzle, bool? validate, bool? enable_pdl, *, Tensor(a!) packed, "
    "Tensor(b!) scales) -> ()",
    _fused_out_impl,
    _fused_out_fake,
)


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
    scale_cols = _scale_cols(N, swizzle)
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


def _check_global_scale(global_scale, E: int, device) -> torch.Tensor:
    check_tensor("global_scale", global_scale, dtypes=(torch.float32,))
    if global_scale.numel() != E:
        raise ValueError(
            f"global_scale must hold one fp32 value per expert ({E}), got shape {tuple(global_scale.shape)}"
        )
    if global_scale.device != device:
        raise ValueError(f"global_scale is on {global_scale.device}, expected {device}")
    if global_scale.dim() == 1 and global_scale.is_contiguous():
        return global_scale  # the common case, without two dispatcher calls
    return global_scale.reshape(E).contiguous()


def _check_swizzled_rows(name: str, rows: int, M: int) -> None:
    """Swizzled scales are written in whole 128-row blocks (one block's rows interleave over all
    its bytes), so a buffer of a partial block would be overrun: refuse it, and refuse fewer rows
    than any token row needs (M > 0 needs at least one block)."""
    if rows % 128 or (M > 0 and rows < 128):
        raise ValueError(
            f"{name} must be a multiple of 128 (whole swizzled 128-row blocks), at least 128 when M > 0; "
            f"got {rows} (max_blockscale_rows(M, E) gives a bound for any expert split)"
        )


def _scale_cols(N: int, swizzle: bool) -> int:
    """Scale bytes a row: one per 16 elements, padded to a multiple of 4 when swizzled."""
    return (N // NVFP4_BLOCK + 3) // 4 * 4 if swizzle else N // NVFP4_BLOCK


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


def _check_values(
    global_scale, expert_offsets, blockscale_offsets, M: int, swizzle: bool, scale_rows, bound=None
) -> int:
    """The value checks of device-resident arguments: one host read (a synchronization).
    Returns the scale rows the offsets need (``blockscale_offsets[-1]``, or M when linear).
    ``bound``: the most scale rows the op may allocate (``max_blockscale_rows``), when it allocates."""
    gs = global_scale.detach().cpu()
    if not bool(torch.isfinite(gs).all()) or bool((gs < 0).any()):
        raise ValueError(f"global_scale must be finite and >= 0, got {gs.tolist()[:8]}")
    eo = expert_offsets.cpu().long()
    if int(eo[0]) != 0:
        raise ValueError(f"expert_offsets must start at 0, got {int(eo[0])}")
    if bool((eo[1:] < eo[:-1]).any()):
        raise ValueError("expert_offsets must be non-decreasing")
    if int(eo[-1]) != M:
        raise ValueError(f"expert_offsets must end at M={M}, got {int(eo[-1])}")
    if not swizzle:
        return M
    bo = blockscale_offsets.cpu().long()
    if int(bo[0]) != 0:
        raise ValueError(f"blockscale_offsets must start at 0, got {int(bo[0])}")
    if bool((bo % 128 != 0).any()):
        raise ValueError("blockscale_offsets must be multiples of 128 (each expert's scale rows are padded to 128)")
    counts = eo[1:] - eo[:-1]
    room = bo[1:] - bo[:-1]
    if bool((room < counts).any()):
        bad = int(torch.nonzero(room < counts)[0])
        raise ValueError(
            f"blockscale_offsets inconsistent with expert_offsets: expert {bad} has {int(counts[bad])} rows "
            f"but {int(room[bad])} scale rows"
        )
    if bound is not None and int(bo[-1]) > bound:
        raise ValueError(
            f"blockscale_offsets end at {int(bo[-1])} scale rows, more than any split of M={M} rows over "
            f"{bo.numel() - 1} experts needs ({bound}, max_blockscale_rows): pass out= for a layout with gaps"
        )
    if scale_rows is not None and int(bo[-1]) > scale_rows:
        raise ValueError(
            f"blockscale_offsets end at {int(bo[-1])} scale rows but the scales output has {scale_rows} rows"
        )
    return int(bo[-1])


def _check_config(config) -> None:
    """``config``: ``(BLOCK_M, BLOCK_K, num_warps)``, powers of two, ``BLOCK_K >= 64``."""
    ok = isinstance(config, tuple) and len(config) == 3
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0 for v in config)
    if not ok or config[1] < 64 or config[2] > 32:
        raise ValueError(
            f"config must be a (BLOCK_M, BLOCK_K, num_warps) tuple of powers of two, BLOCK_K >= 64 and "
            f"num_warps <= 32, got {config!r}"
        )


_QUANT_CONFIGS: dict[tuple[int, bool, bool], tuple[int, int, int]] = {}


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


#: compute capability majors whose PTX target (sm_100a, 103a, 110a, 120a, 121a) has
#: ``cvt.rn.satfinite.e2m1x2.f32``; ptxas refuses it for sm_90a
HW_E2M1_MAJORS = (10, 11, 12)


def _hw_e2m1(device: torch.device) -> bool:
    """Whether compiled launches on ``device`` round to e2m1 with the hardware conversion."""
    return _backend.capability(_backend.cuda_index(device))[0] in HW_E2M1_MAJORS


_LAUNCHER = _backend.CudaLauncher(nvfp4_quant_kernel, _backend.kernel_constexprs(nvfp4_quant_kernel))

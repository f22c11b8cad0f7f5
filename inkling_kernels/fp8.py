"""FP8 per-token-group quantization, plain and fused with SiLU-and-mul: the Hopper MoE format.

On the H200 the second grouped GEMM of an MoE layer reads its activations as block-scaled FP8
(DeepSeek style): e4m3 values, one fp32 scale per row and per group of ``group_size`` (default
128) consecutive elements. Unfused, ``silu_and_mul`` writes ``[M, N]`` bf16 (2N bytes a row) and a
second kernel reads it back; the fused kernel reads ``gateup`` once (4N bytes a row) and writes
only the e4m3 bytes (N) and the scales (4N/group_size).

Both paths run :func:`_fp8_group_kernel` and follow
:data:`inkling_kernels.reference.FP8_GROUP_FORMULA` exactly. The fused path computes silu*mul
with the shared ``_silu_mul`` helper and rounds it to the activation dtype in registers, exactly
where the unfused path stores it, so fused == unfused bit for bit (compiled, its sigmoid uses a
flushing exponential with the same bits on every fp32 input: ``sigmoid_paths_mismatches``). The
scale and its reciprocal are IEEE divisions (``tl.math.div_rn``; Triton's ``/`` is not, on the
GPU), except in compiled decode launches on sm_90, where a corrected product and one MUFU.RCP give
the same bits on every fp32 group maximum (``_scale_fast``, ``_recip_split_fast``,
``scale_paths_mismatches``); decode launches whose load lays each group over one warp
(``_warp_redux_ok``) take the group maximum with one ``redux.sync`` (``_warp_group_max``) instead
of a butterfly of shuffles; ``y / s`` is an IEEE division too,
except compiled with 16-bit activations, where the split reciprocal
``fma(y, r_hi, y * r_lo)`` gives the same e4m3 byte on every reachable input pair
(``_div_by_scale``, ``division_mismatches``; the fp32 quotient itself can differ by an ulp, which
never changes a byte). The rounding to e4m3 has two
implementations that produce the same byte for every one of the 2**32 fp32 inputs (checked
exhaustively on the GPU by ``e4m3_paths_mismatches``): on sm_89+ GPUs the hardware conversion
``cvt.rn.satfinite.e4m3x2.f32`` (``_e4m3_hw``), under Triton's interpreter integer operations
(``_e4m3_signed``): the interpreter's own fp32 -> fp8 cast rounds half away from zero and does not
saturate, unlike the GPU's ``cvt.rn.satfinite``, and the integer version costs ~15 instructions
an element, which at M = 49152 made the kernel instruction-bound on the H200.

The exhaustive GPU checks named here (``*_mismatches``) live in :mod:`inkling_workbook.proofs.fp8_proofs`.
The code reads top-down: ``_fp8_format`` (the jit helpers of the format), ``_fp8_kernel`` (the
tile and the kernel), ``_fp8_layout`` (scale layouts and argument checks), ``_fp8_launch`` (launch
planning and the compiled hot path), then this module's public functions and their registration.

Layouts (``G = N // group_size``):

* 2-D ``x[M, N]`` / ``gateup[M, 2N]``: ``q[M, N]``; ``scales[M, G]`` row-major, or with
  ``column_major_scales=True`` a ``[M, G]`` view with strides ``(1, Mp)``, ``Mp = round_up(M, 4)``,
  of a ``[G, Mp]`` buffer (the layout TMA-based grouped GEMMs read); the padding rows
  ``M..Mp-1`` are written with zeros.
* 3-D ``x[E, T, N]`` / ``gateup[E, T, 2N]`` (experts x padded tokens): ``q[E, T, N]``;
  ``scales[E, T, G]`` row-major, or a view with strides ``(G * Tp, 1, Tp)`` of an ``[E, G, Tp]``
  buffer, ``Tp = round_up(T, 4)``, padding rows zero. With ``masked_m[E]`` (fused op), rows
  ``t >= masked_m[e]`` are neither read nor written (values are clamped to ``[0, T]`` on the
  device; nothing is read back on the host).

``scale_layout=`` names the layout by its consumer (the formula:
:data:`inkling_kernels.reference.FP8_SCALE_LAYOUT_FORMULA`, built by plain torch ops in
:func:`~inkling_kernels.reference.fp8_scales_in_layout_ref`): ``"row"`` (the default), ``"tma"``
(the column-major layout above; ``column_major_scales=True`` is its alias), ``"cublas"`` (q and the
scales padded to a multiple of 16 rows, what ``torch._scaled_mm``'s blockwise scaling accepts for every M)
and ``"ue8m0_packed"`` (DeepGEMM's sm_100 layout: UE8M0 exponent bytes four to an int32, MN-major).
Each is written by the kernel's own stores (strides, zeroed padding rows and bytes, byte stores
of the exponents): no extra pass, and fused == unfused bit for bit in every layout. The compiled
hot path (``_fast_launch``) serves ``"row"`` and ``"tma"``; the other two take the general path.
"""

from __future__ import annotations

import torch

from ._fp8_kernel import ACT_INTERLEAVED, ACT_NON_INTERLEAVED, ACT_NONE
from ._fp8_launch import _fast_launch, _launch, _pdl_default
from ._fp8_layout import (
    FP8_DTYPE,
    GROUP_SIZES,
    SCALE_LAYOUTS,
    _check_flag,
    _check_group_size,
    _check_inputs_no_grad,
    _check_out,
    _check_rows,
    _check_tensor_nd,
    _q_lead,
    _resolve_layout,
    empty_scales,
)
from ._validate import FLOAT_DTYPES, check_same_device, check_tensor

__all__ = [
    "ACT_INTERLEAVED",
    "ACT_NONE",
    "ACT_NON_INTERLEAVED",
    "FP8_DTYPE",
    "GROUP_SIZES",
    "SCALE_LAYOUTS",
    "empty_scales",
    "fp8_group_quant",
    "silu_and_mul_fp8_group_quant",
]


def fp8_group_quant(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    scale_ue8m0: bool = False,
    column_major_scales: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    enable_pdl: bool | None = None,
    scale_layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 e4m3 per token and group of ``group_size`` elements
    (:data:`~inkling_kernels.reference.FP8_GROUP_FORMULA`).

    Args:
        x: ``[M, N]`` or ``[E, T, N]`` bf16, fp16 or fp32 on CUDA (compiled) or CPU (Triton's
            interpreter); N a positive multiple of ``group_size``; rows may be strided, elements
            within a row contiguous.
        group_size: elements sharing a scale, a power of two from 16 to 1024 (default 128).
        scale_ue8m0: round each scale up to a power of two (``2 ** ceil(log2(s))``).
        column_major_scales: scales stored transposed, rows padded to a multiple of 4 with zeros
            (an alias of ``scale_layout="tma"``; ``True`` with any other ``scale_layout`` raises).
        out: optional preallocated ``(q, scales)`` in exactly the layout returned (shape, dtype,
            the unit-stride dimension; checked before the launch).
        enable_pdl: launch with programmatic dependent launch; ``None``: on for CUDA devices of
            compute capability >= 9, off on CPU.
        scale_layout: the layout of q and the scales, by consumer (``None``: ``"tma"`` if
            ``column_major_scales`` else ``"row"``); ``Mp = round_up(M, 4)`` (``"cublas"``:
            ``round_up(M, 16)``), ``G = N // group_size``:

            * ``"row"``: q ``[M, N]``; scales fp32 ``[M, G]`` contiguous.
            * ``"tma"``: q ``[M, N]``; scales fp32 ``[M, G]``, strides ``(1, Mp)``, a view of a
              ``[G, Mp]`` buffer whose padding rows are zero (DeepGEMM on Hopper, TMA grouped GEMMs).
            * ``"cublas"``: q ``[Mp, N]`` (rows ``M..Mp-1`` zero bytes); scales fp32 ``[Mp, G]``,
              strides ``(1, Mp)`` (padding rows' scale 0): what ``torch._scaled_mm``'s blockwise
              1x128 scaling accepts for every M, as either operand (``Mp % 16 == 0``). Pass both
              whole and keep rows ``[:M]`` of the product; ``q[:M]``, ``scales[:M]`` hold the
              ``"row"`` values.
            * ``"ue8m0_packed"``: ue8m0 scales implied (whatever ``scale_ue8m0`` says); q
              ``[M, N]``; scales int32 ``[M, ceil(G / 4)]``, strides ``(1, Mp)``, a view of a
              ``[ceil(G / 4), Mp]`` buffer: byte ``j`` (little-endian, lowest first) of word
              ``(m, k)`` is the exponent ``bits(s) >> 23`` of group ``4k + j``; padding groups and
              rows are zero bytes (DeepGEMM's MN-major TMA-aligned packed UE8M0 layout, sm_100).

            3-D inputs ``[E, T, ...]``: each expert laid out as the 2-D case with ``T`` rows,
            ``Tp = round_up(T, 4)`` (``"cublas"``: 16), at expert stride of its storage (q ``[E, Tp, N]`` for
            ``"cublas"``; scales strides ``(cols * Tp, 1, Tp)`` for the column-major layouts).

    Returns:
        ``q``: float8_e4m3fn, ``x``'s shape (``"cublas"``: rows padded). ``scales``: as
        ``scale_layout`` says; by default fp32 ``[M, G]`` contiguous, or with
        ``column_major_scales=True`` strides ``(1, round_up(M, 4))``; for 3-D ``[E, T, G]``
        contiguous, or strides ``(G * Tp, 1, Tp)``. ``x ~= q * scales`` per group.
    """
    if torch.compiler.is_compiling():
        _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, out, memory=False)
        return _via_ops(
            "fp8_group_quant", (x,), out, group_size, scale_ue8m0, column_major_scales, enable_pdl,
            scale_layout=scale_layout,
        )  # fmt: skip
    layout = _resolve_layout(scale_layout, column_major_scales)
    plan_key = None
    if layout in ("row", "tma"):  # the compiled hot path knows these two
        fast = _fast_launch(x, ACT_NONE, None, None, group_size, scale_ue8m0, layout == "tma", out, enable_pdl)
        if fast is not None:
            if fast[0] is not None:
                return fast
            _, plan_key, out = fast  # no plan yet: the general path launches and records it
    lead, N, G, out = _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, out)
    pdl = _pdl_default(x.device, enable_pdl)
    return _launch(x, ACT_NONE, lead, N, G, group_size, None, None, scale_ue8m0, layout, out, pdl, plan_key)


def _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, out, memory=True):
    """The checks of :func:`fp8_group_quant`: ``(lead, N, G, out)``. ``memory=False`` (fake tensors:
    the fake implementation, ``torch.compile``) leaves out the overlap checks, which read addresses."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    _check_tensor_nd("x", x, FLOAT_DTYPES)
    _check_rows("x", x)
    _check_flag("scale_ue8m0", scale_ue8m0)
    N = x.shape[-1]
    G = _check_group_size(group_size, N, "x's last dimension")
    _check_inputs_no_grad(x=x)
    lead = tuple(x.shape[:-1])
    if out is not None:
        out = _check_out(out, lead, N, G, layout, x.device, {"x": x}, memory)
    return lead, N, G, out


def silu_and_mul_fp8_group_quant(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    *,
    interleaved: bool = True,
    group_size: int = 128,
    scale_ue8m0: bool = False,
    column_major_scales: bool = False,
    masked_m: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    enable_pdl: bool | None = None,
    scale_layout: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fp8_group_quant(silu_and_mul(gateup, topk_weights, interleaved=...), ...)`` in one
    kernel, bit for bit, with no intermediate tensor.

    Args:
        gateup: ``[M, 2N]`` or ``[E, T, 2N]`` bf16, fp16 or fp32; ``interleaved=True`` (default):
            ``g0 u0 g1 u1 ...``; ``False``: ``g0..g{N-1} u0..u{N-1}``. N a positive multiple of
            ``group_size``. The activation is rounded to ``gateup.dtype`` before quantizing, as
            ``silu_and_mul`` stores it.
        topk_weights: optional per-row weights, ``[M]`` (2-D) or ``[E, T]`` (3-D), multiplied last
            in fp32.
        masked_m: optional int32/int64 ``[E]`` on gateup's device (a strided view is copied
            first), 3-D only: rows
            ``t >= masked_m[e]`` of expert e are neither read nor written (their q bytes and
            scales keep whatever ``out`` held; in a freshly allocated output they are
            uninitialized). Values are clamped to ``[0, T]`` in the kernel; the tensor is never
            read on the host (CUDA-graph safe).
        group_size, scale_ue8m0, column_major_scales, out, enable_pdl, scale_layout: as
            :func:`fp8_group_quant` (every layout, 2-D and 3-D; with ``masked_m`` the absent rows
            are left alone in every layout, the padding rows and bytes are written).

    Returns:
        ``(q, scales)``: q float8_e4m3fn ``[M, N]`` or ``[E, T, N]`` (``"cublas"``: ``[Mp, N]`` or
        ``[E, Tp, N]``); scales as :func:`fp8_group_quant` returns them for that shape and layout.
    """
    if torch.compiler.is_compiling():
        _fused_checks(
            gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout,
            out, memory=False,
        )  # fmt: skip
        return _via_ops(
            "silu_and_mul_fp8_group_quant",
            (gateup, topk_weights, interleaved),
            out,
            group_size,
            scale_ue8m0,
            column_major_scales,
            enable_pdl,
            masked_m,
            scale_layout,
        )
    layout = _resolve_layout(scale_layout, column_major_scales)
    plan_key = None
    if (interleaved is True or interleaved is False) and layout in ("row", "tma"):
        act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
        fast = _fast_launch(
            gateup, act, topk_weights, masked_m, group_size, scale_ue8m0, layout == "tma", out, enable_pdl
        )
        if fast is not None:
            if fast[0] is not None:
                return fast
            _, plan_key, out = fast  # no plan yet: the general path launches and records it
    lead, N, G, masked_m, out = _fused_checks(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout, out
    )
    pdl = _pdl_default(gateup.device, enable_pdl)
    act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
    return _launch(
        gateup, act, lead, N, G, group_size, topk_weights, masked_m, scale_ue8m0, layout, out, pdl, plan_key,
    )  # fmt: skip


def _fused_checks(
    gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout, out,
    memory=True,
):  # fmt: skip
    """The checks of :func:`silu_and_mul_fp8_group_quant`: ``(lead, N, G, masked_m, out)``;
    ``memory`` as in :func:`_quant_checks`."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    _check_tensor_nd("gateup", gateup, FLOAT_DTYPES)
    _check_rows("gateup", gateup)
    _check_flag("interleaved", interleaved)
    _check_flag("scale_ue8m0", scale_ue8m0)
    if gateup.shape[-1] % 2:
        raise ValueError(f"gateup's last dimension must be even (2N: gate and up halves), got {gateup.shape[-1]}")
    N = gateup.shape[-1] // 2
    G = _check_group_size(group_size, N, "N (half of gateup's last dimension)")
    lead = tuple(gateup.shape[:-1])
    if topk_weights is not None:
        check_tensor("topk_weights", topk_weights, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "topk_weights", topk_weights)
        if tuple(topk_weights.shape) != lead:
            raise ValueError(f"topk_weights must have shape {lead} (one weight a row), got {tuple(topk_weights.shape)}")
    if masked_m is not None:
        if gateup.dim() != 3:
            raise ValueError("masked_m applies to a 3-D gateup [E, T, 2N] only")
        check_tensor("masked_m", masked_m, ndim=1, dtypes=(torch.int32, torch.int64))
        check_same_device("gateup", gateup, "masked_m", masked_m)
        if masked_m.shape[0] != lead[0]:
            raise ValueError(
                f"masked_m must have shape ({lead[0]},) (one count per expert), got {tuple(masked_m.shape)}"
            )
        masked_m = masked_m.contiguous()  # the kernel reads the counts at unit stride: a slice is copied
    _check_inputs_no_grad(gateup=gateup, topk_weights=topk_weights)
    if out is not None:
        inputs = {"gateup": gateup, "topk_weights": topk_weights, "masked_m": masked_m}
        out = _check_out(out, lead, N, G, layout, gateup.device, inputs, memory)
    return lead, N, G, masked_m, out


# ---------------------------------------------------------------------------------------------
# torch.ops.inkling registration


def _via_ops(name, inputs, out, group_size, ue8m0, column_major, enable_pdl, masked_m=None, scale_layout=None):
    ops = torch.ops.inkling
    extra = (masked_m,) if masked_m is not None or name.startswith("silu") else ()
    if out is None:
        return getattr(ops, name)(*inputs, group_size, ue8m0, column_major, *extra, enable_pdl, scale_layout)
    getattr(ops, name + "_out")(
        *inputs, out[0], out[1], group_size, ue8m0, column_major, *extra, enable_pdl, scale_layout
    )
    return out[0], out[1]


def _quant_impl(x, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None):
    return fp8_group_quant(
        x,
        group_size,
        scale_ue8m0=scale_ue8m0,
        column_major_scales=column_major_scales,
        enable_pdl=enable_pdl,
        scale_layout=scale_layout,
    )


def _quant_out_impl(
    x, q, scales, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None
):
    fp8_group_quant(
        x,
        group_size,
        scale_ue8m0=scale_ue8m0,
        column_major_scales=column_major_scales,
        out=(q, scales),
        enable_pdl=enable_pdl,
        scale_layout=scale_layout,
    )


def _fake_outputs(lead, N, group_size, column_major_scales, scale_layout, device):
    layout = _resolve_layout(scale_layout, column_major_scales)
    q = torch.empty((*_q_lead(lead, layout), N), dtype=FP8_DTYPE, device=device)
    return q, empty_scales(lead, N // group_size, layout, device)


def _quant_fake(x, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None):
    _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, None, memory=False)
    return _fake_outputs(tuple(x.shape[:-1]), x.shape[-1], group_size, column_major_scales, scale_layout, x.device)


def _fused_impl(
    gateup,
    topk_weights,
    interleaved,
    group_size=128,
    scale_ue8m0=False,
    column_major_scales=False,
    masked_m=None,
    enable_pdl=None,
    scale_layout=None,
):
    return silu_and_mul_fp8_group_quant(
        gateup,
        topk_weights,
        interleaved=interleaved,
        group_size=group_size,
        scale_ue8m0=scale_ue8m0,
        column_major_scales=column_major_scales,
        masked_m=masked_m,
        enable_pdl=enable_pdl,
        scale_layout=scale_layout,
    )


def _fused_out_impl(
    gateup,
    topk_weights,
    interleaved,
    q,
    scales,
    group_size=128,
    scale_ue8m0=False,
    column_major_scales=False,
    masked_m=None,
    enable_pdl=None,
    scale_layout=None,
):
    silu_and_mul_fp8_group_quant(
        gateup,
        topk_weights,
        interleaved=interleaved,
        group_size=group_size,
        scale_ue8m0=scale_ue8m0,
        column_major_scales=column_major_scales,
        masked_m=masked_m,
        out=(q, scales),
        enable_pdl=enable_pdl,
        scale_layout=scale_layout,
    )


def _fused_fake(
    gateup,
    topk_weights,
    interleaved,
    group_size=128,
    scale_ue8m0=False,
    column_major_scales=False,
    masked_m=None,
    enable_pdl=None,
    scale_layout=None,
):
    _fused_checks(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout, None,
        memory=False,
    )  # fmt: skip
    lead = tuple(gateup.shape[:-1])
    return _fake_outputs(lead, gateup.shape[-1] // 2, group_size, column_major_scales, scale_layout, gateup.device)


def _quant_out_fake(
    x, q, scales, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None
):
    _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, (q, scales), memory=False)


def _fused_out_fake(
    gateup, topk_weights, interleaved, q, scales, group_size=128, scale_ue8m0=False, column_major_scales=False,
    masked_m=None, enable_pdl=None, scale_layout=None,
):  # fmt: skip
    _fused_checks(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout,
        (q, scales), memory=False,
    )  # fmt: skip


def _register() -> None:
    from ._library import register_op

    opts = "int group_size=128, bool scale_ue8m0=False, bool column_major_scales=False"
    tail = "bool? enable_pdl=None, str? scale_layout=None"
    quant_schema = f"(Tensor x, {opts}, {tail}) -> (Tensor, Tensor)"
    register_op("fp8_group_quant", quant_schema, _quant_impl, _quant_fake)
    register_op(
        "fp8_group_quant_out",
        f"(Tensor x, Tensor(a!) q, Tensor(b!) scales, {opts}, {tail}) -> ()",
        _quant_out_impl,
        _quant_out_fake,
    )
    fused_in = "Tensor gateup, Tensor? topk_weights, bool interleaved"
    fused_tail = f"{opts}, Tensor? masked_m=None, {tail}"
    register_op(
        "silu_and_mul_fp8_group_quant",
        f"({fused_in}, {fused_tail}) -> (Tensor, Tensor)",
        _fused_impl,
        _fused_fake,
    )
    register_op(
        "silu_and_mul_fp8_group_quant_out",
        f"({fused_in}, Tensor(a!) q, Tensor(b!) scales, {fused_tail}) -> ()",
        _fused_out_impl,
        _fused_out_fake,
    )


_register()

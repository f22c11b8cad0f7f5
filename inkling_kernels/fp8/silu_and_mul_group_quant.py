"""``silu_and_mul_fp8_group_quant``: SiLU-and-mul fused with FP8 (e4m3) per-token-group
quantization, the op's public function and its registration
(``torch.ops.inkling.silu_and_mul_fp8_group_quant`` and ``silu_and_mul_fp8_group_quant_out``).

A call reads on, never back: this module (the public function) -> :mod:`._launch` (the hot path,
the op's checks ``_fused_checks``, the launch plan) -> :mod:`._kernel` (the kernel, with the
activation computed by ``_silu_mul``, :mod:`inkling_kernels._activation`) -> :mod:`._format` (the
e4m3 format's jit helpers). The format, the layouts and the output shapes are described in
:mod:`inkling_kernels.fp8`; the result is ``fp8_group_quant``'s of ``silu_and_mul``'s, bit for bit.
"""

from __future__ import annotations

import torch

from ._launch import SCHEMA_OPTS, SCHEMA_TAIL, _fused_checks, _fused_eager, _via_ops
from ._layout import _fake_outputs


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
    return _fused_eager(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, out, enable_pdl,
        scale_layout,
    )  # fmt: skip


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


def _fused_out_fake(
    gateup, topk_weights, interleaved, q, scales, group_size=128, scale_ue8m0=False, column_major_scales=False,
    masked_m=None, enable_pdl=None, scale_layout=None,
):  # fmt: skip
    _fused_checks(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout,
        (q, scales), memory=False,
    )  # fmt: skip


def _register() -> None:
    from .._library import register_op

    opts, tail = SCHEMA_OPTS, SCHEMA_TAIL
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

"""``fp8_group_quant``: FP8 (e4m3) per-token-group quantization, the op's public function and its
registration (``torch.ops.inkling.fp8_group_quant`` and ``fp8_group_quant_out``).

A call reads on, never back: this module (the public function) -> :mod:`._launch` (the hot path,
the op's checks ``_quant_checks``, the launch plan) -> :mod:`._kernel` (the kernel, ``ACT_NONE``:
``x`` as it is) -> :mod:`._format` (the e4m3 format's jit helpers). The format, the layouts and
the output shapes are described in :mod:`inkling_kernels.fp8`.
"""

from __future__ import annotations

import torch

from ._launch import SCHEMA_OPTS, SCHEMA_TAIL, _quant_checks, _quant_eager, _via_ops
from ._layout import _fake_outputs


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
    return _quant_eager(x, group_size, scale_ue8m0, column_major_scales, out, enable_pdl, scale_layout)


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


def _quant_fake(x, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None):
    _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, None, memory=False)
    return _fake_outputs(tuple(x.shape[:-1]), x.shape[-1], group_size, column_major_scales, scale_layout, x.device)


def _quant_out_fake(
    x, q, scales, group_size=128, scale_ue8m0=False, column_major_scales=False, enable_pdl=None, scale_layout=None
):
    _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, (q, scales), memory=False)


def _register() -> None:
    from .._library import register_op

    opts, tail = SCHEMA_OPTS, SCHEMA_TAIL
    quant_schema = f"(Tensor x, {opts}, {tail}) -> (Tensor, Tensor)"
    register_op("fp8_group_quant", quant_schema, _quant_impl, _quant_fake)
    register_op(
        "fp8_group_quant_out",
        f"(Tensor x, Tensor(a!) q, Tensor(b!) scales, {opts}, {tail}) -> ()",
        _quant_out_impl,
        _quant_out_fake,
    )


_register()

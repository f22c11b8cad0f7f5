"""The package's ops as ``torch.ops.inkling.*``, for ``torch.compile`` and CUDA graphs.

Registered with :func:`._library.register_op` (``Library.define`` + ``impl`` + ``register_fake``,
chosen for its host time per call). Each op calls the same checks and launch as the public
Python function; the fake implementations run the same checks (those that read no values and no
addresses), so a bad argument or a side tensor on another device (``meta`` included) raises the
same ``ValueError``/``TypeError`` on fake tensors, then compute shapes:

* ``silu_and_mul(Tensor gateup, Tensor? topk_weights=None, ScalarType? out_dtype=None,
  bool interleaved=True, bool? enable_pdl=None) -> Tensor``  ``[M, N]``
* ``silu_and_mul_out(Tensor gateup, Tensor? topk_weights, bool interleaved, bool? enable_pdl, *,
  Tensor(a!) out) -> ()``
* ``nvfp4_quant(Tensor x, Tensor global_scale, Tensor? expert_offsets=None,
  Tensor? blockscale_offsets=None, bool swizzle=True, SymInt? scale_rows=None,
  bool? validate=None, bool? enable_pdl=None) -> (Tensor, Tensor)``
* ``nvfp4_quant_out(Tensor x, Tensor global_scale, Tensor? expert_offsets,
  Tensor? blockscale_offsets, bool swizzle, bool? validate, bool? enable_pdl, *,
  Tensor(a!) packed, Tensor(b!) scales) -> ()``
* ``silu_and_mul_nvfp4_quant(Tensor gateup, Tensor global_scale, Tensor? expert_offsets=None,
  Tensor? blockscale_offsets=None, bool interleaved=False, Tensor? topk_weights=None,
  bool swizzle=True, SymInt? scale_rows=None, bool? validate=None, bool? enable_pdl=None)
  -> (Tensor, Tensor)``
* ``silu_and_mul_nvfp4_quant_out(..., *, Tensor(a!) packed, Tensor(b!) scales) -> ()`` (the
  arguments of the functional op without ``scale_rows``).

The functional NVFP4 ops return swizzled scales with ``scale_rows`` rows, by default
:func:`~inkling_kernels.nvfp4.max_blockscale_rows` ``(M, E)`` (always, eager or compiled, unlike
the public functions, which return exactly ``blockscale_offsets[-1]`` rows when their value checks
read the offsets): a row count that depends on shapes only, so a compiled graph needs no guard on
the expert split and the fake and real outputs agree. Inside ``torch.compile``
the public functions call these ops, so their Python launch heuristics never become guards.
"""

from __future__ import annotations

import torch

from . import nvfp4 as _nvfp4
from . import silu_and_mul as _silu
from ._library import register_op
from .nvfp4 import _check_fused_args
from .reference import NVFP4_BLOCK


def _silu_impl(gateup, topk_weights=None, out_dtype=None, interleaved=True, enable_pdl=None):
    return _silu._silu_and_mul_eager(gateup, topk_weights, out_dtype, interleaved, None, None, enable_pdl)


def _silu_fake(gateup, topk_weights=None, out_dtype=None, interleaved=True, enable_pdl=None):
    _silu._check_args(gateup, topk_weights, out_dtype, None, interleaved, memory=False)
    return gateup.new_empty((gateup.shape[0], gateup.shape[1] // 2), dtype=out_dtype or gateup.dtype)


def _silu_out_impl(gateup, topk_weights, interleaved, enable_pdl, *, out):
    _silu._silu_and_mul_eager(gateup, topk_weights, None, interleaved, out, None, enable_pdl)


def _silu_out_fake(gateup, topk_weights, interleaved, enable_pdl, *, out):
    _silu._check_args(gateup, topk_weights, None, out, interleaved, memory=False)


def _scale_shape(M, N, E, swizzle, scale_rows):
    if not swizzle:
        return M, N // NVFP4_BLOCK
    rows = scale_rows if scale_rows is not None else (M + 127 * E) // 128 * 128
    return rows, (N // NVFP4_BLOCK + 3) // 4 * 4


def _nvfp4_fake_outputs(src, N, expert_offsets, swizzle, scale_rows):
    M = src.shape[0]
    E = expert_offsets.shape[0] - 1 if expert_offsets is not None else 1
    packed = src.new_empty((M, N // 2), dtype=torch.uint8)
    return packed, src.new_empty(_scale_shape(M, N, E, swizzle, scale_rows), dtype=torch.uint8)


def _bound_rows(src, expert_offsets, swizzle, scale_rows):
    """The registered functional ops always return the fake's row count (the static bound)."""
    if scale_rows is not None or not swizzle:
        return scale_rows
    E = expert_offsets.shape[0] - 1 if expert_offsets is not None else 1
    return _nvfp4.max_blockscale_rows(src.shape[0], max(E, 1))


def _quant_impl(x, global_scale, expert_offsets=None, blockscale_offsets=None, swizzle=True, scale_rows=None,
                validate=None, enable_pdl=None):  # fmt: skip
    scale_rows = _bound_rows(x, expert_offsets, swizzle, scale_rows)
    return _nvfp4._nvfp4_quant_eager(
        x, global_scale, expert_offsets, blockscale_offsets, swizzle, None, validate, None, scale_rows, enable_pdl
    )


def _quant_fake(x, global_scale, expert_offsets=None, blockscale_offsets=None, swizzle=True, scale_rows=None,
                validate=None, enable_pdl=None):  # fmt: skip
    _nvfp4._check_static(
        "x", x, _nvfp4._check_x(x), global_scale, expert_offsets, blockscale_offsets, None, swizzle, None, validate,
        scale_rows, memory=False,
    )  # fmt: skip
    return _nvfp4_fake_outputs(x, x.shape[1], expert_offsets, swizzle, scale_rows)


def _quant_out_impl(x, global_scale, expert_offsets, blockscale_offsets, swizzle, validate, enable_pdl, *, packed,
                    scales):  # fmt: skip
    _nvfp4._nvfp4_quant_eager(
        x, global_scale, expert_offsets, blockscale_offsets, swizzle, (packed, scales), validate, None, None,
        enable_pdl,
    )  # fmt: skip


def _quant_out_fake(x, global_scale, expert_offsets, blockscale_offsets, swizzle, validate, enable_pdl, *, packed,
                    scales):  # fmt: skip
    _nvfp4._check_static(
        "x", x, _nvfp4._check_x(x), global_scale, expert_offsets, blockscale_offsets, None, swizzle,
        (packed, scales), validate, None, memory=False,
    )  # fmt: skip


def _fused_impl(gateup, global_scale, expert_offsets=None, blockscale_offsets=None, interleaved=False,
                topk_weights=None, swizzle=True, scale_rows=None, validate=None, enable_pdl=None):  # fmt: skip
    scale_rows = _bound_rows(gateup, expert_offsets, swizzle, scale_rows)
    return _nvfp4._fused_eager(
        gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle, None, validate,
        None, scale_rows, enable_pdl,
    )  # fmt: skip


def _fused_fake(gateup, global_scale, expert_offsets=None, blockscale_offsets=None, interleaved=False,
                topk_weights=None, swizzle=True, scale_rows=None, validate=None, enable_pdl=None):  # fmt: skip
    _nvfp4._check_static(
        "gateup", gateup, _check_fused_args(gateup, interleaved, topk_weights), global_scale, expert_offsets,
        blockscale_offsets, topk_weights, swizzle, None, validate, scale_rows, memory=False,
    )  # fmt: skip
    return _nvfp4_fake_outputs(gateup, gateup.shape[1] // 2, expert_offsets, swizzle, scale_rows)


def _fused_out_impl(gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
                    validate, enable_pdl, *, packed, scales):  # fmt: skip
    _nvfp4._fused_eager(
        gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
        (packed, scales), validate, None, None, enable_pdl,
    )  # fmt: skip


def _fused_out_fake(gateup, global_scale, expert_offsets, blockscale_offsets, interleaved, topk_weights, swizzle,
                    validate, enable_pdl, *, packed, scales):  # fmt: skip
    _nvfp4._check_static(
        "gateup", gateup, _check_fused_args(gateup, interleaved, topk_weights), global_scale, expert_offsets,
        blockscale_offsets, topk_weights, swizzle, (packed, scales), validate, None, memory=False,
    )  # fmt: skip


silu_and_mul = register_op(
    "silu_and_mul",
    "(Tensor gateup, Tensor? topk_weights=None, ScalarType? out_dtype=None, bool interleaved=True, "
    "bool? enable_pdl=None) -> Tensor",
    _silu_impl,
    _silu_fake,
)
silu_and_mul_out = register_op(
    "silu_and_mul_out",
    "(Tensor gateup, Tensor? topk_weights, bool interleaved, bool? enable_pdl, *, Tensor(a!) out) -> ()",
    _silu_out_impl,
    _silu_out_fake,
)
nvfp4_quant = register_op(
    "nvfp4_quant",
    "(Tensor x, Tensor global_scale, Tensor? expert_offsets=None, Tensor? blockscale_offsets=None, "
    "bool swizzle=True, SymInt? scale_rows=None, bool? validate=None, bool? enable_pdl=None) -> (Tensor, Tensor)",
    _quant_impl,
    _quant_fake,
)
nvfp4_quant_out = register_op(
    "nvfp4_quant_out",
    "(Tensor x, Tensor global_scale, Tensor? expert_offsets, Tensor? blockscale_offsets, bool swizzle, "
    "bool? validate, bool? enable_pdl, *, Tensor(a!) packed, Tensor(b!) scales) -> ()",
    _quant_out_impl,
    _quant_out_fake,
)
silu_and_mul_nvfp4_quant = register_op(
    "silu_and_mul_nvfp4_quant",
    "(Tensor gateup, Tensor global_scale, Tensor? expert_offsets=None, Tensor? blockscale_offsets=None, "
    "bool interleaved=False, Tensor? topk_weights=None, bool swizzle=True, SymInt? scale_rows=None, "
    "bool? validate=None, bool? enable_pdl=None) -> (Tensor, Tensor)",
    _fused_impl,
    _fused_fake,
)
silu_and_mul_nvfp4_quant_out = register_op(
    "silu_and_mul_nvfp4_quant_out",
    "(Tensor gateup, Tensor global_scale, Tensor? expert_offsets, Tensor? blockscale_offsets, bool interleaved, "
    "Tensor? topk_weights, bool swizzle, bool? validate, bool? enable_pdl, *, Tensor(a!) packed, "
    "Tensor(b!) scales) -> ()",
    _fused_out_impl,
    _fused_out_fake,
)

ALL_OPS = (
    silu_and_mul,
    silu_and_mul_out,
    nvfp4_quant,
    nvfp4_quant_out,
    silu_and_mul_nvfp4_quant,
    silu_and_mul_nvfp4_quant_out,
)

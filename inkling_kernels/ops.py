"""The package's ops as ``torch.ops.inkling.*``, for ``torch.compile`` and CUDA graphs: the index.

Each op is registered next to its launcher, in its own module (:mod:`.silu_and_mul`,
:mod:`.nvfp4`, :mod:`.fp8.group_quant`, :mod:`.fp8.silu_and_mul_group_quant`), with
:func:`._library.register_op` (``Library.define`` + ``impl`` + ``register_fake``, chosen for its
host time per call); importing this module imports them all. Each op calls the same checks and launch as the public
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

* ``fp8_group_quant``, ``fp8_group_quant_out``, ``silu_and_mul_fp8_group_quant`` and
  ``silu_and_mul_fp8_group_quant_out``: the FP8 ops, schemas in their modules.

The functional NVFP4 ops return swizzled scales with ``scale_rows`` rows, by default
:func:`~inkling_kernels.nvfp4.max_blockscale_rows` ``(M, E)`` (always, eager or compiled, unlike
the public functions, which return exactly ``blockscale_offsets[-1]`` rows when their value checks
read the offsets): a row count that depends on shapes only, so a compiled graph needs no guard on
the expert split and the fake and real outputs agree. Inside ``torch.compile``
the public functions call these ops, so their Python launch heuristics never become guards.
"""

from __future__ import annotations

import torch

from . import fp8, nvfp4, silu_and_mul  # noqa: F401  (each registers its ops on import)

OP_NAMES = (
    "silu_and_mul",
    "silu_and_mul_out",
    "nvfp4_quant",
    "nvfp4_quant_out",
    "silu_and_mul_nvfp4_quant",
    "silu_and_mul_nvfp4_quant_out",
    "fp8_group_quant",
    "fp8_group_quant_out",
    "silu_and_mul_fp8_group_quant",
    "silu_and_mul_fp8_group_quant_out",
)
ALL_OPS = tuple(getattr(torch.ops.inkling, name).default for name in OP_NAMES)

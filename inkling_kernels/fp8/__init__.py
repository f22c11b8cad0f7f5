"""FP8 per-token-group quantization, plain and fused with SiLU-and-mul: the Hopper MoE format.

On the H200 the second grouped GEMM of an MoE layer reads its activations as block-scaled FP8
(DeepSeek style): e4m3 values, one fp32 scale per row and per group of ``group_size`` (default
128) consecutive elements. Unfused, ``silu_and_mul`` writes ``[M, N]`` bf16 (2N bytes a row) and a
second kernel reads it back; the fused kernel reads ``gateup`` once (4N bytes a row) and writes
only the e4m3 bytes (N) and the scales (4N/group_size).

Both paths run :func:`._kernel._fp8_group_kernel` and follow
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

The package reads in the order a call takes, one module per op over the modules both share:

* :mod:`.group_quant` (``fp8_group_quant``) and :mod:`.silu_and_mul_group_quant`
  (``silu_and_mul_fp8_group_quant``): the op's public function and its ``torch.ops.inkling``
  registration. A call hands over to
* :mod:`._launch`: the eager entry, the hot path, the op's checks (next to the hot path's own,
  which must never accept more), the launch plan (tiles, constexpr flags, work list) and the
  launch; then
* :mod:`._kernel`: the kernel and its tile, calling ``_silu_mul`` (:mod:`inkling_kernels._activation`)
  for the fused op and
* :mod:`._format`: the e4m3 format's jit helpers (rounding, scale, division, group maximum).

:mod:`._layout` (the e4m3 dtype, group sizes, the scale layouts and the checks of an argument
against them) is a leaf that the checks and the launch consult, read once, like the package's
check primitives (``inkling_kernels._validate``) and its launch on either backend
(``inkling_kernels._backend``). Following an op's input from its public function to the launch
never returns to a module it has left. Why a package, not one module an op: the two ops share
the hot path, the plan and the kernel (about 1,300 lines), which a module an op would either
duplicate or split by kind, the layout that sent a reader back and forth.

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
hot path (``_launch._fast_launch``) serves ``"row"`` and ``"tma"``; the other two take the general path.
"""

from __future__ import annotations

from .._activation import ACT_INTERLEAVED, ACT_NON_INTERLEAVED, ACT_NONE
from ._layout import FP8_DTYPE, GROUP_SIZES, SCALE_LAYOUTS, empty_scales
from .group_quant import fp8_group_quant
from .silu_and_mul_group_quant import silu_and_mul_fp8_group_quant

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

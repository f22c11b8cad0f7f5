"""The activation's one operation order, shared by every kernel of the package: ``_silu_mul``.

``silu(gate) * up`` is computed in exactly one order (upcast to fp32, ``gate * sigmoid(gate) *
up``), here, and :mod:`inkling_kernels.silu_and_mul`, :mod:`inkling_kernels.nvfp4` and
:mod:`inkling_kernels.fp8` all call it, so the fused kernels agree with ``silu_and_mul`` bit for
bit by construction. A shared helper, read once: each op's walk reaches it from its kernel, last.
``_rcp_approx`` is also the FP8 format's reciprocal (``inkling_kernels.fp8._format``).
"""

from __future__ import annotations

import triton
import triton.language as tl

# What a kernel's ``ACT`` constexpr computes, one numbering for the NVFP4 and FP8 kernels (which
# compare ``ACT`` with these values as literals): the input itself (a plain quantizer), or
# ``_silu_mul`` of an interleaved ``gateup`` or of a gate || up one.
ACT_NONE, ACT_INTERLEAVED, ACT_NON_INTERLEAVED = 0, 1, 2


@triton.jit
def _ex2_ftz(x):
    """``ex2.approx.ftz.f32``: one MUFU.EX2. Triton's ``exp`` uses ``ex2.approx.f32``, whose
    subnormal handling costs three more instructions (a compare and two predicated multiplies);
    the two differ only where the result is below 2**-126 (and for subnormal inputs, where both
    give 1.0)."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _rcp_approx(x):
    """``rcp.approx.ftz.f32``: one MUFU.RCP (within an ulp of ``1 / x``)."""
    return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _silu_mul(gate, up, FTZ_EXP: tl.constexpr = 0):
    """The one operation order shared by every kernel of the workbook (and the fused FP4 path).

    ``FTZ_EXP`` (compiled launches of the fused FP8 kernel only; 0 elsewhere) computes
    ``tl.sigmoid``'s ``1 / (1 + exp(-g))`` in fewer instructions with the same bits for every fp32
    ``g`` (``sigmoid_paths_mismatches`` checks all 2**32 on the GPU, each level against 0):

    - 1 (other sm_89+ GPUs): the exponential flushes subnormal results to zero (one MUFU.EX2, not
      Triton's ``exp`` with its subnormal fix-up): the results that differ are below 2**-126,
      where ``1 + e`` rounds to 1.0 either way. Four instructions fewer an element.
    - 2 (sm_90, where it is proved): that, and ``1 / b``
      (``b = 1 + e``, PTX's ``div.full.f32``: MUFU.RCP of ``b``, except past 2**126 where ``b``
      and the quotient are scaled by 1/4 first, a compare, a select and two multiplies) always
      scaled: ``rcp(fma(e, 1/4, 1/4)) / 4``.
      ``fma(e, 1/4, 1/4)`` is ``b / 4`` exactly (``b >= 1``: a power-of-two scale moves no
      rounding), MUFU.RCP of ``b / 4`` is 4 times that of ``b`` where both are normal (it reads
      the mantissa and negates the exponent), and the final quarter is exact above 2**-126 and
      the scaled branch's own product below. Three instructions fewer an element again.
    """
    g = gate.to(tl.float32)
    u = up.to(tl.float32)
    if FTZ_EXP:
        # exp(-g) = ex2(-g * log2(e)), the fp32 constant tl.exp uses; -g is Triton's 0 - g
        # except for g = +0 (ex2 of +-0 is 1.0 either way)
        e = _ex2_ftz(g * -1.4426950408889634)
        if FTZ_EXP == 2:
            sig = _rcp_approx(tl.fma(e, 0.25, 0.25)) * 0.25
        else:
            sig = 1.0 / (1.0 + e)
        return g * sig * u
    return g * tl.sigmoid(g) * u

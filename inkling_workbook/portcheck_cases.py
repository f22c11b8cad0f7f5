"""portcheck's case matrices for the SiLU-and-mul port (``inkling_kernels.silu_and_mul``) against
its helion original (``inkling_workbook.helion_original.silu_and_mul_helion``)::

    python -m inkling_workbook portcheck inkling_workbook.helion_original:silu_and_mul_helion \\
        inkling_kernels:silu_and_mul --cases inkling_workbook.portcheck_cases:cpu_cases \\
        --reference inkling_workbook.portcheck_cases:reference

Each case is ``gateup [M, 2N]`` (and ``topk_weights [M]`` in the weighted cases) of one value
class, both layouts, the output poisoned (``out=``). The helion originals need contiguous rows, so
the matrices are contiguous. ``cpu_cases``: M <= 2, N = 384 (helion in the Triton interpreter
takes seconds to generate and compile each kernel variant); ``gpu_cases``: decode and prefill sizes.
"""

from __future__ import annotations

import torch

from inkling_kernels.reference import silu_and_mul_ref

from . import portcheck


def _out(args: tuple, kwargs: dict) -> torch.Tensor:
    gateup = args[0]
    dtype = kwargs.get("out_dtype") or gateup.dtype
    return torch.empty((gateup.shape[0], gateup.shape[1] // 2), dtype=dtype, device=gateup.device)


def silu_cases(ms, ns, value_classes=portcheck.VALUE_CLASSES, prefix: str = "") -> list[portcheck.Case]:
    """``gateup [M, 2N]`` bf16 for every M, N, value class and layout; weighted ones (random and
    edges); fp32 gateup to a bf16 output at the largest shape (random and ties)."""
    layouts = ({"interleaved": True}, {"interleaved": False})
    shapes = [(m, 2 * n) for m in ms for n in ns]
    weighted = [((m, 2 * n), (m,)) for m in ms for n in ns]
    common = {"strides": ("contiguous",), "kwargs": layouts, "out": _out}
    cases = portcheck.matrix(shapes=shapes, value_classes=value_classes, prefix=prefix, **common)
    cases += portcheck.matrix(shapes=weighted, value_classes=("random", "edges"), prefix=prefix + "w ", **common)
    # fp32 gateup rounded once to a bf16 output; "ties" holds fp32 inputs halfway between two bf16
    cases += portcheck.matrix(
        shapes=shapes[-1:],
        dtypes=(torch.float32,),
        value_classes=("random", "ties"),
        strides=("contiguous",),
        kwargs=({"interleaved": True, "out_dtype": torch.bfloat16},),
        out=_out,
        prefix=prefix,
    )
    return cases


def cpu_cases() -> list[portcheck.Case]:
    """The interpreter-sized matrix: M = 1 and 2, N = 384 (30 cases)."""
    return silu_cases((1, 2), (384,))


def gpu_cases() -> list[portcheck.Case]:
    """Decode and prefill sizes for a CUDA run."""
    return silu_cases((1, 4, 16, 96, 4096), (768, 1536, 3072))


def reference(gateup, topk_weights=None, out_dtype=None, *, interleaved: bool = True, out=None):
    """The reference: the kernels' formula computed in float64, then rounded to the output dtype
    (``silu_and_mul_ref`` takes no float64 output; portcheck would round it there anyway)."""
    return silu_and_mul_ref(gateup, topk_weights, out_dtype, interleaved=interleaved, compute_dtype=torch.float64)

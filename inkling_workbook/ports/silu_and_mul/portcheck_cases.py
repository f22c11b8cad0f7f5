"""portcheck's case matrices for the SiLU-and-mul port (``inkling_kernels.silu_and_mul``) against
its helion original (``inkling_workbook.ports.silu_and_mul.helion_original.silu_and_mul_helion``)::

    python -m portcheck inkling_workbook.ports.silu_and_mul.helion_original:silu_and_mul_helion \\
        inkling_kernels:silu_and_mul --cases inkling_workbook.ports.silu_and_mul.portcheck_cases:cpu_cases \\
        --reference inkling_workbook.ports.silu_and_mul.portcheck_cases:reference

Each case is ``gateup [M, 2N]`` (and ``topk_weights [M]`` in the weighted cases) of one value
class, both layouts, the output poisoned (``out=``). The helion originals need contiguous rows, so
the matrices are contiguous. ``cpu_cases``: M <= 2, N = 384 (helion in the Triton interpreter
takes seconds to generate and compile each kernel variant); ``gpu_cases``: decode and prefill sizes.

The bitwise records (``data/bitwise_<device>.json``, ``python -m inkling_workbook check``) run
the *bitwise* matrices: :func:`bitwise_cases` (``gpu``: 336 cases, M 1..49152, N 1..3072, one
with numel > 2**31; ``quick``; ``cpu``), each case one shape of :func:`bitwise_shapes` with
fresh ``randn * 2`` values drawn on the device from the case's own seed. Every case is checked
three ways, each a portcheck comparison with the port (``inkling_kernels:silu_and_mul``) as the
port side: against the helion original (fixed tile), against the helion original with the sm_90
table config (:func:`helion_sm90`, the cases whose width the table has), and against the port on
the same gate/up data laid out in the other layout (:func:`port_other_layout`). The reference
of the ulp budget is :func:`same_order_reference`. ``inkling_workbook.ports.silu_and_mul.harness`` assembles the
record from the three reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import portcheck
from inkling_kernels.reference import join_gateup, silu_and_mul_ref, split_gateup
from inkling_kernels.silu_and_mul import silu_and_mul
from inkling_workbook.ports.silu_and_mul import helion_original


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


# ---- the bitwise matrices of the records -------------------------------------------------------

DECODE_M = (1, 2, 4, 6, 8, 16)
PREFILL_M = (96, 384, 1536, 4096, 49152)
WIDTHS = (384, 768, 960, 1024, 1536, 2048, 3072)
ODD_WIDTHS = (1, 7, 300, 1000, 1537)
BIG_N = 1024
BIG_M = (2**31 + 16384) // (2 * BIG_N)  # gateup numel = 2**31 + 16384, as in the source document
MATRICES = ("gpu", "quick", "cpu")


@dataclass(frozen=True)
class Shape:
    """One case of the bitwise matrix: ``gateup [M, 2N]`` of ``dtype`` in one layout, with or
    without per-row weights, to ``out_dtype``."""

    M: int
    N: int
    interleaved: bool
    weighted: bool
    dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        layout = "il" if self.interleaved else "nil"
        w = "+w" if self.weighted else ""
        od = "" if self.out_dtype == self.dtype else f"->{self.out_dtype}"
        return f"M={self.M} N={self.N} {layout}{w} {self.dtype}{od}"


def bitwise_shapes(kind: str = "gpu") -> list[Shape]:
    """``gpu``: every M of decode and prefill by every width, both layouts, with and without
    weights; odd widths; fp32 outputs; fp16 inputs; two cases with numel > 2**31 (336 in all).
    ``quick``: a GPU subset for a fast look; ``cpu``: the same structure at interpreter sizes."""
    if kind == "gpu":
        ms, ns, odd_m, big = DECODE_M + PREFILL_M, WIDTHS, (3, 1000), True
    elif kind == "quick":
        ms, ns, odd_m, big = (1, 6, 16, 384, 4096), (768, 1024, 3072), (3,), False
    elif kind == "cpu":
        ms, ns, odd_m, big = (1, 2, 6, 16, 96), (384, 1024), (3,), False
    else:
        raise ValueError(f"kind must be one of {MATRICES}, got {kind!r}")
    both = (True, False)
    shapes = [Shape(m, n, il, w) for il in both for w in both for m in ms for n in ns]
    shapes += [Shape(m, n, il, False) for il in both for m in odd_m for n in ODD_WIDTHS]
    shapes += [Shape(ms[-1], 768, il, w, out_dtype="float32") for il in both for w in both]
    shapes += [Shape(ms[2], 1024, il, False, dtype="float16") for il in both]
    if big:
        shapes += [Shape(BIG_M, BIG_N, il, False) for il in both]
    return shapes


def _bitwise_make(shape: Shape):
    dtype, out_dtype = getattr(torch, shape.dtype), getattr(torch, shape.out_dtype)

    def make(seed: int, device: torch.device):
        # drawn on the device: a host draw of the prefill inputs would take seconds a call
        gen = torch.Generator(device=device).manual_seed(seed)
        gateup = torch.randn((shape.M, 2 * shape.N), generator=gen, device=device, dtype=dtype).mul_(2)
        args = (gateup, torch.rand(shape.M, generator=gen, device=device)) if shape.weighted else (gateup,)
        return args, {"out_dtype": out_dtype, "interleaved": shape.interleaved}

    return make


def bitwise_cases(kind: str = "gpu", seed: int = 0) -> list[portcheck.Case]:
    """:func:`bitwise_shapes` as portcheck cases (named as the shapes; seed ``seed`` + position;
    the shape's fields in ``meta``; outputs poisoned through ``out=``)."""
    shapes = bitwise_shapes(kind)
    return [
        portcheck.Case(s.name, make=_bitwise_make(s), seed=seed + i, out=_out, meta=dict(vars(s)))
        for i, s in enumerate(shapes)
    ]


def bitwise_gpu_cases() -> list[portcheck.Case]:
    """``--cases`` of the GPU record's reproducers."""
    return bitwise_cases("gpu")


def bitwise_quick_cases() -> list[portcheck.Case]:
    return bitwise_cases("quick")


def bitwise_cpu_cases() -> list[portcheck.Case]:
    """``--cases`` of the CPU record's reproducers."""
    return bitwise_cases("cpu")


def has_sm90_config(case: portcheck.Case) -> bool:
    """Whether the sm_90 table has a config for the case's width (and weights)."""
    return helion_original.sm90_config_index(2 * case.meta["N"], case.meta["weighted"]) is not None


def helion_sm90(gateup, topk_weights=None, out_dtype=None, *, interleaved: bool = True, out=None):
    """The helion original with the config production's AOT wrapper picked on sm_90."""
    return helion_original.silu_and_mul_helion(
        gateup, topk_weights, out_dtype, interleaved=interleaved, out=out, config="sm90_table"
    )


def port_other_layout(gateup, topk_weights=None, out_dtype=None, *, interleaved: bool = True, out=None):
    """The port on the same gate/up values laid out in the other layout, through the other kernel."""
    gate, up = split_gateup(gateup, interleaved)
    other = join_gateup(gate, up, not interleaved)
    del gate, up
    return silu_and_mul(other, topk_weights, out_dtype, interleaved=not interleaved, out=out)


def same_order_reference(gateup, topk_weights=None, out_dtype=None, *, interleaved: bool = True, out=None):
    """torch in the kernels' order in fp32, one cast to the output dtype: the reference of the
    records' ulp budget (``harness.ULP_BUDGET``)."""
    return silu_and_mul_ref(gateup, topk_weights, out_dtype, interleaved=interleaved)

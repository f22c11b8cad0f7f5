"""portcheck: check a port against its original, bit for bit, over a case matrix.

The workbook's porting method as one tool: copy the original's operation order, then check the
port's raw output bits against the original's on many inputs, compare the code each one
generates, and time both the same way. This module does the checking; the operation order is yours.

Quick start::

    from inkling_workbook import portcheck

    cases = portcheck.matrix(shapes=[(2, 768)], dtypes=[torch.bfloat16])
    report = portcheck.run(original_op, port_op, cases, reference=op_in_float64)
    print(report.to_markdown())
    assert report.ok

or from a shell (``MODULE:NAME`` names an attribute of an importable module)::

    python -m inkling_workbook portcheck MOD:ORIGINAL MOD:PORT --cases MOD:CASES \\
        [--device cuda] [--reference MOD:REF] [--out DIR] [--only 'CASE NAME'] [--no-code] [--timing]
        [--jobs N]

It prints the markdown summary, writes ``report.md`` and ``report.json`` to ``--out``, and exits
0 when every case is equal and deterministic, 1 otherwise, 2 on a usage error (a name that does
not resolve, an empty case list, a missing dependency such as helion). ``MOD:CASES`` is a list of
cases or a function of no arguments returning one.

**Callables.** ``original`` and ``port`` take a case's inputs (``fn(*args, **kwargs)``) and return
a tensor or a tuple/list of tensors. Both see the same inputs, rebuilt from the case's seed for
every call (so an op that writes its inputs cannot affect the other side).

**Cases.** A :class:`Case` has a ``name``, a ``seed`` and either a builder ``make(seed, device) ->
(args, kwargs)`` or fields that describe the inputs: ``shapes`` (one tensor per shape), ``dtype``,
``value_class``, ``stride`` and fixed ``kwargs``. ``out`` (optional), a function ``(args, kwargs)
-> tensor or tuple``, allocates output buffers: each call then gets ``out=`` buffers filled with
0xFF bytes (NaN for floats), so an element a kernel leaves unwritten shows as a difference.
:func:`matrix` builds the product of shapes x dtypes x value classes x strides x keyword variants
x seeds. Value classes (:data:`VALUE_CLASSES`), all on top of fresh ``randn * 3`` values, never
zeros only, each special value written at unique positions (an index assignment with repeated
positions is nondeterministic in torch):

* ``random``: the normal values alone.
* ``edges``: 1/8 of the elements set to 0, -0, +-max finite, +-min normal, +-1e4 and +-30.
* ``nan_inf``: 1/16 of the elements NaN, +Inf or -Inf (at least one NaN).
* ``subnormal``: 1/4 of the elements subnormal in the dtype (random sign and mantissa).
* ``ties``: half the elements are rounding ties: for fp32 and fp16, values exactly halfway between
  two adjacent bf16 values (the low 16 bits of an fp32 are 0x8000); a bf16 tensor cannot hold a
  bf16 tie, so for bf16 they are values halfway between two adjacent fp8 e4m3 values (the low 4
  mantissa bits are 1000).

``stride="row_padded"`` lays each tensor of 2 or more dimensions out with 16 spare elements
at the end of each row (a slice of a wider buffer, the spare elements NaN).

**What is checked, per case.** Output count, shape and dtype (a mismatch is reported as such);
raw bits of every output (``t.view(int dtype of the same width)``): the count of differing
elements and the first 5 differing coordinates with both values in hex and as numbers; NaN and
Inf positions separately, and NaNs at the same position whose payloads differ; determinism (each
callable run ``reruns`` times on the same inputs gives the same bits; a pair ``(original, port)``
runs the sides a different number of times, and a side run once is not checked: ``None``); with
``reference`` (a callable computing in float64), a histogram of ulp distances in the output
dtype (representable values between the reference rounded to that dtype and the output; bf16,
fp16, fp32 and e4m3fn) in buckets 0, 1, 2, 3-4, 5-8, >8 and ``nan`` (NaN on one side only), and
the largest distance (``ulp_max``). A mismatch carries the inputs' seed and a reproducer. The outputs stay on the
device (copied) and are compared there; the inputs' digest of a CUDA tensor is a checksum
computed on the GPU (:func:`fingerprint`). ``Case.meta`` fields come back in the case's row.

**Generated code** (``code=True``). Every Triton launch each callable makes on the first case is
captured (``JITFunction.run`` and ``InterpretedFunction.run`` are wrapped while it runs, so any
Triton kernel is seen, helion's generated ones included, compiled or under the interpreter; on
CUDA an empty launch hook is installed too, which sends the package's thin launcher through
``JITFunction.run``). Each distinct kernel is compiled for sm_90 (compile only, on CPU too) with
the specialization Triton would apply (16-byte divisibility, ints equal to 1), and the report
gives its PTX opcode mix, registers and spills from ``cuobjdump -res-usage`` over the cubin (Triton
ships ptxas and cuobjdump), and the SASS instruction count up to the first ``EXIT``; on CUDA it
compiles for the device's own target and adds ``n_regs``/``n_spills`` of the loaded kernel.

**Timing** (``timing=True``, CUDA only): both callables on each case's inputs, by the workbook's
method (:func:`inkling_workbook.bench.time_calls`: CUDA-graph replay of a fixed count of calls,
interleaved passes; median and range in microseconds).

**Several processes** (``--jobs N``, :func:`run_parallel`, :func:`submit` on a :func:`pool`): the
cases checked a few at a time in fresh (``spawn``) processes that resolve the ``MODULE:NAME``
arguments themselves; the merged report is :func:`run`'s, rows in the cases' order.

The :class:`Report` has ``ok``, ``to_json()`` and ``to_markdown()`` (the summary table, then the
mismatch details, then the code side by side). See ``docs/portcheck.md`` for an example.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from .fp_fusion import digest as tensor_digest

VALUE_CLASSES = ("random", "edges", "nan_inf", "subnormal", "ties")
STRIDES = ("contiguous", "row_padded")
ROW_PAD = 16
ULP_BUCKETS = ("0", "1", "2", "3-4", "5-8", ">8", "nan")
MAX_COORDS = 5
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}  # the classes built from bits


# ---- cases and their inputs ------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One input configuration. Either ``make(seed, device) -> (args, kwargs)`` or the fields
    ``shapes``/``dtype``/``value_class``/``stride``/``kwargs`` describe the inputs; ``out``
    (optional) allocates output buffers ``(args, kwargs) -> tensor or tuple`` for ``out=``;
    ``meta`` (optional): fields of your own, copied into the case's row (``row["meta"]``)."""

    name: str
    make: Callable[[int, torch.device], tuple[tuple, dict]] | None = None
    shapes: tuple = ()
    dtype: torch.dtype = torch.bfloat16
    value_class: str = "random"
    stride: str = "contiguous"
    seed: int = 0
    kwargs: dict = dataclasses.field(default_factory=dict)
    out: Callable[[tuple, dict], object] | None = None
    meta: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Case.name must be a non-empty string, got {self.name!r}")
        if self.make is not None and not callable(self.make):
            raise TypeError(f"Case.make must be callable, got {type(self.make).__name__}")
        if self.make is None and not self.shapes:
            raise ValueError(f"case {self.name!r}: give either make or shapes")
        if self.value_class not in VALUE_CLASSES:
            raise ValueError(f"Case.value_class must be one of {VALUE_CLASSES}, got {self.value_class!r}")
        if self.stride not in STRIDES:
            raise ValueError(f"Case.stride must be one of {STRIDES}, got {self.stride!r}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"Case.meta must be a dict, got {type(self.meta).__name__}")

    def build(self, device: torch.device | str = "cpu") -> tuple[tuple, dict]:
        """The case's inputs on ``device``: the same values on every call and in every process."""
        device = torch.device(device)
        if self.make is not None:
            args, kwargs = self.make(self.seed, device)
            return tuple(args), dict(kwargs)
        shapes = self.shapes if isinstance(self.shapes[0], (tuple, list)) else (self.shapes,)
        args = tuple(
            laid_out(values(tuple(s), self.dtype, self.value_class, self.seed * 1009 + i), self.stride, device)
            for i, s in enumerate(shapes)
        )
        return args, dict(self.kwargs)


def values(shape: tuple, dtype: torch.dtype, value_class: str = "random", seed: int = 0) -> torch.Tensor:
    """A CPU tensor of ``value_class`` values (see the module docstring), the same for a seed in
    every process: its own generator, special values at unique positions (``randperm``)."""
    if value_class not in VALUE_CLASSES:
        raise ValueError(f"value_class must be one of {VALUE_CLASSES}, got {value_class!r}")
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
    if not dtype.is_floating_point:
        return base.round().clamp(-100, 100).to(dtype)
    x = base.to(dtype)
    n = x.numel()
    if value_class == "random" or n == 0:
        return x
    if value_class in ("subnormal", "ties") and dtype not in _MANTISSA:
        raise ValueError(f"value class {value_class!r} is built for bfloat16, float16 and float32, not {dtype}")
    fraction = {"edges": 8, "nan_inf": 16, "subnormal": 4, "ties": 2}[value_class]
    picks = torch.randperm(n, generator=gen)[: max(1, n // fraction)]
    flat = x.view(-1)
    fi = torch.finfo(dtype)
    if value_class == "edges":
        edge = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny, 1e4, -1e4, 30.0, -30.0]
        flat[picks] = torch.tensor(edge, dtype=torch.float64).to(dtype)[torch.arange(picks.numel()) % len(edge)]
    elif value_class == "nan_inf":
        special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
        flat[picks] = special[torch.arange(picks.numel()) % 3]
    else:
        flat[picks] = _special_bits(value_class, dtype, picks.numel(), gen)
    return x


def _special_bits(value_class: str, dtype: torch.dtype, k: int, gen: torch.Generator) -> torch.Tensor:
    """``k`` subnormals or ties of ``dtype``, built from their bit patterns."""
    width = torch.finfo(dtype).bits
    mant = _MANTISSA[dtype]
    sign = torch.randint(0, 2, (k,), generator=gen, dtype=torch.int64) << (width - 1)
    if value_class == "subnormal":
        bits = sign | torch.randint(1, 2**mant, (k,), generator=gen, dtype=torch.int64)
    else:
        # the dropped bits of the narrower format are 100...0: exactly halfway between two of its values
        dropped = mant - (7 if dtype != torch.bfloat16 else 3)
        # exponents well inside the normal range of both formats (2**-6 .. 2**5)
        bias = 2 ** (width - mant - 2) - 1
        exp = torch.randint(bias - 6, bias + 6, (k,), generator=gen, dtype=torch.int64) << mant
        kept = torch.randint(0, 2 ** (mant - dropped), (k,), generator=gen, dtype=torch.int64) << dropped
        bits = sign | exp | kept | (1 << (dropped - 1))
    # two's complement of the int dtype of this width
    bits = torch.where(bits >= 2 ** (width - 1), bits - 2**width, bits)
    return bits.to(_INT_OF_WIDTH[width // 8]).view(dtype)


def laid_out(t: torch.Tensor, stride: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """``t`` on ``device`` with the layout ``stride`` names: ``contiguous``, or ``row_padded`` (rows
    of a wider NaN-filled buffer, 16 spare elements a row; tensors of fewer than 2 dims stay
    contiguous). The buffer is allocated on ``device``: ``.to(device)`` of a padded view would
    copy it to contiguous rows."""
    if stride == "contiguous" or t.dim() < 2:
        return t.contiguous().to(device)
    if stride != "row_padded":
        raise ValueError(f"stride must be one of {STRIDES}, got {stride!r}")
    fill = float("nan") if t.dtype.is_floating_point else 0
    wide = torch.full((*t.shape[:-1], t.shape[-1] + ROW_PAD), fill, dtype=t.dtype, device=device)
    view = wide[..., : t.shape[-1]]
    view.copy_(t)
    return view


def matrix(
    shapes: Iterable,
    dtypes: Iterable[torch.dtype] = (torch.bfloat16,),
    value_classes: Iterable[str] = VALUE_CLASSES,
    strides: Iterable[str] = STRIDES,
    kwargs: Iterable[dict] = ({},),
    seeds: Iterable[int] = (0,),
    out: Callable[[tuple, dict], object] | None = None,
    prefix: str = "",
) -> list[Case]:
    """The product shapes x dtypes x value_classes x strides x kwargs x seeds as cases. A shape
    entry is one shape (one input tensor) or a tuple of shapes (one tensor each, all of the case's
    dtype and value class). ``kwargs``: keyword variants passed to both callables. ``out``: see
    :class:`Case`. A case's seed is its entry of ``seeds`` plus its position in the matrix, so no
    two cases of one matrix draw the same values; the seed is part of the case's name."""
    shapes, dtypes, value_classes = list(shapes), list(dtypes), list(value_classes)
    strides, kwargs, seeds = list(strides), list(kwargs), list(seeds)
    for arg, items in (("shapes", shapes), ("dtypes", dtypes), ("value_classes", value_classes)):
        if not items:
            raise ValueError(f"{arg} must not be empty")
    for arg, items in (("strides", strides), ("kwargs", kwargs), ("seeds", seeds)):
        if not items:
            raise ValueError(f"{arg} must not be empty")
    cases = []
    for shape in shapes:
        for dtype in dtypes:
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"dtypes must hold torch dtypes, got {dtype!r}")
            for vc in value_classes:
                for stride in strides:
                    for kw in kwargs:
                        for seed in seeds:
                            label = " ".join(f"{k}={str(v).removeprefix('torch.')}" for k, v in kw.items())
                            dt = str(dtype).removeprefix("torch.")
                            name = f"{prefix}{_shape_label(shape)} {dt} {vc} {stride}{' ' + label if label else ''}"
                            name += f" seed={seed + len(cases)}"
                            cases.append(
                                Case(
                                    name,
                                    shapes=tuple(shape),
                                    dtype=dtype,
                                    value_class=vc,
                                    stride=stride,
                                    seed=seed + len(cases),
                                    kwargs=dict(kw),
                                    out=out,
                                )
                            )
    return cases


def _shape_label(shape) -> str:
    if shape and isinstance(shape[0], (tuple, list)):
        return "+".join("x".join(map(str, s)) for s in shape)
    return "x".join(map(str, shape))


# ---- one case: run, compare ------------------------------------------------------------------


def digest(obj) -> str:
    """sha256 (16 hex digits) over the shapes, dtypes and raw bytes of every tensor in ``obj``
    (args, kwargs), and the repr of everything else. A CUDA tensor's bytes enter through
    :func:`fingerprint`, computed where the tensor is (copying gigabytes of inputs to the host
    for every call would take seconds a call)."""
    h = hashlib.sha256()
    for t in _flatten(obj):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            h.update(f"{tuple(t.shape)} {t.dtype} fingerprint {fingerprint(t)}".encode())
        elif isinstance(t, torch.Tensor):
            h.update(f"{tuple(t.shape)} {t.dtype} {tensor_digest(t)}".encode())
        else:
            h.update(repr(t).encode())
    return h.hexdigest()[:16]


_FP_CHUNK = 2**24  # bytes a chunk: 255 * (2**24 - 1) * 2**24 < 2**63, so no sum overflows


def fingerprint(t: torch.Tensor) -> str:
    """A position-sensitive checksum of ``t``'s raw bytes (logical elements, row-major), computed
    on ``t``'s device: for every chunk of 2**24 bytes, the sum of the bytes and two sums of the
    bytes weighted by position (a multiplicative hash and the square of the position, each
    modulo a prime below 2**24), in int64 without overflow; sha256 of those sums. Any accidental
    difference between two builds (another draw, one flipped bit, two swapped bytes) changes it;
    it is not meant to resist a deliberate collision. The same for a tensor on every device."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    n = raw.numel()
    pos = torch.arange(min(n, _FP_CHUNK), device=raw.device, dtype=torch.int64)
    w1 = (pos * 2654435761) % 16777213
    w2 = (pos * pos) % 16777199
    sums = []
    for start in range(0, n, _FP_CHUNK):
        b = raw[start : start + _FP_CHUNK].to(torch.int64)
        k = b.numel()
        sums.append(torch.stack((b.sum(), (b * w1[:k]).sum(), (b * w2[:k]).sum())))
    values = torch.stack(sums).cpu().tolist() if sums else []
    return hashlib.sha256(repr((n, values)).encode()).hexdigest()[:16]


def _flatten(obj):
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield k
            yield from _flatten(obj[k])
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _flatten(v)
    else:
        yield obj


def _as_outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _poisoned_out(case: Case, args: tuple, kwargs: dict):
    bufs = case.out(args, kwargs)
    for t in _as_outputs(bufs):
        if t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.view(torch.uint8).fill_(0xFF)  # NaN in every float format
    return bufs


def _call(fn, case: Case, device: torch.device):
    """Rebuild the case's inputs and call ``fn`` on them: (copies of the outputs on the device,
    input digest). The comparisons run where the outputs are (on a GPU, gigabyte outputs compare
    in milliseconds); the copies keep a buffer the callable reuses from changing under them."""
    args, kwargs = case.build(device)
    seen = digest((args, kwargs))
    if case.out is not None:
        kwargs = {**kwargs, "out": _poisoned_out(case, args, kwargs)}
    result = fn(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    outs = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in _as_outputs(result)]
    return outs, seen


def _int_view(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(_INT_OF_WIDTH[t.element_size()])


def _hex(t: torch.Tensor, idx: tuple) -> str:
    bits = int(_int_view(t)[idx]) & ((1 << (8 * t.element_size())) - 1)
    return f"0x{bits:0{2 * t.element_size()}x}"


def _number(t: torch.Tensor, idx: tuple):
    v = t[idx].item()
    return v if isinstance(v, (int, bool)) or v == v and abs(v) != float("inf") else str(v)


def compare_outputs(a: list, b: list) -> list[dict]:
    """Per output pair: shape/dtype match, raw-bit differences, NaN/Inf positions, payloads."""
    rows = []
    if len(a) != len(b):
        return [{"output": "all", "equal": False, "problem": f"output count differs: original {len(a)}, port {len(b)}"}]
    for i, (x, y) in enumerate(zip(a, b)):
        row = {"output": i, "shape": list(getattr(x, "shape", ())), "dtype": str(getattr(x, "dtype", type(x)))}
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            row.update(equal=x == y, problem=None if x == y else f"not tensors: {x!r} vs {y!r}")
        elif x.shape != y.shape or x.dtype != y.dtype:
            what = "shape" if x.shape != y.shape else "dtype"
            row.update(equal=False, port_shape=list(y.shape), port_dtype=str(y.dtype))
            row["problem"] = f"{what} differs: original {tuple(x.shape)} {x.dtype}, port {tuple(y.shape)} {y.dtype}"
        else:
            row.update(_bit_diff(x, y))
        rows.append(row)
    return rows


def _bit_diff(x: torch.Tensor, y: torch.Tensor) -> dict:
    differ = _int_view(x) != _int_view(y)
    n = int(differ.sum())
    row = {"equal": n == 0, "mismatches": n, "elements": x.numel(), "problem": None}
    if x.dtype.is_floating_point:
        # fp8: torch has no isinf for it; the values are exact in fp32 (the hex below stays raw)
        xf, yf = (x.float(), y.float()) if x.element_size() == 1 else (x, y)
        nx, ny = torch.isnan(xf), torch.isnan(yf)
        row["nan"] = [int(nx.sum()), int(ny.sum())]
        row["inf"] = [int(torch.isinf(xf).sum()), int(torch.isinf(yf).sum())]
        row["nan_positions_differ"] = int((nx ^ ny).sum())
        row["inf_positions_differ"] = int(((xf == float("inf")) ^ (yf == float("inf"))).sum()) + int(
            ((xf == -float("inf")) ^ (yf == -float("inf"))).sum()
        )
        row["nan_payloads_differ"] = int((nx & ny & differ).sum())
    if n:
        coords = differ.nonzero()[:MAX_COORDS].tolist()
        row["first"] = [
            {
                "at": c,
                "original": _hex(x, tuple(c)),
                "port": _hex(y, tuple(c)),
                "original_value": _number(x, tuple(c)),
                "port_value": _number(y, tuple(c)),
            }
            for c in coords
        ]
    return row


ULP_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn)


def e4m3_ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in e4m3fn values between two e4m3fn tensors (int64): the count of
    representable values between them (+0 and -0 are 0 apart), 0 where both are NaN, -1 where
    one is (e4m3fn has no infinities; its NaN is 0x7F / 0xFF)."""

    def ordered(t):
        bits = t.contiguous().view(torch.uint8).to(torch.int64)
        mag = bits & 0x7F
        return torch.where(bits >= 0x80, -mag, mag), mag == 0x7F

    (oa, na), (ob, nb) = ordered(a), ordered(b)
    dist = torch.where(na & nb, 0, (oa - ob).abs())
    return torch.where(na ^ nb, -1, dist)


_ULP_CHUNK = 2**26  # elements a chunk of the ulp histogram (bounds its int64 temporaries)


def ulp_histogram(outs: list, refs: list, with_max: bool = False):
    """Buckets of ulp distances (in each output's dtype) between ``outs`` and ``refs`` rounded to
    that dtype; None where no output has a dtype measured here (bf16, fp16, fp32, e4m3fn).
    Computed on the outputs' device. ``with_max``: ``(histogram, largest distance)``, the
    largest over elements not NaN on one side only (None where nothing was measured)."""
    from inkling_kernels.reference import ulp_distance

    hist = dict.fromkeys(ULP_BUCKETS, 0)
    measured, worst = False, 0
    for out, ref in zip(outs, refs):
        if not isinstance(out, torch.Tensor) or out.dtype not in ULP_DTYPES:
            continue
        ref = ref.detach().to(device=out.device, dtype=out.dtype)
        if ref.shape != out.shape:
            continue
        dist = e4m3_ulp_distance if out.dtype == torch.float8_e4m3fn else ulp_distance
        measured = True
        flat_out, flat_ref = out.contiguous().reshape(-1), ref.contiguous().reshape(-1)
        for start in range(0, flat_out.numel(), _ULP_CHUNK):
            d = dist(flat_out[start : start + _ULP_CHUNK], flat_ref[start : start + _ULP_CHUNK]).reshape(-1)
            counts = [(d < 0).sum(), (d > 8).sum(), d.max()]
            for lo, hi in ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8)):
                counts.append(((d >= lo) & (d <= hi)).sum())
            nan, above, top, *buckets = torch.stack(counts).tolist()
            hist["nan"] += nan
            hist[">8"] += above
            for label, c in zip(("0", "1", "2", "3-4", "5-8"), buckets):
                hist[label] += c
            worst = max(worst, top)
    if not measured:
        return (None, None) if with_max else None
    return (hist, worst) if with_max else hist


def _reruns(reruns) -> tuple[int, int]:
    """``reruns`` as (original, port) call counts: an int for both, or a pair."""
    pair = reruns if isinstance(reruns, (tuple, list)) else (reruns, reruns)
    if len(pair) != 2 or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in pair):
        raise ValueError(f"reruns must be an int >= 1 or a pair of them (original, port), got {reruns!r}")
    return tuple(pair)


def check_case(original, port, case: Case, device, reference=None, reruns=2) -> dict:
    """One case, both callables (``reruns`` calls each, or a pair: original, port): the row the
    report keeps. A side called once has ``<side>_deterministic`` None: not checked."""
    device = torch.device(device)
    counts = dict(zip(("original", "port"), _reruns(reruns)))
    row = {"case": case.name, "seed": case.seed, "value_class": case.value_class, "stride": case.stride}
    if case.meta:
        row["meta"] = dict(case.meta)
    runs = {}
    for side, fn in (("original", original), ("port", port)):
        outs = []
        for _ in range(counts[side]):
            try:
                got, seen = _call(fn, case, device)
            except ImportError:
                raise
            except Exception as e:  # a callable that raises is a result of its own
                row["error"] = f"{side} raised {type(e).__name__}: {e}"
                row["ok"] = False
                return row
            outs.append(got)
            row.setdefault("inputs", seen)
            if seen != row["inputs"]:
                row["error"] = (
                    f"the inputs differ between builds ({seen} vs {row['inputs']}): the case is not deterministic"
                )
                row["ok"] = False
                return row
        runs[side] = outs
        row[f"{side}_deterministic"] = (
            all(all(r["equal"] for r in compare_outputs(outs[0], again)) for again in outs[1:])
            if len(outs) > 1
            else None
        )
    row["outputs"] = compare_outputs(runs["original"][0], runs["port"][0])
    row["equal"] = all(o["equal"] for o in row["outputs"])
    row["mismatches"] = sum(o.get("mismatches", 0) for o in row["outputs"])
    if reference is not None:
        args, kwargs = case.build(device)
        try:
            refs = _as_outputs(reference(*args, **kwargs))
            stats = {side: ulp_histogram(runs[side][0], refs, with_max=True) for side in runs}
            row["ulp"] = {side: hist for side, (hist, _) in stats.items()}
            row["ulp_max"] = {side: top for side, (_, top) in stats.items()}
        except Exception as e:  # the bits are compared without it; the histogram says why it is missing
            row["ulp_error"] = f"reference raised {type(e).__name__}: {e}"
    row["ok"] = bool(
        row["equal"] and row["original_deterministic"] is not False and row["port_deterministic"] is not False
    )
    return row


# ---- generated code --------------------------------------------------------------------------


@dataclasses.dataclass
class Launch:
    """One Triton launch as the kernel received it."""

    kernel: object  # the JITFunction or InterpretedFunction
    args: tuple
    kwargs: dict
    grid: object

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__


@contextlib.contextmanager
def capture_launches():
    """Record every Triton kernel launch inside the block (a list of :class:`Launch`), whoever
    makes it: ``JITFunction.run`` (compiled) and ``InterpretedFunction.run`` (interpreter) are
    wrapped, and an empty launch hook makes launchers that bypass ``run`` once a kernel is cached
    (the package's ``CudaLauncher``) take it. The kernels still run."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    seen: list[Launch] = []
    saved = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def wrap(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                seen.append(Launch(self, args, dict(kwargs), grid))
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    def no_op(*args, **kwargs):
        return None

    hook = knobs.runtime.launch_enter_hook
    chain = hasattr(hook, "add") and hasattr(hook, "remove")  # Triton's HookChain (3.5 on)
    for cls, original in saved.items():
        cls.run = wrap(original)
    if chain:
        hook.add(no_op)
    else:
        knobs.runtime.launch_enter_hook = no_op
    try:
        yield seen
    finally:
        for cls, original in saved.items():
            cls.run = original
        if chain:
            hook.remove(no_op)
        else:
            knobs.runtime.launch_enter_hook = hook


def _options() -> set[str]:
    from triton.backends.nvidia.compiler import CUDAOptions

    return {f.name for f in dataclasses.fields(CUDAOptions)}


def compile_launch(launch: Launch, target=None):
    """Compile ``launch``'s kernel as Triton would specialize it for these arguments (constexprs,
    16-byte divisibility of pointers and ints, ints equal to 1), compile only; ``target``
    defaults to sm_90 (``GPUTarget("cuda", 90, 32)``). Returns ``(compiled, key)``."""
    import triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction, native_specialize_impl

    from inkling_kernels import _backend

    kernel = launch.kernel
    if not isinstance(kernel, JITFunction):  # an InterpretedFunction: the same Python function
        keep = ("do_not_specialize", "do_not_specialize_on_alignment", "noinline")
        kernel = JITFunction(kernel.fn, **{k: v for k, v in getattr(kernel, "kwargs", {}).items() if k in keep})
    params = inspect.signature(kernel.fn).parameters
    bound = inspect.signature(kernel.fn).bind_partial(
        *launch.args, **{k: v for k, v in launch.kwargs.items() if k in params}
    )
    bound.apply_defaults()
    constexprs = set(_backend.kernel_constexprs(kernel))
    signature, constants, attrs = {}, {}, {}
    for i, p in enumerate(kernel.params):
        value = bound.arguments.get(p.name)
        if p.name in constexprs or value is None:
            signature[p.name], constants[p.name] = "constexpr", value
            continue
        ty, spec = native_specialize_impl(
            BaseBackend, value, False, not p.do_not_specialize, not p.do_not_specialize_on_alignment
        )
        signature[p.name] = ty
        if ty == "constexpr":
            constants[p.name] = value
        elif isinstance(spec, str) and spec:
            attrs[(i,)] = BaseBackend.parse_attr(spec)
    allowed = _options()
    options = {k: v for k, v in launch.kwargs.items() if k in allowed}
    target = target or GPUTarget("cuda", 90, 32)
    key = repr((launch.name, sorted(signature.items()), sorted(constants.items(), key=str), attrs, options))
    return triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options), key


def opcode_mix(ptx: str) -> dict:
    """Counts of PTX opcodes (``ld.global.v4.b32`` and the like), most frequent first."""
    counts = collections.Counter()
    for line in ptx.splitlines():
        line = line.strip()
        if not line or line.startswith(("//", ".", "{", "}", "$", "@$")) and not line.startswith("@"):
            continue
        m = re.match(r"(?:@!?%p\d+\s+)?([a-z][\w.]*)", line)
        if m:
            counts[m.group(1)] += 1
    return dict(counts.most_common())


#: the instruction classes of the side-by-side table: (label, opcode prefixes)
CLASSES = (
    ("ld.global", ("ld.global",)),
    ("st.global", ("st.global",)),
    ("fma", ("fma",)),
    ("mul", ("mul",)),
    ("add/sub", ("add", "sub")),
    ("cvt", ("cvt",)),
    ("MUFU (ex2/rcp/...)", ("ex2", "rcp", "rsqrt", "sqrt.approx", "lg2", "sin", "cos", "tanh")),
    ("div", ("div",)),
    ("shfl", ("shfl",)),
    ("bar", ("bar",)),
    ("setp/selp", ("setp", "selp")),
)


def instruction_classes(mix: dict) -> dict:
    """``opcode_mix`` grouped into :data:`CLASSES`, the rest as ``other``."""
    out = dict.fromkeys([label for label, _ in CLASSES] + ["other"], 0)
    for op, n in mix.items():
        label = next((lab for lab, prefixes in CLASSES if op.startswith(prefixes)), "other")
        out[label] += n
    return out


def cuobjdump(compiled, flag: str) -> str:
    """Triton's own cuobjdump run with ``flag`` over a compiled program's cubin."""
    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        return subprocess.run([str(tool), flag, path], capture_output=True, text=True, check=True).stdout


def registers(compiled) -> int:
    return int(re.search(r"REG:(\d+)", cuobjdump(compiled, "-res-usage")).group(1))


def sass_opcodes(compiled) -> list[str]:
    """The SASS opcodes of a compiled program up to its first ``EXIT`` (NOPs left out)."""
    out = cuobjdump(compiled, "-sass")
    lines = [line for line in out.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    ops = [re.sub(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?", "", line).split()[0].rstrip(";") for line in lines]
    ops = [op for op in ops if op != "NOP"]
    return ops[: ops.index("EXIT") + 1] if "EXIT" in ops else ops


def kernel_stats(compiled, device: torch.device) -> dict:
    """PTX lines and opcode mix; registers, local (spill) bytes and SASS count from the cubin;
    on CUDA ``n_regs``/``n_spills`` of the loaded kernel."""
    ptx = compiled.asm["ptx"]
    mix = opcode_mix(ptx)
    stats = {"ptx_lines": len(ptx.splitlines()), "classes": instruction_classes(mix), "opcodes": mix}
    try:
        usage = cuobjdump(compiled, "-res-usage")
        stats["registers"] = int(re.search(r"REG:(\d+)", usage).group(1))
        local = re.search(r"LOCAL:(\d+)", usage)
        stats["local_bytes"] = int(local.group(1)) if local else None
        ops = sass_opcodes(compiled)
        stats["sass_to_exit"] = len(ops)
        stats["sass_top"] = dict(collections.Counter(op.split(".")[0] for op in ops).most_common(8))
    except (OSError, subprocess.CalledProcessError, KeyError, AttributeError) as e:
        stats["sass_error"] = f"{type(e).__name__}: {e}"
    if device.type == "cuda":
        compiled._init_handles()
        stats["n_regs"], stats["n_spills"] = compiled.n_regs, compiled.n_spills
    return stats


def generated_code(fn, case: Case, device) -> list[dict]:
    """Every distinct kernel ``fn`` launches on ``case``: name, launches, grid, stats."""
    device = torch.device(device)
    target = None
    if device.type == "cuda":
        from triton.runtime import driver

        target = driver.active.get_current_target()
    with capture_launches() as seen:
        _call(fn, case, device)
    kernels: dict[str, dict] = {}
    for launch in seen:
        try:
            compiled, key = compile_launch(launch, target)
        except Exception as e:  # e.g. an argument type the sm_90 compiler does not take
            kernels.setdefault(f"error {launch.name}", {"kernel": launch.name, "launches": 0, "error": repr(e)[:300]})
            kernels[f"error {launch.name}"]["launches"] += 1
            continue
        if key in kernels:
            kernels[key]["launches"] += 1
            continue
        grid = launch.grid if not callable(launch.grid) else "callable"
        kernels[key] = {"kernel": launch.name, "launches": 1, "grid": repr(grid), **kernel_stats(compiled, device)}
    return list(kernels.values())


# ---- the run and its report --------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """What :func:`run` found. ``ok``: every case equal and both callables deterministic."""

    original: str
    port: str
    device: str
    cases: list[dict]
    code: dict | None = None
    timings: dict | None = None
    reference: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.cases) and all(r["ok"] for r in self.cases)

    def to_json(self) -> str:
        doc = dataclasses.asdict(self)
        doc["ok"] = self.ok
        return json.dumps(doc, indent=1, default=str)

    def mismatches_markdown(self) -> str:
        """The mismatch details alone (each failing case: what differs, where, both values in
        hex, its seed and reproducer); empty when every case passed."""
        bad = [r for r in self.cases if not r["ok"]]
        if not bad:
            return ""
        lines = ["## Mismatches", ""]
        for r in bad:
            lines += _details(r)
        return "\n".join(lines).rstrip("\n") + "\n"

    def to_markdown(self) -> str:
        n_ok = sum(r["ok"] for r in self.cases)
        lines = [f"# portcheck: `{self.port}` against `{self.original}`", ""]
        lines += [
            f"{n_ok}/{len(self.cases)} cases equal and deterministic on {self.device}: "
            f"**{'OK' if self.ok else 'MISMATCH'}**",
            "",
        ]
        head = ["case", "outputs", "equal", "mismatching elements", "NaN/Inf", "deterministic (orig/port)"]
        if self.reference:
            head += ["ulp orig (0/1/2/3-4/5-8/>8/nan)", "ulp port"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.cases:
            lines.append("| " + " | ".join(_summary_cells(r, bool(self.reference))) + " |")
        if not self.ok:
            lines += ["", self.mismatches_markdown()]
        if self.timings:
            lines += [
                "",
                "## Timings (us per call: median [lo, hi])",
                "",
                "| case | original | port |",
                "|---|---|---|",
            ]
            for name, t in self.timings.items():
                cells = [f"{v['median_us']:.3f} [{v['lo_us']:.3f}, {v['hi_us']:.3f}]" for v in t.values()]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if self.code:
            lines += ["", "## Generated code (first case, PTX for " + self.code.get("target", "sm_90") + ")", ""]
            lines += _code_table(self.code)
        return "\n".join(lines) + "\n"


def _summary_cells(r: dict, with_ulp: bool) -> list[str]:
    if "error" in r:
        return [r["case"], "-", "error", "-", "-", "-"] + (["-", "-"] if with_ulp else [])
    outs = r["outputs"]
    shapes = ", ".join(f"{tuple(o['shape'])} {o['dtype'].removeprefix('torch.')}" for o in outs if "shape" in o)
    nan = "; ".join(_nan_cell(o) for o in outs if "nan" in o) or "-"
    mism = "shape/dtype" if any(o.get("problem") for o in outs) else str(r["mismatches"])
    det = "/".join(_det_cell(r[f"{side}_deterministic"]) for side in ("original", "port"))
    cells = [r["case"], shapes or "-", "yes" if r["equal"] else "NO", mism, nan, det]
    if with_ulp:
        for side in ("original", "port"):
            h = r.get("ulp", {}).get(side)
            cells.append("/".join(str(h[b]) for b in ULP_BUCKETS) if h else "-")
    return cells


def _det_cell(flag) -> str:
    return "-" if flag is None else "yes" if flag else "NO"


def _nan_cell(o: dict) -> str:
    keys = ("nan_positions_differ", "inf_positions_differ", "nan_payloads_differ")
    if not any(o.get(k) for k in keys):
        return "same"
    return "NaN pos {}, Inf pos {}, payload {}".format(*(o[k] for k in keys))


def _details(r: dict) -> list[str]:
    lines = [f"### {r['case']}", "", f"- inputs: seed {r['seed']}, digest {r.get('inputs', '-')}"]
    if "error" in r:
        lines.append(f"- error: {r['error']}")
    else:
        for side in ("original", "port"):
            if r[f"{side}_deterministic"] is False:
                lines.append(f"- the {side} is not deterministic: a rerun on the same inputs gave other bits")
        for o in r["outputs"]:
            if o.get("problem"):
                lines.append(f"- output {o['output']}: {o['problem']}")
            elif not o["equal"]:
                lines.append(f"- output {o['output']}: {o['mismatches']} of {o['elements']} elements differ")
                if o.get("nan_positions_differ") or o.get("inf_positions_differ"):
                    lines.append(
                        f"  - NaN positions differ at {o['nan_positions_differ']} elements, "
                        f"Inf positions at {o['inf_positions_differ']}"
                    )
                if o.get("nan_payloads_differ"):
                    lines.append(f"  - NaN payloads differ at {o['nan_payloads_differ']} elements (both NaN)")
                for f in o.get("first", []):
                    lines.append(
                        f"  - at {tuple(f['at'])}: original {f['original']} ({f['original_value']}), "
                        f"port {f['port']} ({f['port_value']})"
                    )
    if r.get("ulp_error"):
        lines.append(f"- no ulp histogram: {r['ulp_error']}")
    if r.get("reproduce"):
        lines.append(f"- reproduce: `{r['reproduce']}`")
    return lines + [""]


def _code_table(code: dict) -> list[str]:
    lines = [
        f"- {side}: could not capture or compile: {code[side + '_error']}"
        for side in ("original", "port")
        if side + "_error" in code
    ]
    for side in ("original", "port"):
        lines += [
            f"- {side}: `{k['kernel']}` did not compile: {k['error']}" for k in code.get(side, []) if "error" in k
        ]
    kernels = [(side, k) for side in ("original", "port") for k in code.get(side, []) if "error" not in k]
    if not kernels:
        return lines + ["no Triton kernel launches to compare (a torch op launches none)"]
    lines += [""] if lines else []
    head = ["", *(f"{side}: `{k['kernel']}`" for side, k in kernels)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [
        ("launches", "launches"),
        ("PTX lines", "ptx_lines"),
        ("registers", "registers"),
        ("local (spill) bytes", "local_bytes"),
        ("n_regs (CUDA)", "n_regs"),
        ("n_spills (CUDA)", "n_spills"),
        ("SASS to EXIT", "sass_to_exit"),
    ]
    for label, key in rows:
        if any(key in k for _, k in kernels):
            lines.append(f"| {label} | " + " | ".join(str(k.get(key, "-")) for _, k in kernels) + " |")
    for label, _ in (*CLASSES, ("other", ())):
        lines.append(f"| {label} | " + " | ".join(str(k["classes"].get(label, 0)) for _, k in kernels) + " |")
    return lines


def _label(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def reproducer(original: str, port: str, cases: str | None, name: str, device: torch.device) -> str:
    """A shell command that rebuilds one case and reruns both callables."""
    if cases is None:
        cases = "MODULE:CASES"  # the caller's cases: name them as the CLI takes them
    cmd = ["python", "-m", "inkling_workbook", "portcheck", original, port, "--cases", cases, "--only", name]
    cmd += ["--no-code"] + (["--device", device.type] if device.type != "cpu" else [])
    return " ".join(shlex.quote(c) for c in cmd)


def run(
    original: Callable,
    port: Callable,
    cases: Iterable[Case],
    device: str | torch.device = "cpu",
    reference: Callable | None = None,
    reruns: int | tuple[int, int] = 2,
    timing: bool = False,
    code: bool = True,
    names: tuple[str, str, str | None] | None = None,
) -> Report:
    """Check ``port`` against ``original`` on every case (see the module docstring).

    ``names``: how reproducers name (original, port, cases) as ``MODULE:NAME`` (the CLI passes its
    arguments); by default the callables' own module and name, and ``MODULE:CASES`` for the cases."""
    for arg, fn in (("original", original), ("port", port)):
        if not callable(fn):
            raise TypeError(f"{arg} must be callable, got {type(fn).__name__}")
    if reference is not None and not callable(reference):
        raise TypeError(f"reference must be callable or None, got {type(reference).__name__}")
    if isinstance(cases, Case):
        cases = [cases]
    cases = list(cases)
    if not cases:
        raise ValueError("cases must not be empty")
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"cases must hold portcheck.Case objects, got {type(c).__name__}")
    device = _check_device(device)
    _reruns(reruns)
    if timing and device.type != "cuda":
        raise ValueError("timing=True needs device='cuda': interpreter timings say nothing about kernels")
    o_name, p_name, c_name = names or (_label(original), _label(port), None)
    rows = []
    for case in cases:
        row = check_case(original, port, case, device, reference, reruns)
        if not row["ok"]:
            row["reproduce"] = reproducer(o_name, p_name, c_name, case.name, device)
        rows.append(row)
    report = Report(o_name, p_name, str(device), rows, reference=_label(reference) if reference else None)
    if code:
        report.code = {"target": "sm_90" if device.type == "cpu" else "this device"}
        for side, fn in (("original", original), ("port", port)):
            try:
                report.code[side] = generated_code(fn, cases[0], device)
            except ImportError:
                raise
            except Exception as e:  # the comparison of bits stands without it
                report.code[f"{side}_error"] = f"{type(e).__name__}: {e}"
    if timing:
        report.timings = _timings(original, port, cases, device)
    return report


def _check_device(device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}") from e
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available")
    return device


def _timings(original, port, cases, device) -> dict:
    from . import bench

    out = {}
    for case in cases:
        calls = {}
        for side, fn in (("original", original), ("port", port)):
            args, kwargs = case.build(device)
            if case.out is not None:
                kwargs = {**kwargs, "out": _poisoned_out(case, args, kwargs)}
            calls[side] = lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs)
        timed = bench.time_calls(calls, passes=bench.OTHER_PASSES)
        out[case.name] = {
            k: {f: getattr(t, f) for f in ("median_us", "lo_us", "hi_us", "reps", "passes")} for k, t in timed.items()
        }
    return out


# ---- several processes ---------------------------------------------------------------------------

#: cases a task of :func:`submit` checks (a process builds each case's inputs several times: on a
#: GPU a large case is CPU-bound, building its inputs, not comparing them)
CHUNK = 8


def pool(jobs: int):
    """A pool of ``jobs`` fresh processes (``spawn``: CUDA cannot be forked) for :func:`submit`.
    Each worker compiles Inductor graphs in-process and keeps its share of the CPU threads."""
    import concurrent.futures
    import multiprocessing

    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
        initargs=(threads,),
    )  # fmt: skip


def _worker_init(threads: int) -> None:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool in every worker
    torch.set_num_threads(threads)


def _run_chunk(original: str, port: str, cases: str, indices: list[int], device: str, reference, reruns, code) -> str:
    """One task of :func:`submit`, in a worker: the named callables and cases resolved there, the
    cases at ``indices`` checked; the report as JSON."""
    picked = [load_cases(cases)[i] for i in indices]
    ref = resolve(reference, "--reference") if reference else None
    rep = run(resolve(original, "ORIGINAL"), resolve(port, "PORT"), picked, device, ref, reruns, code=code,
              names=(original, port, cases))  # fmt: skip
    return rep.to_json()


class Pending:
    """The tasks :func:`submit` handed to a pool; :meth:`result` waits for them and merges their
    rows, in the cases' order, into one :class:`Report`."""

    def __init__(self, futures: list, names: tuple[str, str, str], device: str, reference: str | None):
        self.futures, self.names, self.device, self.reference = futures, names, device, reference

    def result(self) -> Report:
        docs = [json.loads(f.result()) for f in self.futures]
        code = next((d["code"] for d in docs if d.get("code")), None)
        rows = [r for d in docs for r in d["cases"]]
        return Report(*self.names[:2], docs[0]["device"], rows, code=code, reference=docs[0]["reference"])


def submit(
    executor,
    original: str,
    port: str,
    cases: str,
    device: str = "cpu",
    reference: str | None = None,
    reruns: int | tuple[int, int] = 2,
    code: bool = True,
    indices: list[int] | None = None,
    chunk: int = CHUNK,
) -> Pending:
    """:func:`run` over the cases named ``cases`` (``MODULE:NAME``, resolved in each worker, as
    ``original``, ``port`` and ``reference`` are) in tasks of ``chunk`` cases on ``executor``
    (:func:`pool`), so that several checks can share one pool. ``indices``: only those cases. The
    generated code (``code``) comes from the first case, as in :func:`run`. The result is the
    report :func:`run` would give, rows in the same order."""
    for what, spec in (("original", original), ("port", port), ("cases", cases), ("reference", reference)):
        if spec is not None and (not isinstance(spec, str) or ":" not in spec):
            raise TypeError(f"{what} must be a MODULE:NAME string for a worker process to resolve, got {spec!r}")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    device = _check_device(device)
    _reruns(reruns)
    if indices is None:
        indices = list(range(len(load_cases(cases))))
    if not indices:
        raise ValueError("indices must not be empty")
    parts = [list(indices[i : i + chunk]) for i in range(0, len(indices), chunk)]
    futures = [
        executor.submit(_run_chunk, original, port, cases, part, str(device), reference, reruns, code and k == 0)
        for k, part in enumerate(parts)
    ]
    return Pending(futures, (original, port, cases), str(device), reference)


def run_parallel(
    original: str, port: str, cases: str, device: str = "cpu", reference: str | None = None, jobs: int = 2, **kwargs
) -> Report:
    """:func:`submit` on a pool of its own of ``jobs`` processes: the same report as :func:`run`
    (the callables and cases named ``MODULE:NAME``), its cases checked in parallel."""
    with pool(jobs) as executor:
        return submit(executor, original, port, cases, device, reference, **kwargs).result()


# ---- command line ------------------------------------------------------------------------------


class UsageError(Exception):
    """A CLI argument that does not resolve (exit 2)."""


def resolve(spec: str, what: str):
    """``MODULE:NAME`` (dots in NAME walk attributes) to the object it names."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UsageError(f"{what} must be MODULE:NAME, got {spec!r}")
    mod_name, attr = spec.split(":", 1)
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as e:
        raise UsageError(f"{what}: cannot import {mod_name!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{what}: {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_cases(spec: str) -> list[Case]:
    obj = resolve(spec, "--cases")
    if callable(obj) and not isinstance(obj, (list, tuple)):
        obj = obj()
    cases = list(obj) if isinstance(obj, (list, tuple)) or inspect.isgenerator(obj) else None
    if cases is None:
        raise UsageError(f"--cases {spec} must be a list of cases or a function returning one")
    if not cases:
        raise UsageError(f"--cases {spec} holds no cases")
    return cases


def main(args) -> int:
    """The ``portcheck`` subcommand (``inkling_workbook.cli``): exit 0 all equal, 1 a mismatch, 2 usage."""
    try:
        original, port = resolve(args.original, "ORIGINAL"), resolve(args.port, "PORT")
        reference = resolve(args.reference, "--reference") if args.reference else None
        cases = load_cases(args.cases)
        indices = list(range(len(cases)))
        if args.only:
            indices = [i for i, c in enumerate(cases) if c.name in args.only]
            if not indices:
                raise UsageError(f"--only {args.only}: no such case in {args.cases}")
            cases = [cases[i] for i in indices]
        names = (args.original, args.port, args.cases)
        if args.jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
        if args.jobs > 1 and args.timing:
            raise UsageError("--jobs > 1 with --timing: timings need the GPU to themselves")
        if args.jobs > 1:
            report = run_parallel(*names, device=args.device, reference=args.reference, jobs=args.jobs,
                                  code=not args.no_code, indices=indices)  # fmt: skip
        else:
            report = run(
                original, port, cases, args.device, reference, timing=args.timing, code=not args.no_code, names=names
            )
    except (UsageError, ValueError, TypeError, ImportError) as e:
        print(f"portcheck: {e}", file=sys.stderr)
        return 2
    text = report.to_markdown()
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(text)
        (out / "report.json").write_text(report.to_json() + "\n")
        print(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    return 0 if report.ok else 1


def add_parser(sub) -> None:
    """The ``portcheck`` subparser of ``python -m inkling_workbook``."""
    p = sub.add_parser("portcheck", help="check a port against its original bit for bit over a case matrix")
    p.add_argument("original", help="MODULE:NAME of the original callable")
    p.add_argument("port", help="MODULE:NAME of the port")
    p.add_argument("--cases", required=True, help="MODULE:NAME of a list of cases or a function returning one")
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    p.add_argument("--reference", help="MODULE:NAME of a float64 reference: adds ulp histograms")
    p.add_argument("--out", help="directory for report.md and report.json")
    p.add_argument("--only", action="append", help="run only the case of this name (repeatable)")
    p.add_argument("--no-code", action="store_true", help="skip the generated-code comparison")
    p.add_argument("--timing", action="store_true", help="time both (CUDA only)")
    p.add_argument(
        "--jobs", type=int, default=1, help="check the cases in this many processes (not with --timing; default 1)"
    )
    p.set_defaults(fn=main)

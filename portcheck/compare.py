"""Comparing two sides' outputs: raw bits by default, or a :class:`Mode` that accepts some
differences (NaN canonicalised, +-0 equal, an ulp budget per dtype, the port no farther from the
reference than the original), and the ulp histograms against a reference.

Every comparison counts the raw differing bits (``mismatches``) whatever the mode; the mode
decides which of them are *accepted* (``accepted``), and an output is ``equal`` when every
differing element is accepted. In the default mode (bits) nothing is accepted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .cases import INT_OF_WIDTH

MAX_COORDS = 5
ULP_BUCKETS = ("0", "1", "2", "3-4", "5-8", ">8", "nan")
ULP_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn)
_ULP_CHUNK = 2**26  # elements a chunk of the ulp histogram (bounds its int64 temporaries)


@dataclasses.dataclass(frozen=True)
class Mode:
    """What counts as equal. The default is bit equality. ``nan``: every NaN equals every NaN
    (payload and sign canonicalised); ``zeros``: -0 equals +0; ``ulp``: a budget per dtype name
    (``{"bfloat16": 1}``: elements at most 1 bf16 ulp apart are equal; dtypes not named keep
    bits); ``no_farther``: an element of the port is accepted where it is no farther (in ulps of
    the output dtype) from the reference than the original's element is, case by case (needs a
    reference). Each accepted difference is still counted and reported."""

    nan: bool = False
    zeros: bool = False
    ulp: tuple = ()  # ((dtype name, budget), ...): hashable, JSON-friendly
    no_farther: bool = False

    @classmethod
    def make(cls, nan=False, zeros=False, ulp=None, no_farther=False) -> Mode:
        budget = {}
        for k, v in dict(ulp or {}).items():
            name = str(k).removeprefix("torch.")
            dtype = getattr(torch, name, None)
            if not isinstance(dtype, torch.dtype) or dtype not in ULP_DTYPES:
                names = ", ".join(str(d).removeprefix("torch.") for d in ULP_DTYPES)
                raise ValueError(f"ulp budget: {k!r} is not one of {names}")
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"ulp budget for {name} must be an int >= 0, got {v!r}")
            budget[name] = v
        return cls(bool(nan), bool(zeros), tuple(sorted(budget.items())), bool(no_farther))

    @property
    def bits(self) -> bool:
        return not (self.nan or self.zeros or self.ulp or self.no_farther)

    def budget(self, dtype: torch.dtype) -> int:
        return dict(self.ulp).get(str(dtype).removeprefix("torch."), 0)

    def describe(self) -> str:
        if self.bits:
            return "bit equality"
        parts = []
        if self.nan:
            parts.append("NaN canonicalised (any NaN equals any NaN)")
        if self.zeros:
            parts.append("-0 equals +0")
        if self.ulp:
            parts.append("ulp budget " + ", ".join(f"{k} {v}" for k, v in self.ulp))
        if self.no_farther:
            parts.append("the port no farther from the reference than the original, element by element")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {"bits": self.bits, "nan": self.nan, "zeros": self.zeros, "ulp": dict(self.ulp),
                "no_farther": self.no_farther, "description": self.describe()}  # fmt: skip


BITS = Mode()


def as_outputs(result) -> list:
    """A callable's result as a list of outputs: a tuple/list is several, anything else one.
    numpy arrays and numpy/Python numbers become tensors (their bits compared like any tensor's);
    other objects are compared by ``==`` and shown by ``repr``."""
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    return [_as_tensor(x) for x in items]


def _as_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":
        return torch.from_numpy(np.array(x, copy=True))
    if isinstance(x, np.generic) and x.dtype.kind in "biuf":
        return torch.from_numpy(np.array(x))
    if isinstance(x, bool):
        return torch.tensor(x)
    if isinstance(x, int):
        return torch.tensor(x, dtype=torch.int64)
    if isinstance(x, float):
        return torch.tensor(x, dtype=torch.float64)
    return x


def int_view(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(INT_OF_WIDTH[t.element_size()])


def _hex(t: torch.Tensor, idx: tuple) -> str:
    bits = int(int_view(t)[idx]) & ((1 << (8 * t.element_size())) - 1)
    return f"0x{bits:0{2 * t.element_size()}x}"


def _number(t: torch.Tensor, idx: tuple):
    v = t[idx].item()
    return v if isinstance(v, (int, bool)) or v == v and abs(v) != float("inf") else str(v)


def compare_outputs(a: list, b: list, mode: Mode = BITS, refs: list | None = None) -> list[dict]:
    """Per output pair: shape/dtype match, raw-bit differences, NaN/Inf positions, payloads, and
    under ``mode`` the differences it accepts. ``refs``: the reference's outputs (``no_farther``)."""
    rows = []
    if len(a) != len(b):
        return [{"output": "all", "equal": False, "problem": f"output count differs: original {len(a)}, port {len(b)}"}]
    for i, (x, y) in enumerate(zip(a, b)):
        row = {"output": i, "shape": list(getattr(x, "shape", ())), "dtype": str(getattr(x, "dtype", type(x).__name__))}
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
                kinds = [type(v).__name__ for v in (x, y)]
                row.update(equal=False, problem=f"type differs: original {kinds[0]}, port {kinds[1]}")
            else:
                same = bool(_safe_eq(x, y))
                row.update(equal=same, problem=None if same else f"not tensors: {x!r} vs {y!r}")
        elif x.shape != y.shape or x.dtype != y.dtype:
            what = "shape" if x.shape != y.shape else "dtype"
            row.update(equal=False, port_shape=list(y.shape), port_dtype=str(y.dtype))
            row["problem"] = f"{what} differs: original {tuple(x.shape)} {x.dtype}, port {tuple(y.shape)} {y.dtype}"
        else:
            ref = refs[i] if refs is not None and i < len(refs) else None
            row.update(_bit_diff(x, y, mode, ref))
        rows.append(row)
    return rows


def _safe_eq(x, y) -> bool:
    try:
        return bool(x == y)
    except Exception:
        return repr(x) == repr(y)


def _bit_diff(x: torch.Tensor, y: torch.Tensor, mode: Mode = BITS, ref=None) -> dict:
    differ = int_view(x) != int_view(y)
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
    rest = differ
    if n and not mode.bits:
        accepted = _accepted(x, y, differ, mode, ref)
        row["accepted"] = int(accepted.sum())
        rest = differ & ~accepted
        row["equal"] = row["accepted"] == n
    if n:
        # the first coordinates the mode does not accept (or, all accepted, the first differences)
        shown = rest if bool(rest.any()) else differ
        coords = shown.nonzero()[:MAX_COORDS].tolist()
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


def _accepted(x: torch.Tensor, y: torch.Tensor, differ: torch.Tensor, mode: Mode, ref) -> torch.Tensor:
    """Elements whose difference ``mode`` accepts (a subset of ``differ``)."""
    ok = torch.zeros_like(differ)
    if not x.dtype.is_floating_point:
        return ok
    xf, yf = (x.float(), y.float()) if x.element_size() == 1 else (x, y)
    nx, ny = torch.isnan(xf), torch.isnan(yf)
    if mode.nan:
        ok |= nx & ny
    if mode.zeros:
        ok |= (xf == 0) & (yf == 0)
    budget = mode.budget(x.dtype)
    if budget and x.dtype in ULP_DTYPES:
        d = _distance(x, y)
        ok |= (d >= 0) & (d <= budget) & ~(nx & ny)  # NaN payloads are the ``nan`` option's
    if mode.no_farther and ref is not None and x.dtype in ULP_DTYPES and isinstance(ref, torch.Tensor):
        r = ref.detach().to(device=x.device, dtype=x.dtype)
        if r.shape == x.shape:
            big = torch.iinfo(torch.int64).max
            do, dp = _distance(x, r), _distance(y, r)
            do, dp = torch.where(do < 0, big, do), torch.where(dp < 0, big, dp)
            ok |= dp <= do
    return ok & differ


def _distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return e4m3_ulp_distance(a, b) if a.dtype == torch.float8_e4m3fn else ulp_distance(a, b)


def _ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Floats to integers in the floats' order (-0 and +0 both 0)."""
    bits = int_view(x).to(torch.int64)
    sign_bit = 1 << (torch.finfo(x.dtype).bits - 1)
    magnitude = bits & (sign_bit - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in units in the last place (int64) between two bf16, fp16 or fp32
    tensors of one shape: the count of representable values between them (+0 and -0 are 0
    apart, the largest finite value is 1 from Inf); -1 where one is NaN, 0 where both are."""
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"ulp_distance takes two bf16, fp16 or fp32 tensors of one dtype, got {a.dtype}, {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.contiguous(), b.contiguous()
    dist = (_ordered_bits(a) - _ordered_bits(b)).abs()
    a_nan, b_nan = torch.isnan(a), torch.isnan(b)
    dist = torch.where(a_nan & b_nan, 0, dist)
    return torch.where(a_nan ^ b_nan, -1, dist)


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


def reference_problem(outs: list, refs: list) -> str | None:
    """Why ``refs`` cannot be measured against ``outs`` (count or shapes differ, a non-tensor
    where a tensor output is), or None: a broken reference is an error, never silence."""
    if len(refs) != len(outs):
        return f"the reference returned {len(refs)} outputs, the original {len(outs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if isinstance(o, torch.Tensor) and o.dtype in ULP_DTYPES:
            if not isinstance(r, torch.Tensor):
                return f"reference output {i} is a {type(r).__name__}, not a tensor"
            if tuple(r.shape) != tuple(o.shape):
                return f"reference output {i} has shape {tuple(r.shape)}, the original's {tuple(o.shape)}"
    return None


def ulp_histogram(outs: list, refs: list, with_max: bool = False):
    """Buckets of ulp distances (in each output's dtype) between ``outs`` and ``refs`` rounded to
    that dtype; None where no output has a dtype measured here (bf16, fp16, fp32, e4m3fn).
    Computed on the outputs' device. ``with_max``: ``(histogram, largest distance)``, the
    largest over elements not NaN on one side only (None where nothing was measured)."""
    hist = dict.fromkeys(ULP_BUCKETS, 0)
    measured, worst = False, 0
    for out, ref in zip(outs, refs):
        if not isinstance(out, torch.Tensor) or out.dtype not in ULP_DTYPES or not isinstance(ref, torch.Tensor):
            continue
        ref = ref.detach().to(device=out.device, dtype=out.dtype)
        if ref.shape != out.shape:
            continue
        measured = True
        flat_out, flat_ref = out.contiguous().reshape(-1), ref.contiguous().reshape(-1)
        for start in range(0, flat_out.numel(), _ULP_CHUNK):
            d = _distance(flat_out[start : start + _ULP_CHUNK], flat_ref[start : start + _ULP_CHUNK]).reshape(-1)
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

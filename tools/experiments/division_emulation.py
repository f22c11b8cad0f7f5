"""A CPU emulation of the fused FP8 kernel's split-reciprocal division (``DIV_SPLIT``), written
before the GPU proof ran (experiment F in ``data/tuning_log.md``): for every group maximum a bf16
group can have and every bf16 value such a group can hold, the e4m3 byte of
``fma(y, r_hi, RN(y * r_lo))`` against that of the IEEE quotient ``RN(y / s)``, with numpy float32
arithmetic and the fma done exactly through float64 (a two-sum fixes the one case float64 cannot
hold: a sum that lands on a float32 midpoint). Negative controls on a 1% sample of the maxima: the
plain product with ``r = RN(1/s)`` and with ``r_hi`` alone must show byte mismatches.

    python tools/division_emulation.py OUT_JSON        (about a minute on one core)
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

F32_MAX = np.finfo(np.float32).max


def e4m3_bytes(x: np.ndarray) -> np.ndarray:
    """The formula's clamp, then torch's round-to-nearest-even e4m3 conversion; any NaN -> 0x7F."""
    c = np.clip(x, -448, 448)
    b = torch.from_numpy(c).to(torch.float8_e4m3fn).view(torch.uint8).numpy().copy()
    b[np.isnan(c)] = 0x7F
    return b


def fma_f32(a: np.ndarray, b: np.float32, c: np.ndarray) -> np.ndarray:
    """RN_f32(a * b + c) for float32 inputs: the product is exact in float64, the sum is made exact
    by a two-sum error term that decides the rounding when float64's sum sits on a float32 midpoint."""
    p = a.astype(np.float64) * np.float64(b)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    f = s.astype(np.float32)
    lo, hi = np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))
    mid_lo = (f.astype(np.float64) + lo.astype(np.float64)) / 2
    mid_hi = (f.astype(np.float64) + hi.astype(np.float64)) / 2
    f = np.where((s == mid_hi) & (err > 0), hi, f)
    f = np.where((s == mid_lo) & (err < 0), lo, f)
    f = np.where((s == mid_hi) & (err < 0) & (f.astype(np.float64) >= s), lo, f)
    f = np.where((s == mid_lo) & (err > 0) & (f.astype(np.float64) <= s), hi, f)
    return f


def split(s: np.float32) -> tuple[np.float32, np.float32]:
    """``_recip_split``: r_hi = RN(1/s) stepped one ulp down if it rounded up; r_lo = RN(rem * r_hi)
    with the exact residual rem = 1 - r_hi * s (exact in float32, checked)."""
    r = np.float32(np.float32(1) / s)
    if 1.0 - np.float64(r) * np.float64(s) < 0:
        r = np.nextafter(r, np.float32(0))
    rem = 1.0 - np.float64(r) * np.float64(s)
    assert np.float64(np.float32(rem)) == rem and rem >= 0
    return r, np.float32(np.float32(rem) * r)


def count(amaxes: np.ndarray, ys: np.ndarray, method: str) -> tuple[int, int]:
    """(byte mismatches, quotient mismatches where |y / s| >= 2**-10) over the pairs a group meets."""
    bad_byte = bad_bits = 0
    for amax in amaxes:
        s = np.float32(amax / np.float32(448))
        meets = (np.abs(ys) <= amax) | np.isnan(ys) | (np.isinf(ys) & (amax == F32_MAX))
        y = ys[meets]
        ref = (y / s).astype(np.float32)
        if method == "split":
            r_hi, r_lo = split(s)
            q = fma_f32(y, r_hi, (y * r_lo).astype(np.float32))
            q = np.where(np.isinf(y), (y * r_hi).astype(np.float32), q)  # +-Inf: both terms the same infinity
        elif method == "rn_product":
            q = (y * np.float32(np.float32(1) / s)).astype(np.float32)
        else:  # "r_hi_product"
            q = (y * split(s)[0]).astype(np.float32)
        bad_byte += int((e4m3_bytes(ref) != e4m3_bytes(q)).sum())
        differ = (ref.view(np.int32) != q.view(np.int32)) & ~np.isnan(ref)
        bad_bits += int((differ & (np.abs(ref) >= 2**-10)).sum())
    return bad_byte, bad_bits


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    ys = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float().numpy()
    pos = ys[(ys > 0) & np.isfinite(ys)]
    amaxes = np.concatenate([pos[pos >= np.float32(1e-10)], np.array([1e-10, F32_MAX], np.float32)])
    record = {"dtype": "bfloat16", "maxima": int(amaxes.size), "values": int(ys.size)}
    t0 = time.perf_counter()
    for method in ("rn_product", "r_hi_product"):
        byte, bits = count(amaxes[::100], ys, method)
        record[f"negative_control_{method}_1pct"] = {"byte_mismatches": byte, "quotient_mismatches_ge_2^-10": bits}
        print(method, byte, bits, flush=True)
    byte, bits = count(amaxes, ys, "split")
    record["split"] = {"byte_mismatches": byte, "quotient_mismatches_ge_2^-10": bits}
    record["seconds"] = round(time.perf_counter() - t0, 1)
    print("split", byte, bits, flush=True)
    Path(argv[0]).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The NVFP4 kernel's two e2m1 roundings proved equal, on the CPU: the software rounding
(``inkling_kernels._nvfp4_kernel._e2m1_code``, every GPU without the instruction and the interpreter)
against ``cvt.rn.satfinite.e2m1x2.f32`` as the PTX ISA defines it (compute capability 10.x-12.x).

The PTX ISA, "Data Movement and Conversion Instructions: cvt"
(https://docs.nvidia.com/cuda/parallel-thread-execution/#data-movement-and-conversion-instructions-cvt):
``cvt.rn.satfinite.e2m1x2.f32 d, a, b`` converts each of the fp32 inputs ``a`` and ``b`` to e2m1
(``.rn``: round to nearest, ties to even) and packs them into the ``.b8`` destination, the value from
``a`` in the upper 4 bits and the value from ``b`` in the lower 4 bits; ``.satfinite`` (mandatory for
this destination type) turns a result beyond the format's largest finite value into the sign-preserved
MAX_NORM (+-6: infinities too), and a NaN into positive MAX_NORM (e2m1 has no NaN or infinity).

The package stores element ``2i`` in the low nibble, so the kernel passes ``a = x[2i+1]``,
``b = x[2i]``. The kernel zeroes every byte of a block whose scale is NaN (a NaN in the block, or
a NaN scale), and a NaN product ``x * mult`` only occurs in such a block (``mult`` is finite, and
0 only when the block's amax is finite); so what the instruction does with NaN never reaches a
byte. The proof therefore compares codes on every non-NaN fp32 input and records the NaN case apart.

Both sides here are numpy: :func:`software_codes` is ``_e2m1_code`` line by line in int32 and fp32
arithmetic (the same wrap-around and rounding as the GPU; ``tests/test_e2m1_proof.py`` checks it
against the Triton helper itself, run by the interpreter); :func:`ptx_codes` is the PTX definition
written independently: the input widened exactly to float64, the nearest of the eight magnitudes,
ties to the even code, then saturation.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

#: e2m1 magnitudes by code 0..7 (code bit 3 is the sign)
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
#: the code ``cvt.rn.satfinite.e2m1x2.f32`` gives a NaN input: positive MAX_NORM (+6)
PTX_NAN_CODE = 0x7


def software_codes(bits: np.ndarray) -> np.ndarray:
    """``_e2m1_code`` on fp32 bit patterns (uint32 or int32 array): int32 codes (NaN included,
    whatever the integer arithmetic gives there)."""
    b = np.asarray(bits).astype(np.uint32).view(np.int32)
    with np.errstate(over="ignore", invalid="ignore"):
        sign = (b >> 28) & 8
        a_bits = b & np.int32(0x7FFFFFFF)
        normal = np.minimum(((a_bits + np.int32(0x1FFFFF) + ((a_bits >> 22) & 1)) >> 22) - 252, 7)
        t = a_bits.view(np.float32) * np.float32(2.0) + np.float32(8388608.0)
        small = t.view(np.int32) - np.int32(0x4B000000)
    return np.where(a_bits >= 0x3F800000, normal, small) | sign


def ptx_codes(bits: np.ndarray) -> np.ndarray:
    """``cvt.rn.satfinite`` fp32 -> e2m1 by the PTX definition (round to nearest, ties to the even
    code, saturate to +-6, NaN to +6): int32 codes, sign in bit 3."""
    b = np.asarray(bits).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        x = b.view(np.float32).astype(np.float64)  # exact
    a = np.abs(x)
    nan = np.isnan(x)
    a = np.where(nan, 0.0, a)
    hi = np.minimum(np.searchsorted(E2M1_VALUES, a, side="left"), 7)  # first value >= a (or 6)
    lo = np.maximum(hi - 1, 0)
    d_lo = a - E2M1_VALUES[lo]
    d_hi = E2M1_VALUES[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= 6.0, 7, code)  # .satfinite: beyond 6 (and +-inf) is +-6
    code = code | ((b >> 31).astype(np.int64) << 3)
    return np.where(nan, PTX_NAN_CODE, code).astype(np.int32)


def ptx_pack(a_code: np.ndarray, b_code: np.ndarray) -> np.ndarray:
    """The ``.b8`` destination of ``cvt ... d, a, b``: ``a``'s code in the upper 4 bits."""
    return ((np.asarray(a_code) & 0xF) << 4 | (np.asarray(b_code) & 0xF)).astype(np.uint8)


def software_pack(even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """The software path's byte: element ``2i`` (``even``) in the low nibble."""
    return ((np.asarray(even) & 0xF) | (np.asarray(odd) & 0xF) << 4).astype(np.uint8)


def compare(bits: np.ndarray) -> dict:
    """Counts over ``bits``: inputs, NaN inputs, non-NaN inputs whose codes differ (with up to 8
    examples), and NaN inputs whose raw codes differ (bytes the kernel zeroes either way)."""
    b = np.asarray(bits).astype(np.uint32)
    sw, hw = software_codes(b), ptx_codes(b)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    bad = (sw != hw) & ~nan
    n_bad = int(bad.sum())
    return {
        "inputs": int(b.size),
        "nan_inputs": int(nan.sum()),
        "mismatches": n_bad,
        "examples": [f"0x{int(v):08x}" for v in b[bad][:8]],
        "nan_raw_differences": int(((sw != hw) & nan).sum()),
    }


def domain_small() -> np.ndarray:
    """The CI domain: every bf16 pattern (as fp32), every rounding boundary and grid value of e2m1
    (and of 6 x 2**k above it) +-16 ulps with both signs, subnormals, +-0, +-inf, NaNs."""
    parts = [np.arange(1 << 16, dtype=np.uint32) << 16]
    points = np.concatenate([E2M1_VALUES, (E2M1_VALUES[1:] + E2M1_VALUES[:-1]) / 2, [7.0, 8.0, 12.0, 6.0 * 2**20]])
    centre = np.abs(points.astype(np.float32)).view(np.uint32)
    offsets = np.arange(-16, 17, dtype=np.int64)
    around = (centre[:, None].astype(np.int64) + offsets[None, :]).reshape(-1)
    around = around[(around >= 0) & (around <= 0x7F800000)].astype(np.uint32)
    parts += [around, around | 0x80000000]
    sub = np.concatenate([np.arange(1, 4097, dtype=np.uint32), 0x007FFFFF - np.arange(4096, dtype=np.uint32)])
    parts += [sub, sub | 0x80000000]
    special = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF]
    parts.append(np.array(special, dtype=np.uint32))
    parts.append(np.random.default_rng(0).integers(0, 1 << 32, 1 << 18, dtype=np.uint32))
    return np.unique(np.concatenate(parts))


def exhaustive(chunk_bits: int = 24, progress=None) -> dict:
    """:func:`compare` over all 2**32 fp32 bit patterns, in chunks of ``2**chunk_bits``."""
    total = {"inputs": 0, "nan_inputs": 0, "mismatches": 0, "examples": [], "nan_raw_differences": 0}
    step = 1 << chunk_bits
    t0 = time.time()
    for start in range(0, 1 << 32, step):
        r = compare(np.arange(start, start + step, dtype=np.uint64).astype(np.uint32))
        for k in ("inputs", "nan_inputs", "mismatches", "nan_raw_differences"):
            total[k] += r[k]
        total["examples"] = (total["examples"] + r["examples"])[:8]
        if progress is not None:
            progress(start + step, time.time() - t0)
    total["seconds"] = round(time.time() - t0, 1)
    return total


def main(argv: list[str]) -> int:
    """``python -m inkling_workbook.proofs.e2m1_proof OUT_JSON``: the exhaustive proof and its record."""
    if len(argv) != 1:
        print(main.__doc__, file=sys.stderr)
        return 2
    from inkling_workbook.measure import provenance

    def progress(done, secs):
        if done % (1 << 28) == 0:
            print(f"{done / 2**32:6.1%} {secs:7.1f} s", flush=True)

    result = exhaustive(progress=progress)
    small = compare(domain_small())
    prov = provenance.collect(["python", "-m", "inkling_workbook.proofs.e2m1_proof", *argv])
    prov["device"] = f"{prov['device'].split(',')[0]}, numpy (no GPU, no interpreter)"
    prov.pop("interpreter_bf16_rounding", None)
    record = {
        "provenance": prov,
        "claim": (
            "the kernel's software e2m1 rounding (_e2m1_code) equals cvt.rn.satfinite.e2m1x2.f32 as the PTX ISA "
            "defines it on every non-NaN fp32 input; NaN inputs only occur in blocks the kernel zeroes"
        ),
        "ptx_definition": (
            "round to nearest, ties to even; .satfinite: beyond +-6 (and +-inf) -> +-6, NaN -> +6; operand a -> "
            "upper nibble, b -> lower nibble (PTX ISA, cvt)"
        ),
        "exhaustive": result,
        "ci_domain": small,
        "ok": result["mismatches"] == 0 and result["inputs"] == 1 << 32,
    }
    provenance.write_record(argv[0], json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("exhaustive", "ok")}, indent=1))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

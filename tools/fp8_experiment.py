"""Experiment B (2026-11-30), written before it ran; predictions in data/tuning_log.md, the
record (with provenance) in data/experiments/experiment_b_h200.json.

    python tools/fp8_experiment.py OUT_JSON

1. ``e4m3``: the hardware e4m3 conversion against the integer rounding on all 2**32 fp32 bit
   patterns (``inkling_kernels.fp8.e4m3_paths_mismatches``), timed.
2. ``fp8``: the fused FP8 kernel at M = 49152, N in {1536, 3072}, both layouts: the integer
   rounding (the published kernel) against the hardware conversion, over a few tiles (elements a
   program, warps); decode M = 16 next to ``silu_and_mul``, PDL on; the masked cases (ragged and
   full, E = 8, T = 256), now with empty programs returning early. Every variant's bytes are
   compared with the published kernel's before it is timed.
3. ``decode``: a tile sweep of ``silu_and_mul`` at M in {1, 4, 8, 16} x N in {768, 1536, 3072},
   interleaved and not, PDL off and on, against the heuristic's 1 x 256 / 4 warps.
4. ``host``: host time per call (``inkling_workbook.hostbench``) after the cheaper overlap and
   global-scale checks.

Timing: the method of ``inkling_workbook.bench`` (fixed-count graphs, >= 100 calls, >= 1 ms a
replay, 10 replays a pass, passes interleaved across the variants of one shape).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from inkling_kernels import fp8 as fp8_mod
from inkling_kernels import silu_and_mul
from inkling_kernels.reference import bits_equal
from inkling_kernels.silu_and_mul import LaunchConfig
from inkling_workbook import bench, fp8_bench, provenance
from inkling_workbook.hostbench import measure_host_overhead

PASSES = 3


def _timings(calls: dict, nbytes: int | None = None) -> dict:
    res = bench.time_calls(calls, PASSES)
    out = {}
    for k, t in res.items():
        row = {
            "median_us": round(t.median_us, 4),
            "lo_us": round(t.lo_us, 4),
            "hi_us": round(t.hi_us, 4),
            "reps": t.reps,
        }
        if nbytes:
            row["tbps"] = round(nbytes / t.median_us / 1e6, 4)
        out[k] = row
    return out


def e4m3() -> dict:
    t0 = time.perf_counter()
    bad = fp8_mod.e4m3_paths_mismatches()
    return {"fp32_patterns": 2**32, "mismatches": bad, "seconds": round(time.perf_counter() - t0, 2)}


class _Variant:
    """Run the fused kernel with given constexpr switches (``_kernel_flags``; ``hw=False``: the
    integer paths and the IEEE division an element, as the interpreter runs them) and tile."""

    def __init__(self, hw, tile: tuple[int, int] | None):
        self.flags = hw if isinstance(hw, dict) else None if hw else dict(_OFF, HW=False, DIV=0)
        self.tile = tile

    def __enter__(self):
        self._flags, self._cfg, self._pairs = fp8_mod._kernel_flags, fp8_mod._launch_config, fp8_mod._pair_words
        if self.flags is not None:
            flags = {k: v for k, v in self.flags.items() if k != "PAIR_WORDS"}

            def kernel_flags(device, dtype, interpreted):
                out = dict(_OFF, **flags)
                out["DIV"] = flags.get("DIV", 0) if dtype != torch.float32 else 0
                out["BF16_BITS"] = flags.get("BF16_BITS", False) and dtype == torch.bfloat16
                return out

            fp8_mod._kernel_flags = kernel_flags
            pairs = self.flags.get("PAIR_WORDS", True)
            fp8_mod._pair_words = lambda x3: pairs and self._pairs(x3)
        if self.tile is not None:
            elems, warps = self.tile

            def cfg(rows, G, group, interpreted):
                block_m, block_g, _ = self._cfg(rows, G, group, interpreted)
                if rows > 64:
                    block_m = max(1, elems // (block_g * group))
                return block_m, block_g, warps

            fp8_mod._launch_config = cfg
        return self

    def __exit__(self, *exc):
        fp8_mod._kernel_flags, fp8_mod._launch_config, fp8_mod._pair_words = self._flags, self._cfg, self._pairs


# switches added after experiment D, off unless a variant names them
_OFF = {"FTZ_EXP": False, "BF16_BITS": False, "FAST_SCALE": False, "WARP_REDUX": False, "SCALE_ASM": False}


def _fused_call(case, hw, tile):
    impls = fp8_bench.fp8_impls(case)
    fn, nbytes = impls["fused"]

    def call():
        with _Variant(hw, tile):
            return fn()

    return call, nbytes, impls


def fp8() -> dict:
    rows = []
    cases = {c["name"]: c for c in fp8_bench.fp8_cases()}
    variants = {
        "int_4096x4w": (False, None),
        "hw_4096x4w": (True, None),
        "hw_8192x8w": (True, (8192, 8)),
        "hw_4096x8w": (True, (4096, 8)),
        "hw_2048x4w": (True, (2048, 4)),
    }
    big = [f"M49152_N{n}_{lay}" for n in (1536, 3072) for lay in ("il", "nil")]
    big += ["M49152_N3072_il_colmajor_ue8m0", "M49152_N1536_nil_colmajor_ue8m0"]
    for name in tqdm(big, desc="fp8 M=49152"):
        case = cases[name]
        calls, ref = {}, None
        for v, (hw, tile) in variants.items():
            call, nbytes, _ = _fused_call(case, hw, tile)
            q, s = call()
            got = (q.clone(), s.clone())
            if ref is None:
                ref = got
            assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (name, v)
            calls[v] = call
        rows.append({"case": name, "bytes": nbytes, **_timings(calls, nbytes)})
    # decode and masked: published (integer) vs hardware conversion; silu_and_mul alone at decode
    for name in tqdm(["M16_N1536_il", "M16_N3072_il", "M16_N1536_nil", "M16_N3072_nil"], desc="fp8 decode"):
        case = cases[name]
        calls = {v: _fused_call(case, hw, None)[0] for v, (hw, _) in (("int", (False, None)), ("hw", (True, None)))}
        g = torch.randn((16, 2 * case["N"]), device="cuda").bfloat16()
        o = torch.empty((16, case["N"]), device="cuda", dtype=torch.bfloat16)
        calls["silu_and_mul_pdl"] = lambda g=g, o=o, il=case["interleaved"]: silu_and_mul(g, interleaved=il, out=o)
        rows.append({"case": name, **_timings(calls)})
    for name in tqdm([n for n in cases if n.startswith("masked")], desc="fp8 masked"):
        case = cases[name]
        calls = {v: _fused_call(case, hw, None)[0] for v, (hw, _) in (("int", (False, None)), ("hw", (True, None)))}
        rows.append({"case": name, "rows_present": case["M"], **_timings(calls, fp8_bench.fp8_bytes(case))})
    return {
        "rows": rows,
        "ceilings_tbps": {n: bench.stream_ceiling(49152 * n, out_dtype=torch.uint8) for n in (1536, 3072)},
    }


def masked() -> list[dict]:
    """Why the ragged masked case (921 of 2048 rows) took longer than every row present: the same
    kernel on E = 8, T = 256 with different ``masked_m`` of about the same row count."""
    from inkling_kernels.fp8 import empty_scales

    counts = {
        "full_2048": (256,) * 8,
        "ragged_921": fp8_bench.MASKED_COUNTS,
        "ragged_921_sorted": tuple(sorted(fp8_bench.MASKED_COUNTS, reverse=True)),
        "uniform_920": (115,) * 8,
        "two_experts_512": (256, 256, 0, 0, 0, 0, 0, 0),
        "none_0": (0,) * 8,
    }
    rows = []
    for N in (1536, 3072):
        gateup = torch.randn((8, 256, 2 * N), device="cuda").bfloat16()
        calls = {}
        for name, mm in counts.items():
            m = torch.tensor(mm, dtype=torch.int32, device="cuda")
            out = (
                torch.empty((8, 256, N), dtype=torch.float8_e4m3fn, device="cuda"),
                empty_scales((8, 256), N // 128, False, "cuda"),
            )
            calls[name] = lambda m=m, out=out: fp8_mod.silu_and_mul_fp8_group_quant(
                gateup, masked_m=m, out=out, interleaved=False
            )
        rows.append({"N": N, **_timings(calls)})
    return rows


# Experiment D (2026-11-30): the instruction count of the fused kernel. Variants: the IEEE division
# an element (div_rn; the published kernel's, here with the fp32 amax and four-byte packing) vs the
# reciprocal with one or two fma corrections, with and without the NaN -> 0x7F select before the
# conversion.
D_VARIANTS = {
    "div_rn": {"HW": True, "DIV": 0, "PAIR_WORDS": False},
    "rcp1": {"HW": True, "DIV": 1, "PAIR_WORDS": False},
    "rcp1_pairs": {"HW": True, "DIV": 1, "PAIR_WORDS": True},
}


def division() -> dict:
    """The proofs the variants need: the reciprocal division against div_rn (every reachable pair
    of a 16-bit dtype), with its planted-error check. (The first call of experiment D also checked
    the hardware conversion with and without a NaN select: both 0 mismatches on all 2**32.)"""
    out = {}
    for dtype in (torch.bfloat16, torch.float16):
        for steps in (1,):
            t0 = time.perf_counter()
            byte, bits, tiny = fp8_mod.division_mismatches(dtype, fp8_mod.DIV_MARKSTEIN)
            out[f"div_{str(dtype).split('.')[-1]}_steps{steps}"] = {
                "byte_mismatches": byte,
                "bit_mismatches_at_least_2^-10": bits,
                "bit_mismatches_below_2^-10": tiny,
                "planted": fp8_mod.division_mismatches(dtype, fp8_mod.DIV_MARKSTEIN, _perturb=True),
                "seconds": round(time.perf_counter() - t0, 2),
            }
    return out


def _variant_rows(names: list[str], variants: dict, desc: str) -> dict:
    """Each case of ``names`` with every kernel variant of ``variants`` (constexpr switches), the
    unfused pair and, at decode, ``silu_and_mul`` alone, timed in the same passes; every variant's
    present rows compared bit for bit with the first variant's before timing."""
    rows = []
    cases = {c["name"]: c for c in fp8_bench.fp8_cases()}
    for name in tqdm(names, desc=desc):
        case = cases[name]
        calls, ref = {}, None
        for v, flags in variants.items():
            call, nbytes, impls = _fused_call(case, flags, None)
            got = tuple(t.clone() for t in fp8_bench.present_rows(case, *call()))
            if ref is None:
                ref = got
            assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (name, v)
            calls[v] = call
        calls["unfused"] = impls["unfused"][0]
        if case["M"] <= 16:
            g = torch.randn((case["M"], 2 * case["N"]), device="cuda").bfloat16()
            o = torch.empty((case["M"], case["N"]), device="cuda", dtype=torch.bfloat16)
            calls["silu_and_mul"] = lambda g=g, o=o, il=case["interleaved"]: silu_and_mul(g, interleaved=il, out=o)
        rows.append({"case": name, "bytes": fp8_bench.fp8_bytes(case), **_timings(calls, fp8_bench.fp8_bytes(case))})
    return {
        "rows": rows,
        "ceilings": {n: bench.stream_ceiling(49152 * n, out_dtype=torch.uint8) for n in (1536, 3072)},
    }


def fp8d() -> dict:
    names = [f"M49152_N{n}_{lay}" for n in (1536, 3072) for lay in ("il", "nil")]
    names += ["M49152_N3072_il_colmajor_ue8m0", "M49152_N1536_nil_colmajor_ue8m0"]
    names += ["M16_N1536_il", "M16_N3072_nil"] + [
        c["name"] for c in fp8_bench.fp8_cases() if c["name"].startswith("masked")
    ]
    return _variant_rows(names, D_VARIANTS, "fp8 variants")


def ragged() -> list[dict]:
    """The mid-size and prefill fallback of ``launch_config`` when no power of two up to 1024
    divides N (N = 2880): today 256 columns with a column mask; wider masked tiles launch fewer
    programs. Every tile's output is compared with the heuristic's before it is timed; compile
    static is timed in the same passes. PDL off and on."""
    from inkling_workbook.bench import compiled_ref

    static = compiled_ref("static")
    tiles = {
        333: [(1, 256, 4), (1, 512, 4), (1, 1024, 4), (1, 1024, 8)],
        4097: [(8, 256, 8), (4, 512, 8), (2, 1024, 8), (1, 1024, 4)],
    }
    rows = []
    for M, N, il, weighted in tqdm(
        [(333, 2880, False, False), (333, 2880, True, False), (4097, 2880, True, True)], desc="ragged"
    ):
        x = torch.randn((M, 2 * N), device="cuda").bfloat16()
        w = torch.rand(M, device="cuda") if weighted else None
        want = silu_and_mul(x, w, interleaved=il)
        for pdl in (False, True):
            calls = {}
            for bm, bn, warps in tiles[M]:
                cfg = LaunchConfig(bm, bn, warps)
                o = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                silu_and_mul(x, w, interleaved=il, out=o, config=cfg, enable_pdl=pdl)
                assert bits_equal(o, want), (M, N, il, cfg)
                calls[f"{bm}x{bn}/{warps}w"] = lambda x=x, w=w, o=o, cfg=cfg, il=il, pdl=pdl: silu_and_mul(
                    x, w, interleaved=il, out=o, config=cfg, enable_pdl=pdl
                )
            calls["compile_static"] = lambda x=x, w=w, il=il: static(x, w, il)
            rows.append(
                {"M": M, "N": N, "layout": "il" if il else "nil", "weighted": weighted, "pdl": pdl, **_timings(calls)}
            )
    return rows


DECODE_TILES = [(1, 256, 4), (1, 128, 4), (1, 512, 4), (1, 1024, 4), (1, 512, 2), (1, 256, 2), (1, 1024, 8)]


def decode() -> list[dict]:
    rows = []
    shapes = [(M, N, il) for M in (1, 4, 8, 16) for N in (768, 1536, 3072) for il in (True, False)]
    for M, N, il in tqdm(shapes, desc="decode tiles"):
        x = torch.randn((M, 2 * N), device="cuda").bfloat16()
        want = silu_and_mul(x, interleaved=il)
        for pdl in (False, True):
            calls = {}
            for bm, bn, w in DECODE_TILES:
                if bn > N:
                    continue
                cfg = LaunchConfig(bm, bn, w)
                o = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                silu_and_mul(x, interleaved=il, out=o, config=cfg, enable_pdl=pdl)
                assert bits_equal(o, want), (M, N, il, cfg)
                calls[f"{bm}x{bn}/{w}w"] = lambda x=x, o=o, cfg=cfg, il=il, pdl=pdl: silu_and_mul(
                    x, interleaved=il, out=o, config=cfg, enable_pdl=pdl
                )
            rows.append({"M": M, "N": N, "layout": "il" if il else "nil", "pdl": pdl, **_timings(calls)})
    return rows


# Experiment F (2026-12-01): the instruction count again (offline SASS of one 16 x 128 program,
# instructions up to EXIT: 527 -> 409 non-interleaved, 547 -> 397 interleaved). "published": the
# kernel of the 72ae121 run (Markstein division, Triton's exp, bf16 via cvt one at a time);
# "split": the two-term reciprocal (2 instructions an element instead of 5); "new": split plus
# the flush-to-zero exponential and the bf16 widening/rounding on the bits (the package default).
F_VARIANTS = {
    "published": {"HW": True, "DIV": 1, "PAIR_WORDS": True},
    "split": {"HW": True, "DIV": 2, "PAIR_WORDS": True},
    "new": {"HW": True, "DIV": 2, "PAIR_WORDS": True, "FTZ_EXP": True, "BF16_BITS": True},
}


def proofs() -> dict:
    """What the new paths need: the sigmoid with the flushing exponential on all 2**32 fp32
    inputs; the split-reciprocal division (and the Markstein one, for comparison) on every
    reachable pair of bf16 and fp16, each with its planted error."""
    out = {}
    t0 = time.perf_counter()
    out["sigmoid"] = {
        "fp32_patterns": 2**32,
        "mismatches": fp8_mod.sigmoid_paths_mismatches(),
        "planted": fp8_mod.sigmoid_paths_mismatches(0x3F800000 - 2**16, 2**17, _perturb=True),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    for dtype in (torch.bfloat16, torch.float16):
        for name, method in (("split", fp8_mod.DIV_SPLIT), ("markstein", fp8_mod.DIV_MARKSTEIN)):
            t0 = time.perf_counter()
            byte, bits, tiny = fp8_mod.division_mismatches(dtype, method)
            out[f"div_{str(dtype).split('.')[-1]}_{name}"] = {
                "byte_mismatches": byte,
                "bit_mismatches_at_least_2^-10": bits,
                "bit_mismatches_below_2^-10": tiny,
                "planted": fp8_mod.division_mismatches(dtype, method, _perturb=True),
                "seconds": round(time.perf_counter() - t0, 2),
            }
    return out


def fp8f() -> dict:
    """The three variants of ``F_VARIANTS`` in the same passes, with the unfused pair, at every
    M = 49152 case, M = 1024, decode (with ``silu_and_mul`` alone) and the masked cases; each
    variant's present rows compared bit for bit with the published kernel's before timing."""
    cases = fp8_bench.fp8_cases()
    names = [c["name"] for c in cases if c["M"] in (49152, 1024, 16) or c["name"].startswith("masked")]
    return _variant_rows(names, F_VARIANTS, "fp8 variants F")


# Experiment G (2026-12-01): decode tiles of the fused FP8 kernel (groups a program, warps) next
# to silu_and_mul alone; and whether the masked layout's time follows the rows present once the
# call is large enough to be bandwidth-bound (E = 8, T = 2048: the benchmark's ragged counts x 8).
G_DECODE_TILES = [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2), (8, 2), (4, 4), (8, 4)]


def decode_tiles(tiles=None, ms=(1, 4, 16)) -> list[dict]:
    rows = []
    tiles = G_DECODE_TILES if tiles is None else tiles
    shapes = [(M, N, il) for M in ms for N in (1536, 3072) for il in (True, False)]
    for M, N, il in tqdm(shapes, desc="fp8 decode tiles"):
        G = N // 128
        g = torch.randn((M, 2 * N), device="cuda").bfloat16()
        ref = fp8_mod.silu_and_mul_fp8_group_quant(g, interleaved=il)
        ref = (ref[0].clone(), ref[1].clone())
        calls = {}
        default = fp8_mod._launch_config(M, G, 128, False)
        for bg, warps in tiles:
            if G % bg or bg * 128 < 32 * warps:
                continue
            out = (torch.empty_like(ref[0]), torch.empty_like(ref[1]))

            def call(bg=bg, warps=warps, out=out):
                saved = fp8_mod._launch_config
                fp8_mod._launch_config = lambda rows, G, group, interpreted: (1, bg, warps)
                try:
                    return fp8_mod.silu_and_mul_fp8_group_quant(g, interleaved=il, out=out)
                finally:
                    fp8_mod._launch_config = saved

            q, sc = call()
            assert bits_equal(q, ref[0]) and bits_equal(sc, ref[1]), (M, N, il, bg, warps)
            tag = f"{bg}g/{warps}w" + (" (default)" if (1, bg, warps) == default else "")
            calls[tag] = call
        o = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        calls["silu_and_mul"] = lambda o=o, il=il: silu_and_mul(g, interleaved=il, out=o)
        rows.append({"M": M, "N": N, "layout": "il" if il else "nil", **_timings(calls)})
    return rows


def _masked_rows(T: int, ragged: tuple, flat_rows: tuple, desc: str) -> list[dict]:
    """E = 8 experts of T rows, N in {1536, 3072}: the masked call with every row present, the
    ``ragged`` counts and none, next to one contiguous 2-D call of each of ``flat_rows`` rows, all
    timed in the same passes (``_masked_variant_rows`` with the launch as it is)."""
    return _masked_variant_rows(T, ragged, flat_rows, {"masked": {}}, desc)


def masked_large() -> list[dict]:
    ragged = tuple(8 * c for c in fp8_bench.MASKED_COUNTS)
    return _masked_rows(2048, ragged, (sum(ragged),), "fp8 masked large")


# Experiment H (2026-12-01): tiles of the final kernel (elements a program, warps) at the sizes the
# sweep times, the default 2048 / 4 warps against larger programs (fewer programs, the per-program
# work amortized over more elements) and a smaller one; and torch.compile's max-autotune mode of the
# FP8 reference (the review of the session's numbers: only the default mode was timed).
H_TILES = [None, (1024, 4), (4096, 4), (4096, 8), (8192, 8)]


def tiles_h() -> list[dict]:
    rows = []
    cases = {c["name"]: c for c in fp8_bench.fp8_cases()}
    names = [f"M49152_N{n}_{lay}" for n in (3072, 1536) for lay in ("il", "nil")]
    names += ["M49152_N3072_il_colmajor", "M8192_N3072_nil", "M1024_N1536_nil"]
    names += [n for n in cases if n.startswith("masked")]
    for name in tqdm(names, desc="fp8 tiles H"):
        case = cases[name]
        calls, ref = {}, None
        for tile in H_TILES:
            call, nbytes, _ = _fused_call(case, True, tile)
            got = tuple(t.clone() for t in fp8_bench.present_rows(case, *call()))
            if ref is None:
                ref = got
            assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (name, tile)
            calls["default" if tile is None else f"{tile[0]}/{tile[1]}w"] = call
        rows.append({"case": name, "bytes": fp8_bench.fp8_bytes(case), **_timings(calls, fp8_bench.fp8_bytes(case))})
    return rows


def compile_modes() -> list[dict]:
    from inkling_kernels.reference import silu_and_mul_fp8_group_quant_ref

    rows = []
    for N, column_major in tqdm(((3072, False), (3072, True), (1536, False)), desc="compile modes"):
        g = torch.randn((49152, 2 * N), device="cuda").bfloat16()

        def fn(gateup, column_major=column_major):
            q, s = silu_and_mul_fp8_group_quant_ref(gateup, interleaved=False, group_size=128)
            return q, (s.t().contiguous() if column_major else s)

        calls = {}
        for mode in ("default", "max-autotune-no-cudagraphs"):
            t0 = time.perf_counter()
            c = torch.compile(fn, dynamic=False, mode=None if mode == "default" else mode)
            c(g)
            torch.cuda.synchronize()
            calls[mode] = lambda c=c: c(g)
            print(f"N={N} column_major={column_major} {mode}: compiled in {time.perf_counter() - t0:.0f} s", flush=True)
        fused = fp8_mod.silu_and_mul_fp8_group_quant
        out = fused(g, interleaved=False, column_major_scales=column_major)
        calls["fused"] = lambda: fused(g, interleaved=False, column_major_scales=column_major, out=out)
        rows.append({"N": N, "column_major": column_major, **_timings(calls)})
        torch._dynamo.reset()
    return rows


# Experiment I (2026-12-01): the decode latency of the fused FP8 kernel. After the group maximum
# the compiled chain was two IEEE divisions (the scale, its reciprocal: range checks and a slow path
# each) and a store of the scales through shared memory and a barrier. FAST_SCALE: the scale as a
# corrected product, its reciprocal from MUFU.RCP (the same bits on every fp32 maximum:
# scale_paths_mismatches). The first call (c15942e) also timed SCALE_ASM, the decode scales stored
# by one lane a group from the reduction's layout (dropped: slower on the interleaved layout), and
# the reciprocal with a Newton step (dropped: the proof needs none). FAST_SCALE applies to decode
# launches only (the launcher): past 64 rows the two variants below are now the same kernel.
_I_NEW = {"HW": True, "DIV": 2, "PAIR_WORDS": True, "FTZ_EXP": True, "BF16_BITS": True}
I_VARIANTS = {"published": _I_NEW, "fast_scale": dict(_I_NEW, FAST_SCALE=True)}


# Experiment J: decode tiles again with FAST_SCALE, adding programs of 8 warps (silu_and_mul's
# decode shape at N = 3072: 1024 elements, 8 warps, 4 a thread)
J_DECODE_TILES = [(4, 4), (8, 8), (2, 2), (8, 4), (4, 8)]


def decode_tiles_j() -> list[dict]:
    return decode_tiles(J_DECODE_TILES, ms=(16,))


# Experiment K: the decode program's group maximum by one redux.sync.max.u32 a warp instead of the
# five-step shuffle butterfly (WARP_REDUX; decode programs hold one group a warp). The call at
# 5cce747 timed two scale stores after it: by one lane a group with an inline st.global (dropped:
# slower on the interleaved layout, as in experiment I) and after a butterfly back to tl.store's
# layout (kept, the only one now).
K_VARIANTS = {
    "published": _I_NEW,
    "fast_scale": dict(_I_NEW, FAST_SCALE=True),
    "redux_tl_store": dict(_I_NEW, FAST_SCALE=True, WARP_REDUX=True),
}


def fp8k() -> dict:
    names = ["M16_N1536_nil", "M16_N1536_il", "M16_N3072_nil", "M16_N3072_il"]
    return _variant_rows(names, K_VARIANTS, "fp8 variants K")


def proofs_i() -> dict:
    t0 = time.perf_counter()
    counts = fp8_mod.scale_paths_mismatches()
    planted = fp8_mod.scale_paths_mismatches(_perturb=True)
    keys = ["scale", "reciprocal", "ue8m0_reciprocal"]
    return {
        "domain": "every fp32 amax in [fp32(1e-10), FLT_MAX]",
        "mismatches": dict(zip(keys, counts, strict=True)),
        "planted_at_amax_1": dict(zip(keys, planted, strict=True)),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def fp8i() -> dict:
    """``I_VARIANTS`` in the same passes (with the unfused pair and, at decode, ``silu_and_mul``
    alone): decode, the two largest cases and M = 1024 (no regression), the masked cases; each
    variant's present rows compared bit for bit with the published kernel's first."""
    names = ["M16_N1536_nil", "M16_N1536_il", "M16_N3072_nil", "M16_N3072_il"]
    names += ["M1024_N1536_nil", "M49152_N3072_nil", "M49152_N1536_il_colmajor_ue8m0"]
    names += ["masked_ragged_E8_T256_N1536", "masked_full_E8_T256_N1536", "masked_ragged_E8_T256_N3072"]
    return _variant_rows(names, I_VARIANTS, "fp8 variants I")


def masked_small() -> list[dict]:
    """The benchmark's masked shape (E = 8, T = 256, ragged counts) against the same rows as one
    contiguous 2-D call and an empty call: what a time proportional to the rows present would be."""
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    return _masked_rows(256, ragged, (sum(ragged), 16), "fp8 masked small")


# Experiment L (2026-12-01, at ca8c208, `data/experiments/experiment_l_h200.json`): a row loop of a
# few programs an expert, since removed; its step is in the tool at that commit.
#
# Experiment M (9a8b6ff; the early loads were removed after it): the masked layout's work list with
# the next tile's loads issued ahead, on grids of
# 4, 8 and 16 programs a streaming multiprocessor (16: the published grid), forced at T = 256 where
# the launch is otherwise one program per tile slot; and that one-per-slot launch with larger
# programs (elements a program / warps: fewer programs, the same 16 elements a thread).
M_VARIANTS = {
    "published": {},
    "wl4": {"WORK_LIST_PAST": 0, "WORK_LIST_PER_SM": 4},
    "wl8": {"WORK_LIST_PAST": 0, "WORK_LIST_PER_SM": 8},
    "wl16": {"WORK_LIST_PAST": 0, "WORK_LIST_PER_SM": 16},
    "slot_4096/8w": {"WORK_LIST_PAST": 10**9, "tile": (4096, 8)},
    "slot_8192/16w": {"WORK_LIST_PAST": 10**9, "tile": (8192, 16)},
}


def _masked_variant(v: dict, fn):
    """``fn`` with the module constants of ``v`` set (``WORK_LIST_PAST``, ...) and its ``tile``
    (elements a program, warps; ``_Variant``) while it runs, the rest of the launch as it is."""
    knobs = {k: val for k, val in v.items() if k != "tile"}

    def call():
        saved = {k: getattr(fp8_mod, k) for k in knobs}
        for k, val in knobs.items():
            setattr(fp8_mod, k, val)
        try:
            with _Variant(True, v.get("tile")):
                return fn()
        finally:
            for k, val in saved.items():
                setattr(fp8_mod, k, val)

    return call


def _masked_variant_rows(
    T: int,
    ragged: tuple,
    flat_rows: tuple,
    variants: dict,
    desc: str,
    enable_pdl=None,
    cold: bool = False,
    flat_variants: bool = False,
) -> list[dict]:
    """``_masked_rows`` for every variant in the same passes; each variant's rows present (bytes
    and scales) compared bit for bit with the published launch's, and the rows absent left as
    poisoned, before timing. ``cold``: every call rotates over enough input and output sets that
    at least ``bench.COLD_FACTOR`` L2s of the smallest timed call's bytes pass between two uses of
    a set (the benchmark's cold L2; 21963ec sized them by the full call's, too few for the ragged
    calls); the check runs on the first set. ``flat_variants``: the 2-D calls of the rows present
    under every variant too (``{variant}_2d_{rows}``), for variants that change the 2-D program."""
    from inkling_kernels.fp8 import empty_scales

    op = fp8_mod.silu_and_mul_fp8_group_quant
    rows = []
    E = 8
    counts = {"full": (T,) * E, "ragged": ragged, "none": (0,) * E}
    for N in tqdm((1536, 3072), desc=desc):
        # cold: the sets are sized by the fewest rows a timed call reads (a masked call reads only
        # the rows present), so that even that call moves >= COLD_FACTOR L2s between two uses of a set
        fewest = min(r for r in (sum(ragged), *flat_rows) if r > 0)
        nsets = bench.n_buffer_sets(fewest * (5 * N + 4 * N // 128), cold)
        gateups = [torch.randn((E, T, 2 * N), device="cuda").bfloat16() for _ in range(nsets)]
        calls = {}
        for name, mm in counts.items():
            m = torch.tensor(mm, dtype=torch.int32, device="cuda")
            present = torch.arange(T, device="cuda")[None, :] < m[:, None]
            ref = None
            for vname, v in variants.items():
                fns = []
                for gateup in gateups:
                    q = torch.full((E, T, N), 0x7F, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
                    s = empty_scales((E, T), N // 128, False, "cuda").fill_(float("nan"))
                    fns.append(
                        _masked_variant(
                            v,
                            lambda m=m, q=q, s=s, g=gateup: op(
                                g, masked_m=m, out=(q, s), interleaved=False, enable_pdl=enable_pdl
                            ),
                        )
                    )
                    if len(fns) == 1:
                        fns[0]()
                        torch.cuda.synchronize()
                        got = (q[present].clone(), s[present].clone())
                        assert bool((q.view(torch.uint8)[~present] == 0x7F).all()), (N, name, vname)
                        assert bool(torch.isnan(s[~present]).all()), (N, name, vname)
                        if ref is None:
                            ref = got
                        assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (N, name, vname)
                calls[f"{vname}_{name}_{sum(mm)}"] = fns if cold else fns[0]
        for present_rows in flat_rows:
            fns = []
            for _ in range(nsets):
                flat = torch.randn((present_rows, 2 * N), device="cuda").bfloat16()
                out = (
                    torch.empty((present_rows, N), dtype=torch.float8_e4m3fn, device="cuda"),
                    empty_scales((present_rows,), N // 128, False, "cuda"),
                )
                fns.append(lambda flat=flat, out=out: op(flat, out=out, interleaved=False, enable_pdl=enable_pdl))
            if flat_variants:
                for vname, v in variants.items():
                    wrapped = [_masked_variant(v, fn) for fn in fns]
                    calls[f"{vname}_2d_{present_rows}"] = wrapped if cold else wrapped[0]
            else:
                calls[f"2d_{present_rows}"] = fns if cold else fns[0]
        rows.append(
            {
                "N": N,
                "E": E,
                "T": T,
                "ragged_counts": ragged,
                "enable_pdl": enable_pdl,
                "l2": "cold" if cold else "warm",
                "buffer_sets": nsets,
                **_timings(calls),
            }
        )
        del gateups, calls
    return rows


def masked_m() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    small = _masked_variant_rows(256, ragged, (sum(ragged), 8 * 256, 16), M_VARIANTS, "fp8 masked M, T = 256")
    big = tuple(8 * c for c in ragged)
    large = {k: v for k, v in M_VARIANTS.items() if not k.startswith("slot")}
    return small + _masked_variant_rows(2048, big, (sum(big),), large, "fp8 masked M, T = 2048")


# Experiment N (d6b8435; the row order was removed after it): the one-program-per-slot grid in
# row-tile order across the experts (``SLOTS_BY_ROW``) against expert by expert, with larger
# programs, and the work list without early loads (reverted after M) at 4 and 8 an SM; at T = 2048
# the work list (16 an SM) against 8. Rerun now, "by_row" and "by_expert" are the same launch.
N_VARIANTS = {
    "by_row": {},
    "by_expert": {},
    "by_row_4096/8w": {"WORK_LIST_PAST": 10**9, "tile": (4096, 8)},
    "wl4": {"WORK_LIST_PAST": 0, "WORK_LIST_PER_SM": 4},
    "wl8": {"WORK_LIST_PAST": 0, "WORK_LIST_PER_SM": 8},
}


def masked_n() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    small = _masked_variant_rows(256, ragged, (sum(ragged), 8 * 256, 16), N_VARIANTS, "fp8 masked N, T = 256")
    big = tuple(8 * c for c in ragged)
    large = {"published": {}, "wl8": N_VARIANTS["wl8"]}
    return small + _masked_variant_rows(2048, big, (sum(big),), large, "fp8 masked N, T = 2048")


# Experiment O: decode below M = 16 (the issue's target is M <= 16; the sweep times M = 16): the
# fused op as launched (PDL on) and ``silu_and_mul`` alone, in the same passes, at M in {1, 2, 4, 8,
# 16} x N in {1536, 3072}, both layouts; and the fused op without PDL.
def decode_o() -> list[dict]:
    rows = []
    shapes = [(M, N, il) for N in (1536, 3072) for il in (False, True) for M in (1, 2, 4, 8, 16)]
    for M, N, il in tqdm(shapes, desc="fp8 decode O"):
        case = fp8_bench._case(f"M{M}_N{N}_{'il' if il else 'nil'}", M, N, il)
        impls = fp8_bench.fp8_impls(case)
        fp8_bench.check_fused_equals_unfused(case, impls)
        calls = {k: impls[k][0] for k in ("fused", "fused_no_pdl", "silu_and_mul_alone")}
        res = _timings(calls)
        gap = res["fused"]["median_us"] - res["silu_and_mul_alone"]["median_us"]
        rows.append({"case": case["name"], "M": M, "N": N, "interleaved": il, "gap_us": round(gap, 4), **res})
    return rows


# Experiment Q (319d75e; the pipelined loop was removed after it, its step is in the tool at that
# commit): the masked work list on small grids whose loads Triton's software pipeliner issued a few
# items ahead (``WORK_LIST_STAGES``), and on 10 programs an SM with the plain loop.
#
# Experiment R: the work list on the grid of what an SM holds of its program (``_programs_an_sm``:
# 10 an SM of the 48-register program) against the 16 an SM it had (1.6 waves) at T = 2048; and the
# benchmark's small ragged counts (921 rows) in buffers of T = 256, 512, 1024 and 2048 as launched,
# and with the work list forced (the launch's threshold), next to the same rows as a 2-D call.
def _fixed_programs_an_sm(n: int):
    return lambda device, interpreted, args, consts: n


R_VARIANTS = {"published": {}, "wl16": {"_programs_an_sm": _fixed_programs_an_sm(16)}}


def masked_r() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    big = tuple(8 * c for c in ragged)
    rows = _masked_variant_rows(2048, big, (sum(big),), R_VARIANTS, "fp8 masked R, T = 2048")
    listed = {"published": {}, "list": {"WORK_LIST_PAST": 0}}
    for T in (256, 512, 1024, 2048):
        variants = listed if T < 2048 else {"published": {}}
        rows += _masked_variant_rows(T, ragged, (sum(ragged),), variants, f"fp8 masked R, T = {T}, 921 rows")
    for T in (512, 1024):
        scaled = tuple(c * T // 256 for c in ragged)
        rows += _masked_variant_rows(T, scaled, (sum(scaled),), listed, f"fp8 masked R, T = {T}, counts x {T // 256}")
    return rows


# Experiment T: the launch before 525d6e9 (one program a slot, 4096-element 8-warp programs past the
# resident programs) against the work list now launched there, in the same passes, with PDL on and
# off, at T = 256 and 512 (the benchmark's counts, scaled with T at 512) and the 921 rows at T = 512.
T_VARIANTS = {"launched": {}, "slots_4096/8w": {"WORK_LIST_PAST": 10**9, "tile": (4096, 8)}}


def masked_t() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    rows = []
    for pdl in (None, False):
        tag = "PDL off" if pdl is False else "PDL on"
        rows += _masked_variant_rows(256, ragged, (sum(ragged),), T_VARIANTS, f"T = 256, {tag}", pdl)
        scaled = tuple(2 * c for c in ragged)
        rows += _masked_variant_rows(512, scaled, (sum(scaled),), T_VARIANTS, f"T = 512 x 2, {tag}", pdl)
        rows += _masked_variant_rows(512, ragged, (sum(ragged),), T_VARIANTS, f"T = 512, 921 rows, {tag}", pdl)
    return rows


# Experiment U: experiment T's comparison with cold L2 (the switch to the work list was measured
# warm only), PDL on and off; and the host time of a masked call on the work list against one on
# the tile slots and a 2-D call (``_masked_host``).
def masked_u() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    rows = []
    for pdl in (None, False):
        tag = "PDL off" if pdl is False else "PDL on"
        rows += _masked_variant_rows(256, ragged, (sum(ragged),), T_VARIANTS, f"cold T = 256, {tag}", pdl, True)
        scaled = tuple(2 * c for c in ragged)
        rows += _masked_variant_rows(512, scaled, (sum(scaled),), T_VARIANTS, f"cold T = 512 x 2, {tag}", pdl, True)
        rows += _masked_variant_rows(512, ragged, (sum(ragged),), T_VARIANTS, f"cold T = 512, 921, {tag}", pdl, True)
    return rows


# Experiment V (54be7ae; the knob was removed after it, its step is in the tool at that commit): the
# work list's program held to 40 or 32 registers (ptxas ``maxnreg``) for 12 or 16 programs an SM.


# Experiment W: the work list over smaller tiles (1024 elements, 2 or 4 warps, forced on at every
# T) against the launch as it is: more, shorter items on a grid of what the GPU holds of the smaller
# program, so that the last round of items is a smaller share of the call (every expert full at
# T = 256, N = 3072 runs 3072 items on 1320 programs, the last round a third full).
W_VARIANTS = {
    "launched": {},
    "wl_1024/2w": {"tile": (1024, 2), "WORK_LIST_PAST": 0},
    "wl_1024/4w": {"tile": (1024, 4), "WORK_LIST_PAST": 0},
}


def masked_w() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    rows = _masked_variant_rows(256, ragged, (sum(ragged), 2048), W_VARIANTS, "W, T = 256")
    big = tuple(8 * c for c in ragged)
    rows += _masked_variant_rows(2048, big, (sum(big),), W_VARIANTS, "W, T = 2048 x 8")
    rows += _masked_variant_rows(2048, ragged, (sum(ragged),), W_VARIANTS, "W, T = 2048, 921 rows")
    return rows


# Experiment X: the work list's items at 4096 elements (4 warps: 32 a thread, 64 registers, 8
# programs an SM; ``WORK_LIST_ELEMS``) against 2048 (16 a thread, 48 registers, 10 an SM), where the
# launch takes the work list; and the 4096-element work list forced at T = 256, N = 1536 (launched
# one program a slot there). An SM holds 32K elements of the larger items against 20K, and every
# expert full at T = 256, N = 3072 is 1536 items on 1056 programs instead of 3072 on 1320.
# (5a7a749; the knob was removed after it, its step needs that commit's package)
X_VARIANTS = {
    "launched": {},
    "wl_4096": {"WORK_LIST_ELEMS": 4096},
    "wl_4096_forced": {"WORK_LIST_ELEMS": 4096, "WORK_LIST_PAST": 0},
}


def masked_x() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    rows = _masked_variant_rows(256, ragged, (sum(ragged), 2048), X_VARIANTS, "X, T = 256")
    two = {k: X_VARIANTS[k] for k in ("launched", "wl_4096")}
    for T in (512, 1024, 2048):
        rows += _masked_variant_rows(T, ragged, (sum(ragged),), two, f"X, T = {T}, 921 rows")
    big = tuple(8 * c for c in ragged)
    rows += _masked_variant_rows(2048, big, (sum(big),), two, "X, T = 2048 x 8")
    return rows


# Experiment Y (5c412f1; the counter was removed after it, the step needs that commit's package):
# the work list with its items past the first round drawn from a
# counter in device memory (``WORK_LIST_DYNAMIC``), so that programs that start late (an SM starts
# its programs about 160 ns apart: experiment M) or run slow take fewer items. 1: the next item is
# drawn once the tile's loads are issued (64 registers, 8 programs an SM); 2: after its stores (55,
# 9 an SM). Before timing, every variant's rows present are checked bit for bit against a launch
# without the counter over 20 eager calls and 20 graph replays in a row, outputs poisoned before each
# (a counter not zeroed by the launch before would skip items), and the counter read back as 0.
Y_VARIANTS = {"launched": {}, "dyn_loads": {"WORK_LIST_DYNAMIC": 1}, "dyn_stores": {"WORK_LIST_DYNAMIC": 2}}


def _dynamic_replays(T: int, N: int, counts: tuple, variant: dict) -> int:
    """Calls (eager, then graph replays) whose rows present matched the static work list's."""
    from inkling_kernels.fp8 import empty_scales

    op = fp8_mod.silu_and_mul_fp8_group_quant
    E = len(counts)
    m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    present = torch.arange(T, device="cuda")[None, :] < m[:, None]
    gateup = torch.randn((E, T, 2 * N), device="cuda").bfloat16()
    q = torch.empty((E, T, N), dtype=torch.float8_e4m3fn, device="cuda")
    s = empty_scales((E, T), N // 128, False, "cuda")
    rq, rs = _masked_variant({"WORK_LIST_PAST": 0}, lambda: op(gateup, masked_m=m, interleaved=False))()
    call = _masked_variant(
        dict(variant, WORK_LIST_PAST=0), lambda: op(gateup, masked_m=m, out=(q, s), interleaved=False)
    )

    def same() -> bool:
        torch.cuda.synchronize()
        return bits_equal(q[present], rq[present]) and bits_equal(s[present], rs[present])

    good = 0
    for _ in range(20):
        q.view(torch.uint8).fill_(0x7F)
        s.fill_(float("nan"))
        call()
        good += same()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(20):
        q.view(torch.uint8).fill_(0x7F)
        s.fill_(float("nan"))
        graph.replay()
        good += same()
    ws = fp8_mod._WORKSPACE[torch.device("cuda", torch.cuda.current_device())]
    assert int(ws[0]) == 0, int(ws[0])
    return good


def masked_y() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    checks = {}
    for name in ("dyn_loads", "dyn_stores"):
        for T, N, counts in ((256, 3072, (256,) * 8), (256, 3072, ragged), (2048, 1536, tuple(8 * c for c in ragged))):
            good = _dynamic_replays(T, N, counts, Y_VARIANTS[name])
            assert good == 40, (name, T, N, counts, good)
            checks[f"{name}_T{T}_N{N}_{sum(counts)}"] = good
    rows = [{"replays_bitwise_equal_of_40": checks}]
    rows += _masked_variant_rows(256, ragged, (sum(ragged), 2048), Y_VARIANTS, "Y, T = 256")
    for T in (512, 2048):
        rows += _masked_variant_rows(T, ragged, (sum(ragged),), Y_VARIANTS, f"Y, T = {T}, 921 rows")
    big = tuple(8 * c for c in ragged)
    rows += _masked_variant_rows(2048, big, (sum(big),), Y_VARIANTS, "Y, T = 2048 x 8")
    return rows


# Experiment Z (the review of X and Y): rounds, cleanly. The 2048-element work-list program as
# launched, on grids of 10 (launched: 1320 programs, 3072 items = 2.33 rounds, the third a third
# full), 8 (1056: 2.91 rounds, the third 91% full) and 6 programs an SM (792: 3.88, the fourth 88%
# full), every expert full and the 921 rows at T = 256, N = 3072 (N = 1536 launches one program a
# slot there, so its variants are one launch).
Z_VARIANTS = {"launched": {}, "wl8": {"WORK_LIST_PER_SM": 8}, "wl6": {"WORK_LIST_PER_SM": 6}}


def masked_z() -> list[dict]:
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    return _masked_variant_rows(256, ragged, (sum(ragged), 2048), Z_VARIANTS, "Z, T = 256")


def _masked_shapes(variants: dict, name: str, flat_variants: bool = False) -> list[dict]:
    """``variants`` at T = 256 (the 921 rows, full, empty, with the 2-D calls of 921 and 2048 rows),
    the 921 rows at T = 512 and 2048, and the counts x 8 at T = 2048 (experiments AA and AB)."""
    ragged = tuple(fp8_bench.MASKED_COUNTS)
    fv = {"flat_variants": flat_variants}
    rows = _masked_variant_rows(256, ragged, (sum(ragged), 2048), variants, f"{name}, T = 256", **fv)
    for T in (512, 2048):
        rows += _masked_variant_rows(T, ragged, (sum(ragged),), variants, f"{name}, T = {T}, 921 rows", **fv)
    big = tuple(8 * c for c in ragged)
    return rows + _masked_variant_rows(2048, big, (sum(big),), variants, f"{name}, T = 2048 x 8", **fv)


# Experiment AA (a1c0c36; the knob was removed after it, the step needs that commit's package):
# the work list with each program taking a run of consecutive items (``WORK_LIST_CHUNKED``): the
# expert and tiles are looked up once a run (the counts' reductions) and stepped from item to
# item, against items p, p + P, ... each looked up from the counts. The run's program holds 56
# registers (9 an SM) against 48 (10 an SM).
AA_VARIANTS = {"launched": {}, "chunked": {"WORK_LIST_CHUNKED": True}}


def masked_aa() -> list[dict]:
    return _masked_shapes(AA_VARIANTS, "AA")


# Experiment AB (818b358, where the packed lookup was a knob, off): the work list's lookup of an
# item as one reduction over a word a lane (the expert, its rows present and its first item packed
# in an int32: ``_pack_bits``) against four reductions over the counts; 48 registers either way.
# Adopted after it: "launched" is now the packed lookup, and "four_reductions" the fallback it
# takes when the fields don't fit (the record's "launched" and "packed" at 818b358).
AB_VARIANTS = {
    "launched": {},
    "four_reductions": {"_pack_bits": lambda *a: {"PACK_E_BITS": 0, "PACK_CNT_BITS": 0}},
}


def masked_ab() -> list[dict]:
    return _masked_shapes(AB_VARIANTS, "AB")


# Power: the repeat at 526be54 met the M = 49152 ceiling target in 15 of 16 cases; the 16th
# (N = 3072, gate || up, warm) reached 96.6%, its passes 177-192 us, with the SM clock between 1425
# and 1965 MHz under the software power cap. Nsight Compute (experiment AA) shows the kernel near
# its issue limit at full clock, so a capped clock may make it instruction-bound while the copy
# stays memory-bound. This step times, in the same interleaved passes, that case's fused call and
# the ceiling's copy (the best configuration ``bench.stream_ceiling`` finds, run alone first),
# and reads the SM clock, power and throttle reasons after every pass.
def power() -> dict:
    from inkling_kernels.fp8 import empty_scales

    N, M = 3072, 49152
    best = bench.stream_ceiling(M * N, out_dtype=torch.uint8)
    copy, _ = bench._fp8_ceiling_copy(M * N, best)

    x = torch.randn((M, 2 * N), device="cuda").bfloat16()
    o = (torch.empty((M, N), dtype=torch.float8_e4m3fn, device="cuda"), empty_scales((M,), N // 128, False, "cuda"))
    states = []
    timers = {
        "ceiling_copy": bench.GraphTimer([copy]),
        "fused": bench.GraphTimer([lambda: fp8_mod.silu_and_mul_fp8_group_quant(x, out=o, interleaved=False)]),
    }
    try:
        res = bench.time_interleaved(timers, 16, after_pass=lambda: states.append(provenance.gpu_state()))
    finally:
        for t in timers.values():
            t.close()
    nbytes = M * N * 5 + M * (N // 128) * 4
    per_pass = {}
    for k, t in res.items():
        per_pass[k] = [sorted(t.samples[i : i + t.rounds])[t.rounds // 2] for i in range(0, len(t.samples), t.rounds)]
    passes = [
        {
            "ceiling_us": round(c, 3),
            "fused_us": round(f, 3),
            "fused_of_ceiling": round(c / f * (nbytes / best["bytes"]), 4),
            **st,
        }
        for c, f, st in zip(per_pass["ceiling_copy"], per_pass["fused"], states, strict=True)
    ]
    return {"case": "M49152_N3072_nil, warm", "ceiling_alone": best, "bytes_fused": nbytes, "passes": passes}


# Experiment AC (2026-12-01): the sigmoid's reciprocal always scaled by 1/4 (``FTZ_EXP = 2``, three
# instructions an element fewer: 407 -> 362 SASS instructions to EXIT for a 16 x 128 program,
# gate || up) against experiment F's form (``FTZ_EXP = 1``), every other switch as launched; the
# proofs of both forms on all 2**32 inputs first. Why: if a deep power cap makes the M = 49152 call
# instruction-bound (526be54's 96.6%), fewer instructions an element give it room.
AC_LAUNCHED = {"HW": True, "DIV": 2, "PAIR_WORDS": True, "FTZ_EXP": 2}
AC_LAUNCHED |= {"BF16_BITS": True, "FAST_SCALE": True, "WARP_REDUX": True}
AC_VARIANTS = {"launched": AC_LAUNCHED, "sigmoid_f": dict(AC_LAUNCHED, FTZ_EXP=1)}


def proofs_ac() -> dict:
    out = {}
    for level in (1, 2):
        t0 = time.perf_counter()
        out[f"sigmoid_level{level}"] = {
            "fp32_patterns": 2**32,
            "mismatches": fp8_mod.sigmoid_paths_mismatches(level=level),
            "planted": fp8_mod.sigmoid_paths_mismatches(0x3F800000 - 2**16, 2**17, _perturb=True, level=level),
            "seconds": round(time.perf_counter() - t0, 2),
        }
    return out


def fp8ac() -> dict:
    """``AC_VARIANTS`` in the same passes (with the unfused pair and, at decode, ``silu_and_mul``)
    at the eight plain and UE8M0 M = 49152 cases, M = 1024, decode and the T = 256 masked cases;
    each variant's present rows compared bit for bit with the launched kernel's before timing."""
    launched = fp8_mod._kernel_flags(torch.device("cuda"), torch.bfloat16, False)
    assert {k: AC_LAUNCHED[k] for k in launched} == launched, launched  # "launched" is what launches
    names = [f"M49152_N{n}_{lay}{opt}" for n in (1536, 3072) for lay in ("nil", "il") for opt in ("", "_ue8m0")]
    names += ["M1024_N3072_nil", "M16_N1536_nil", "M16_N1536_il", "M16_N3072_nil", "M16_N3072_il"]
    names += ["masked_ragged_E8_T256_N3072", "masked_full_E8_T256_N3072"]
    return _variant_rows(names, AC_VARIANTS, "fp8 variants AC")


# Experiment AD (2026-12-01): after AC the masked call's full experts at T = 256, N = 3072 (3072
# tile slots, the work list since WORK_LIST_PAST = 1) take 7.63 us against 6.32-6.36 for the same
# rows as one 2-D call. The slot launch has changed since experiments R-U weighed the two (4-warp
# 2048-element programs, 12 an SM, not 8-warp 4096-element ones): one program a slot at every
# shape (``slots``) and the threshold at twice the resident programs (``past2``), against the launch.
AD_VARIANTS = {"launched": {}, "past2": {"WORK_LIST_PAST": 2}, "slots": {"WORK_LIST_PAST": 10**9}}


def masked_ad() -> list[dict]:
    return _masked_shapes(AD_VARIANTS, "AD")


# Experiment AE (2026-12-01): does experiment F's sigmoid lose where the clock drops and AC's not?
# A review found AC's evidence thin (3 passes, no clock). At M = 49152, N = 3072, both layouts, the
# ceiling's copy and both forms in the same interleaved passes, the SM clock sampled (every 20 ms)
# in each implementation's own window of each pass: per (pass, implementation) the replays and the
# clock readings, so a slow window can be set beside its clock.
AE_PASSES, AE_SWEEPS = 24, 3


def ac_clock() -> dict:
    from inkling_kernels.fp8 import empty_scales

    out = {"passes": AE_PASSES, "sweeps": AE_SWEEPS, "cases": []}
    M, N = 49152, 3072
    best = bench.stream_ceiling(M * N, out_dtype=torch.uint8)
    out["ceiling_alone"] = best
    copy, _ = bench._fp8_ceiling_copy(M * N, best)

    x = torch.randn((M, 2 * N), device="cuda").bfloat16()
    o = (torch.empty((M, N), dtype=torch.float8_e4m3fn, device="cuda"), empty_scales((M,), N // 128, False, "cuda"))
    for sweep in tqdm(range(AE_SWEEPS), desc="AE sweeps"):
        for layout in ("nil", "il"):
            calls = {"copy": copy}
            ref = None
            for v, flags in AC_VARIANTS.items():

                def call(flags=flags, il=layout == "il"):
                    with _Variant(flags, None):
                        return fp8_mod.silu_and_mul_fp8_group_quant(x, out=o, interleaved=il)

                q, sc = call()
                got = (q.clone(), sc.clone())
                ref = ref or got
                assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (layout, v)
                calls[v] = call
            timers = {k: bench.GraphTimer([fn]) for k, fn in calls.items()}
            windows = []
            try:
                with provenance.ClockSampler() as clocks:
                    clocks.mark()  # drop the capture's readings
                    for p in range(AE_PASSES):
                        names = list(timers)
                        for name in names[p % len(names) :] + names[: p % len(names)]:
                            us = timers[name].replay(bench.ROUNDS)
                            clocks.mark()
                            windows.append({"pass": p, "impl": name, "us": [round(u, 3) for u in us]})
                    for w, mhz in zip(windows, clocks.windows[1:], strict=False):
                        w["clock_mhz"] = mhz
                state = provenance.gpu_state()
            finally:
                for t in timers.values():
                    t.close()
            out["cases"].append(
                {"sweep": sweep, "case": f"M49152_N3072_{layout}", "reps": {k: t.reps for k, t in timers.items()},
                 "after": state, "windows": windows}
            )  # fmt: skip
    return out


# Experiment AF (2026-12-01): the work list's loop keeps 8 registers more than the 2-D program (48,
# 10 programs an SM, against 39-40, 12); offline, without its loop it holds 40. tl.store of the
# scales moves them through shared memory (two barriers an item in the loop, two shared-memory
# addresses kept across it); stored by inline PTX from the group maximum's layout
# (``SCALE_STORE_ASM``), the padding rows' remap compiled only where a launch has them, the
# program fits 40 registers with no spill (``WORK_LIST_MAXNREG``). The store changes the 2-D
# program too (39 -> 35 registers, 365 -> 347 instructions), so the 2-D calls run under every
# variant. "launched": the launch before AF (the scales by tl.store, ptxas's registers).
# AF and AF2 need e5362d2's package: the knobs WORK_LIST_MAXNREG and SCALE_STORE_ASM_DECODE were
# removed after AF2 (the cap not adopted, the store adopted at decode too), and setting a removed
# knob changes nothing.
AF_VARIANTS = {
    "launched": {"SCALE_STORE_ASM": False, "WORK_LIST_MAXNREG": None, "MASKED_LOADS": True},
    "asm_store": {"SCALE_STORE_ASM": True, "WORK_LIST_MAXNREG": None, "MASKED_LOADS": True},
    "asm_store_40": {"SCALE_STORE_ASM": True, "WORK_LIST_MAXNREG": 40, "MASKED_LOADS": True},
}
AF_2D = ["M49152_N3072_nil", "M49152_N3072_il", "M49152_N1536_nil_colmajor_ue8m0", "M8192_N3072_il"]
AF_2D += ["M1024_N3072_nil", "M16_N1536_nil", "M16_N3072_il"]
# AF2 (its first run, 9968a59, in data/experiments/experiment_af_h200.json): the PTX store gained
# 3-9% below M = 49152 but the 40-register cap gained nothing and cost 0.33 us an empty call, and the
# loop still executed about 30 instructions an item more than a 2-D program: ptxas filled a masked
# load's registers with zeros and moved each loaded word under the predicate. Unmasked loads (rows
# past the present ones read the last present row again) take those away. "launched": 9513352's
# launch (tl.store, masked loads); "af": the PTX store past decode and unmasked loads; "af_dasm":
# also the PTX store at decode; "af_40": also the cap.
AF2_VARIANTS = {
    "launched": {"SCALE_STORE_ASM": False, "MASKED_LOADS": True, "WORK_LIST_MAXNREG": None},
    "af": {"SCALE_STORE_ASM": True, "MASKED_LOADS": False, "WORK_LIST_MAXNREG": None},
    "af_dasm": {"SCALE_STORE_ASM": True, "SCALE_STORE_ASM_DECODE": True, "MASKED_LOADS": False},
    "af_40": {"SCALE_STORE_ASM": True, "MASKED_LOADS": False, "WORK_LIST_MAXNREG": 40},
}
AF2_2D = AF_2D + ["M16_N3072_nil", "M16_N1536_il"]


def masked_af(variants: dict = AF_VARIANTS, names: list[str] = AF_2D) -> dict:
    """``variants`` on the masked shapes (with the 2-D calls under every variant) and on 2-D cases
    (the store alone matters there), in the same passes; bits compared before timing."""
    masked = _masked_shapes(variants, "AF", flat_variants=True)
    rows = []
    cases = {c["name"]: c for c in fp8_bench.fp8_cases()}
    for name in tqdm(names, desc="AF 2-D"):
        case = cases[name]
        impls = fp8_bench.fp8_impls(case)
        fn, nbytes = impls["fused"]
        calls, ref = {}, None
        for vname, v in variants.items():
            call = _masked_variant(v, fn)
            got = tuple(t.clone() for t in fp8_bench.present_rows(case, *call()))
            ref = ref or got
            assert bits_equal(got[0], ref[0]) and bits_equal(got[1], ref[1]), (name, vname)
            calls[vname] = call
        if case["M"] <= 16:
            g = torch.randn((case["M"], 2 * case["N"]), device="cuda").bfloat16()
            o = torch.empty((case["M"], case["N"]), device="cuda", dtype=torch.bfloat16)
            calls["silu_and_mul"] = lambda g=g, o=o, il=case["interleaved"]: silu_and_mul(g, interleaved=il, out=o)
        rows.append({"case": name, "bytes": nbytes, **_timings(calls, nbytes)})
    return {"masked": masked, "2d": rows}


def _masked_host() -> list[dict]:
    """Host us per call (``hostbench._per_call_us``: back-to-back eager calls, outputs preallocated,
    PDL on) of the fused op: masked on the work list (T = 2048), masked on the tile slots (T = 256,
    N = 1536) and the same rows as one 2-D call, the last also through Triton's own launch path."""
    from inkling_kernels.fp8 import empty_scales
    from inkling_workbook.hostbench import _per_call_us

    op = fp8_mod.silu_and_mul_fp8_group_quant
    rows = []
    for T, N in ((256, 1536), (2048, 1536), (2048, 3072)):
        E, counts = 8, (4, 0, 1, 2, 3, 0, 1, 2)  # a few rows: the GPU work stays under the host's
        gateup = torch.randn((E, T, 2 * N), device="cuda").bfloat16()
        m = torch.tensor(counts, dtype=torch.int32, device="cuda")
        out = (
            torch.empty((E, T, N), dtype=torch.float8_e4m3fn, device="cuda"),
            empty_scales((E, T), N // 128, False, "cuda"),
        )
        flat = torch.randn((sum(counts), 2 * N), device="cuda").bfloat16()
        out2 = (
            torch.empty((sum(counts), N), dtype=torch.float8_e4m3fn, device="cuda"),
            empty_scales((sum(counts),), N // 128, False, "cuda"),
        )
        launched = []
        saved = fp8_mod._launch_kernel

        def spy(grid, device, interpreted, args, consts):
            launched.append(consts["WORK_LIST"])
            return saved(grid, device, interpreted, args, consts)

        fp8_mod._launch_kernel = spy
        try:
            op(gateup, masked_m=m, out=out, interleaved=False)
        finally:
            fp8_mod._launch_kernel = saved
        rows.append(
            {
                "T": T,
                "N": N,
                "work_list": bool(launched[0]),
                "masked_us": round(
                    _per_call_us(lambda: op(gateup, masked_m=m, out=out, interleaved=False), 2000, 7), 3
                ),
                "two_d_us": round(_per_call_us(lambda: op(flat, out=out2, interleaved=False), 2000, 7), 3),
                "two_d_triton_run_us": round(_through_triton_run(lambda: op(flat, out=out2, interleaved=False)), 3),
            }
        )
    return rows


def _through_triton_run(fn) -> float:
    """Host us per call of ``fn`` with a Triton launch hook installed: every launch then goes
    through ``kernel[grid]`` (``JITFunction.run``), not the package's cached thin path."""
    from inkling_workbook.hostbench import _per_call_us

    chain = fp8_mod._backend.knobs.runtime.launch_enter_hook

    def hook(*a):
        pass

    chain.add(hook)
    try:
        return _per_call_us(fn, 2000, 7)
    finally:
        chain.remove(hook)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    steps = argv[1].split(",") if len(argv) > 1 else ["e4m3", "fp8", "decode", "host"]
    bench.require_gpu()
    doc = {"provenance": provenance.collect(["tools/fp8_experiment.py", *argv])}
    doc["clock_warmup"] = bench.warm_clocks()
    for step in steps:
        t0 = time.perf_counter()
        if step == "host":
            doc[step] = {
                "pdl_off": measure_host_overhead(enable_pdl=False),
                "pdl_on": measure_host_overhead(enable_pdl=True),
            }
        else:
            doc[step] = {
                "e4m3": e4m3,
                "fp8": fp8,
                "decode": decode,
                "masked": masked,
                "division": division,
                "fp8d": fp8d,
                "proofs": proofs,
                "fp8f": fp8f,
                "decode_tiles": decode_tiles,
                "masked_large": masked_large,
                "tiles_h": tiles_h,
                "compile_modes": compile_modes,
                "ragged": ragged,
                "proofs_i": proofs_i,
                "decode_tiles_j": decode_tiles_j,
                "fp8k": fp8k,
                "fp8i": fp8i,
                "masked_small": masked_small,
                "masked_m": masked_m,
                "masked_n": masked_n,
                "decode_o": decode_o,
                "masked_r": masked_r,
                "masked_t": masked_t,
                "masked_u": masked_u,
                "masked_w": masked_w,
                "masked_x": masked_x,
                "masked_y": masked_y,
                "masked_z": masked_z,
                "masked_aa": masked_aa,
                "masked_ab": masked_ab,
                "power": power,
                "proofs_ac": proofs_ac,
                "fp8ac": fp8ac,
                "masked_ad": masked_ad,
                "ac_clock": ac_clock,
                "masked_af": masked_af,
                "masked_af2": lambda: masked_af(AF2_VARIANTS, AF2_2D),
                "masked_host": _masked_host,
            }[step]()
        print(f"{step}: {time.perf_counter() - t0:.1f} s", flush=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

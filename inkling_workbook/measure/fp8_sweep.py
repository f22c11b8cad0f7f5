"""The FP8 part of the sweep (``python -m inkling_workbook bench``, ``tools/fp8_publish.py``): the
cases of :mod:`inkling_workbook.measure.fp8_cases`, each timed with the method of
:mod:`inkling_workbook.measure.timing` in :data:`FP8_PASSES` interleaved passes, warm and cold L2,
the ceiling's copy in the same passes at M = 49152; the FP8-pattern ceilings and the record."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton

from inkling_workbook.measure import compile_baselines, fp8_anchors, fp8_cases, pairing, provenance, timing

# ---- FP8 per-token-group -----------------------------------------------------------------------

FP8_IMPLS = {
    "fused": "the fused Triton kernel (silu_and_mul_fp8_group_quant), outputs preallocated, PDL on (the sm_90 default)",
    "fused_no_pdl": "the same fused kernel launched with enable_pdl=False, outputs preallocated",
    "unfused": "silu_and_mul then fp8_group_quant (Triton), outputs preallocated, PDL on (the sm_90 default)",
    "torch_compile_static": "torch.compile(dynamic=False) of the torch reference of the fused op (all rows), mode "
    "default, compiled fresh per case (compile_baselines.FRESH); "
    f"at decode (M = 16) the fastest of {fp8_cases.COMPILE_DRAWS} fresh compilations (inductor's autotuner draws its "
    "reduction config once, at the first call: experiment S), every draw's median in compile_draws_us",
    "torch_compile_static_max_autotune": "the same in mode max-autotune-no-cudagraphs (inductor's CUDA graphs off: "
    "the sweep captures its own), compiled fresh per case; on fp8_cases.MAX_AUTOTUNE_CASES only",
    "fused_2d_present": "masked cases: the fused kernel on the rows present as one contiguous 2-D input "
    "(fresh random data), outputs preallocated, PDL on",
    "silu_and_mul_alone": "decode cases: silu_and_mul alone (the Triton port, bf16 out preallocated, PDL on), "
    "timed in the same passes as the fused op (bytes: its own, 6N a row)",
}
FP8_PASSES = 5  # interleaved passes of every FP8 case: the M = 49152 medians moved with the clock
#: cold L2 where the working set of a call can sit in the 60 MiB L2: M = 1024 (8-16 MB a call),
#: M = 8192 (63-126 MB, part of it) and the masked cases (a call reads only the rows present: 7-14 MB
#: at 921 rows, 60-114 MB at 7368). Not at M = 16:
#: a decode step reads an activation its GEMM has just written, so it is L2-warm in a server.
FP8_COLD_MS = (1024, 8192)
#: the name the ceiling's copy is timed under, in the passes of an M = 49152 case (not a CSV row)
CEILING_COPY = "ceiling_copy_same_passes"

#: where the FP8 sweep's method differs from the silu sweep's (recorded with its rows)
FP8_TIMING = {
    "passes": FP8_PASSES,
    "ceiling_same_passes": "at M = 49152 (warm) the FP8-pattern ceiling's copy, in the configuration the "
    "run's ceiling search found best, is timed in the same interleaved passes as the case's "
    "implementations: ceiling_same_passes_tbps, its pass medians in ceiling_same_passes_pass_us "
    "(from the sweep after 7192cb8); the 97% target then counts each case at the lower of its shares "
    "of the run-start ceiling and of this copy. In those cases the SM clock is also sampled every ~20 ms "
    "within each pass (nvidia-smi --loop-ms): pass_clock_sampled_min_mhz, pass_clock_samples; the first "
    "window also holds the readings taken while the case's graphs were captured",
    "output_policy": "fused and unfused write into preallocated outputs; torch.compile allocates its own",
    "pdl": "fused (and unfused) launch with PDL, the package default on sm_90: a graph of back-to-back "
    "calls lets each call's prologue overlap the previous call's tail. fused_no_pdl is the same kernel "
    "without it; torch.compile and the ceiling kernel launch without PDL",
    "l2": "warm for every case; cold as well at M in (1024, 8192) and for the masked cases, rotating over "
    f">= {timing.COLD_FACTOR} x L2 of buffer sets; not at M = 16, where a server's input is L2-warm",
    "clocks": "SM clock, power and throttle reasons read after every pass: sm_clock_mhz is their median, "
    "sm_clock_min/max the extremes, throttle_reasons every reason seen; pass_medians_us and pass_clocks_mhz "
    "pass by pass (from the sweep after 72ae121)",
    "compile_fresh": "every case: dynamo reset and new compile objects (fp8_cases.new_compile_state), each "
    "compile column's first call inside fp8_cases.fresh_compile (empty inductor and Triton caches); its seconds "
    "in compile_s",
    "compile_at_decode": f"torch.compile static at M = 16: {fp8_cases.COMPILE_DRAWS} fresh compilations "
    "(empty inductor "
    "caches, each autotuned at its first call), timed in the same passes; the fastest is the baseline "
    "(from the sweep after cf4b87e)",
    "anchors": "sglang 0.5.23 and vllm 0.34.0 Triton kernels (fp8_anchors) where their layout is the case's, "
    "timed in the same passes; each checked before timing against the bounds its formula allows "
    "(fp8_anchors.BOUND_FORMULA), not for bits; speedups only between a port and a baseline of the same op "
    "and PDL state (pairing.RULE)",
    "masked_sweep": "past T = 256 (the same ragged counts at T = 512, 1024, 2048; the counts x 8 at T = 2048) "
    "only fused, fused_no_pdl and fused_2d_present are timed (from the sweep after cf4b87e)",
}


def _best_compile_draw(case: dict) -> tuple[int, list[float]]:
    """The fastest of :func:`fp8_cases.compile_draws` fresh compilations of torch.compile static on
    ``case`` (each compiled and autotuned in empty caches, then all timed in the same interleaved
    passes): ``(its index, every draw's median us)``; ``(0, [])`` where one draw is made."""
    n = fp8_cases.compile_draws(case)
    if n == 1:
        return 0, []
    calls = {}
    for draw in range(n):
        fn = fp8_cases.fp8_impls(case, draw=draw)["torch_compile_static"][0]
        with fp8_cases.fresh_compile():
            fn()  # compiled and autotuned here, afresh
        calls[draw] = fn
    t = timing.time_calls(calls, timing.DECODE_PASSES)
    medians = [t[draw].median_us for draw in range(n)]
    return medians.index(min(medians)), medians


def _within_budget(case: dict) -> dict:
    """``case``, marked ``max_autotune_skipped`` when its max-autotune column would start past the
    GPU job's budget (``compile_baselines.max_autotune_allowed``, which records it)."""
    if fp8_cases.has_max_autotune(case) and not compile_baselines.max_autotune_allowed(case["name"]):
        return {**case, "max_autotune_skipped": True}
    return case


def _fp8_cold(case: dict) -> bool:
    return case["M"] in FP8_COLD_MS or case["masked_m"] is not None


def _fp8_ceiling_copy(numel_out: int, cfg: dict) -> tuple[Callable[[], object], int]:
    """The FP8-pattern ceiling's copy in the configuration :func:`stream_ceiling` found best
    (``cfg``: block, warps, evict_first), on buffers of its own: (the call, bytes moved)."""
    a, b = (torch.randn(numel_out, device="cuda").bfloat16() for _ in range(2))
    out = torch.empty(numel_out, device="cuda", dtype=torch.uint8)
    grid = (triton.cdiv(numel_out, cfg["block"]),)

    def call():
        timing._stream_kernel[grid](
            a, b, out, numel_out, BLOCK=cfg["block"], EVICT=cfg["evict_first"], num_warps=cfg["warps"]
        )

    return call, numel_out * 5


def _speedup_fields(case: dict, name: str, timings: dict) -> dict:
    """The row's speedup of its paired port (:func:`pairing.speedup_fields`), left blank for a
    torch.compile column on a masked case: compile runs all E x T rows, the port only the rows
    present, so their ratio is not like for like (the rows keep both times)."""
    if case["masked_m"] is not None and name in pairing.FP8_COMPILE_COLUMNS:
        return {"speedup_of_paired_port": "", "ties_paired_port": ""}
    return pairing.speedup_fields(fp8_anchors.FP8_COLUMNS, name, timings)


def bench_fp8(
    ceilings: dict,
    quick: bool = False,
    progress: bool = True,
    cold: bool = True,
    ceiling_configs: dict | None = None,
    skipped_out: list | None = None,
) -> list[dict]:
    """The cases of :mod:`inkling_workbook.measure.fp8_cases`, the implementations of a case timed in
    :data:`FP8_PASSES` interleaved passes, warm L2 and (``cold``) cold L2 where :func:`_fp8_cold`;
    ``ceilings`` maps N to the FP8-pattern streaming ceiling (TB/s) measured in this run at
    M = 49152. Before a case is timed, its fused and unfused outputs are compared bit for bit.
    ``ceiling_configs`` (N to the ceiling's best configuration): at M = 49152 the ceiling's copy is
    timed in the same passes as the case's implementations too, so that both see the same clocks
    and power state (``ceiling_same_passes_tbps``). The anchors (:mod:`fp8_anchors`) are checked
    against their bounds before timing; each anchor a case does not support goes into
    ``skipped_out`` with its reason."""
    from tqdm.auto import tqdm

    cases = fp8_cases.fp8_cases()
    if quick:
        cases = [c for c in cases if c["M"] in (16, 49152) and not (c["column_major_scales"] or c["scale_ue8m0"])]
    rows = []
    skipped_anchors: list[dict] = []
    it = tqdm(cases, desc="fp8 cases", disable=not progress)
    for case in it:
        it.set_postfix_str(case["name"])
        fp8_cases.new_compile_state()  # this case's compile columns: new objects, from a fresh state
        case = _within_budget(case)
        draw, draws_us = _best_compile_draw(case)
        compile_s: dict[str, float] = {}
        for mode in ["warm"] + (["cold"] if cold and _fp8_cold(case) else []):
            first = fp8_cases.fp8_impls(case, draw=draw)
            if mode == "warm":  # compiled afresh on the first set, before any check or timing
                for name in ("torch_compile_static", "torch_compile_static_max_autotune"):
                    if (
                        name in first
                        and fp8_cases.is_timed(case, name)
                        and not (name == "torch_compile_static" and draws_us)
                    ):
                        t0 = time.perf_counter()
                        with fp8_cases.fresh_compile():
                            first[name][0]()
                            if torch.cuda.is_available():
                                torch.cuda.synchronize()
                        compile_s[name] = round(time.perf_counter() - t0, 2)
            fp8_cases.check_fused_equals_unfused(case, first)  # outputs checked before they are timed
            compile_bits = fp8_cases.compile_bits_equal_fused(case, first)  # recorded, not required
            checks = fp8_anchors.check_anchors(
                case, first, fp8_cases.present_rows
            )  # the anchors: within their bounds, not bits
            if mode == "warm":
                skipped_anchors += [{"case": case["name"], "impl": k, "column": fp8_anchors.FP8_COLUMNS[k].label,
                                     "reason": r} for k, r in fp8_anchors.skipped(case).items()]  # fmt: skip
            nsets = timing.n_buffer_sets(fp8_cases.fp8_bytes(case), mode == "cold")
            sets = [first] + [fp8_cases.fp8_impls(case, seed=i, draw=draw) for i in range(1, nsets)]
            states: list[dict] = []
            timed = [name for name in first if fp8_cases.is_timed(case, name)]
            calls = {name: [s[name][0] for s in sets] for name in timed}
            cfg = (ceiling_configs or {}).get(case["N"])
            copy_bytes = None
            if cfg and case["M"] == 49152 and case["masked_m"] is None and mode == "warm":
                copy, copy_bytes = _fp8_ceiling_copy(case["M"] * case["N"], cfg)
                calls[CEILING_COPY] = [copy]
            sampler = provenance.ClockSampler() if copy_bytes else None  # M = 49152: the clock within each pass

            def after_pass(sampler=sampler):
                if sampler is not None:
                    sampler.mark()
                states.append(provenance.gpu_state())

            with sampler or contextlib.nullcontext():
                timings = timing.time_calls(calls, FP8_PASSES, after_pass=after_pass)
            del sets, calls
            copy = None  # its buffers (up to 755 MB) freed before the next case
            same = {}
            if sampler is not None:
                same["pass_clock_sampled_min_mhz"] = " ".join(f"{min(w):.0f}" if w else "-" for w in sampler.windows)
                same["pass_clock_samples"] = " ".join(str(len(w)) for w in sampler.windows)
            if copy_bytes:
                tc = timings[CEILING_COPY]
                same |= {
                    "ceiling_same_passes_tbps": round(copy_bytes / tc.median_us / 1e6, 4),
                    "ceiling_same_passes_pass_us": " ".join(
                        f"{statistics.median(tc.samples[i : i + tc.rounds]):.4f}"
                        for i in range(0, len(tc.samples), tc.rounds)
                    ),
                }
            clocks = [float(st["sm_clock_mhz"]) for st in states if st.get("sm_clock_mhz")]
            reasons = sorted({st.get("throttle_reasons") for st in states if st.get("throttle_reasons")})
            for name in timed:
                nbytes, t = first[name][1], timings[name]
                per_pass = [t.samples[i : i + t.rounds] for i in range(0, len(t.samples), t.rounds)]
                ceiling = ceilings.get(case["N"])
                rows.append(
                    {
                        "op": "silu_and_mul_fp8",
                        "case": case["name"],
                        "M": case["M"],
                        "N": case["N"],
                        "layout": "il" if case["interleaved"] else "nil",
                        "column_major_scales": case["column_major_scales"],
                        "scale_ue8m0": case["scale_ue8m0"],
                        "masked": case["masked_m"] is not None,
                        "E": case["E"],
                        "T": case["T"],
                        "impl": name,
                        "config": FP8_IMPLS.get(name) or fp8_anchors.FP8_ANCHOR_IMPLS[name],
                        **fp8_anchors.row_fields(name, checks),
                        **_speedup_fields(case, name, timings),
                        "compile_bits_equal_fused": compile_bits.get(name, ""),
                        "l2": mode,
                        "buffer_sets": nsets,
                        **t.columns(nbytes, 4),
                        "ceiling_tbps": round(ceiling, 4) if ceiling else None,
                        "ceiling_same_passes_tbps": same.get("ceiling_same_passes_tbps"),
                        "ceiling_same_passes_pass_us": same.get("ceiling_same_passes_pass_us", ""),
                        # M = 49152 with the copy: the lowest SM clock sampled every ~20 ms within each pass
                        "pass_clock_sampled_min_mhz": same.get("pass_clock_sampled_min_mhz", ""),
                        "pass_clock_samples": same.get("pass_clock_samples", ""),
                        "sm_clock_mhz": statistics.median(clocks) if clocks else None,
                        "sm_clock_min": min(clocks) if clocks else None,
                        "sm_clock_max": max(clocks) if clocks else None,
                        "throttle_reasons": " ".join(reasons),
                        # pass by pass, in the order timed: a median that moves with the clock shows here
                        "pass_medians_us": " ".join(f"{statistics.median(p):.4f}" for p in per_pass),
                        "pass_clocks_mhz": " ".join(f"{c:.0f}" for c in clocks),
                        # torch.compile static at decode: every fresh compilation's median, the fastest timed
                        "compile_draws_us": " ".join(f"{d:.4f}" for d in draws_us)
                        if name == "torch_compile_static"
                        else "",
                        "compile_s": compile_s.get(name, ""),
                    }
                )
            del first
    if skipped_out is not None:
        skipped_out += skipped_anchors
    return rows


def run_fp8(meta: dict, csv_path: str | Path) -> list[dict]:
    """The FP8 part of a sweep: the FP8-pattern ceilings at M = 49152 (into ``meta``), then the
    cases, written to ``csv_path``, and beside it the record the FP8 plots read
    (``provenance.companion(csv_path, "meta")``: ``meta`` with the FP8 method). Returns the rows."""
    for n in (1536, 3072):
        meta[f"ceiling_fp8_49152x{n}"] = timing.stream_ceiling(49152 * n, out_dtype=torch.uint8)
    meta["fp8_impls"] = FP8_IMPLS
    fp8_compile = {"fp8": list(fp8_cases.MAX_AUTOTUNE_CASES)}
    meta["fp8_timing"] = FP8_TIMING
    meta["fp8_anchor_impls"] = fp8_anchors.FP8_ANCHOR_IMPLS
    meta["fp8_columns"] = pairing.describe(fp8_anchors.FP8_COLUMNS)
    meta["fp8_anchor_bounds"] = fp8_anchors.BOUND_FORMULA
    meta["anchors"] = {d: pairing.anchor_provenance(d) for d in ("sglang", "vllm")}
    skipped: list[dict] = []
    rows = bench_fp8(
        {n: meta[f"ceiling_fp8_49152x{n}"]["tbps"] for n in (1536, 3072)},
        ceiling_configs={n: meta[f"ceiling_fp8_49152x{n}"] for n in (1536, 3072)},
        skipped_out=skipped,
    )
    meta["fp8_anchor_skipped"] = skipped
    meta["fp8_compile"] = compile_baselines.record_meta(fp8_compile)  # after the cases: the budget's skips
    meta["fp8_anchor_within_bounds_all"] = all(r["anchor_within_bounds"] for r in rows if r["anchor_check"])
    timing.write_csv(rows, csv_path)
    own = {
        **meta,
        "timing": {**meta.get("timing", timing.timing_meta()), **FP8_TIMING},
        "gpu_state_after": provenance.gpu_state(),
    }
    provenance.write_record(provenance.companion(csv_path, "meta"), json.dumps(own, indent=1) + "\n")
    return rows

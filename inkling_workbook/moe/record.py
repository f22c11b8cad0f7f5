"""The MoE layer's benchmark (``python -m inkling_workbook moe-layer``, issue 30): accuracy and
fused == unfused on the timed inputs, then each variant's layer, its activation alone and the
layer under ``torch.compile`` timed in CUDA graphs; writes ``data/moe_layer_<gpu>.json`` and
``.csv``, which :mod:`inkling_workbook.moe.tables` reads. The layer itself is
:mod:`inkling_workbook.moe.layer`."""

from __future__ import annotations

import time

import torch

from inkling_workbook.moe.layer import (
    CPU_SHAPE,
    GPU_MS,
    GPU_SHAPE,
    LAYOUTS,
    TAIL_BOUND,
    VARIANTS,
    activation,
    dispatch_contiguous,
    dispatch_masked,
    error_bound,
    experts,
    fused_equals_unfused,
    gemm1,
    gemm2,
    group,
    grouped_mm_ok,
    make_layer,
    make_plan,
    make_tokens,
    reference_layer,
    rel_error,
    route,
    scaled_mm_available,
    tail_reference,
)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


def run(
    out_dir,
    Ms=GPU_MS,
    shape: dict | None = None,
    device=None,
    compile_variants=("bf16", "fp8_fused"),
    compile_layouts=("contiguous",),
    compile_Ms=(16, 4096),
    compile_budget_s: float = 100.0,
    progress: bool = True,
    command=None,
    timer=None,
    compile_backend: str = "inductor",
) -> dict:
    """The benchmark (CUDA) or its CPU dry run: for each M and layout, accuracy against float64,
    fused == unfused on the timed inputs' activations (raw bits), then (CUDA only) the whole layer
    of each variant and the activation alone timed in CUDA graphs, interleaved; the layer under
    ``torch.compile(fullgraph=True, dynamic=True)`` captured in a graph for ``compile_variants`` in
    ``compile_layouts`` at ``compile_Ms`` (a decode and a prefill size: each compile takes tens of
    seconds) while the compile budget lasts (where fullgraph fails, the error is kept
    and ``fullgraph=False`` is compiled and timed instead). A failing variant records its error string. Writes
    ``out_dir/data/moe_layer_<device>.json`` and ``.csv``. ``timer`` (default
    :mod:`inkling_workbook.measure.timing`: ``GraphTimer``, ``time_interleaved``, ``warm_clocks``) and
    ``compile_backend`` let a CPU test run the timing code with a stand-in timer."""
    import json
    from pathlib import Path

    from tqdm import tqdm

    from inkling_workbook.measure import bench, provenance, timing

    t0 = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    timed = cuda or timer is not None
    timer = timer or bench
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    shape = dict(shape or (GPU_SHAPE if cuda else CPU_SHAPE))
    layer = make_layer(**shape, device=device)
    doc = {
        "provenance": provenance.collect(command),
        "shape": shape,
        "Ms": list(Ms),
        "layouts": list(LAYOUTS),
        "variants": list(VARIANTS),
        "grouped_mm": dict(zip(("ok", "why"), grouped_mm_ok(device), strict=True)),
        "gemm2_fp8": "torch._scaled_mm blockwise (1x128 / 128x128), one call per expert"
        if scaled_mm_available(device)
        else "CPU stand-in: dequantize both operands to fp32 and multiply (scaled_mm_standin)",
        "topk_weights": "applied in the combine (fp32 weighted sum of the k expert outputs), not in the activation",
        "timing": {
            "method": "inkling_workbook.measure.timing: GraphTimer (>= 100 calls, >= 1 ms a replay), time_interleaved",
            "rounds": timing.ROUNDS,
            "decode_passes": timing.DECODE_PASSES,
            "other_passes": timing.OTHER_PASSES,
            "spread": "lowest and highest pass median",
            "timed": "the whole layer: router GEMM, softmax/top-k, grouping, GEMM1, activation, GEMM2, combine; "
            "per-expert counts read once before capture (fixed routing of the timed inputs)",
            "activation": "the activation alone on the same layout's GEMM1 output, in its own graph",
            "l2": "warm (the same buffers every call)",
        }
        if timed
        else "not timed: a CPU dry run (Triton interpreter)",
        "accuracy": [],
        "bitwise": [],
        "rows": [],
        "compile": [],
        "errors": [],
        "plans": [],  # per M: the tokens each expert got, the contiguous rows (padded), the masked T
        "compile_scope": {
            "variants": list(compile_variants),
            "layouts": list(compile_layouts),
            "Ms": list(compile_Ms),
            "budget_s": compile_budget_s,
        },
    }
    if timed:
        from torch import _dynamo  # noqa: F401 - loaded before the compile steps reset it

        doc["clock_warmup"] = timer.warm_clocks()
    steps = [(M, layout) for M in Ms for layout in LAYOUTS]
    compile_s = 0.0
    for M, layout in tqdm(steps, desc="moe layer", disable=not progress):
        x = make_tokens(M, layer.H, device, seed=M)
        ids, weights = route(x, layer)
        plan = make_plan(ids, layer.E)
        base = {"M": M, "layout": layout, "rows": plan.rows if layout == "contiguous" else layer.E * plan.T}
        if layout == LAYOUTS[0]:
            doc["plans"].append({"M": M, "counts": plan.counts, "contiguous_rows": plan.rows, "masked_T": plan.T})
        try:
            ref = reference_layer(x, layer, ids)
        except Exception as e:  # noqa: BLE001
            ref = None
            doc["errors"].append({**base, "what": "reference", "error": _err(e)})
        outs = {}
        for v in VARIANTS:
            try:
                out = torch.full(x.shape, float("nan"), dtype=torch.bfloat16, device=device)
                outs[v] = experts(x, ids, weights, layer, plan, layout, v, out=out)
                tail = tail_reference(x, ids, weights, layer, plan, layout, v)
                doc["accuracy"].append(
                    {
                        **base,
                        "variant": v,
                        "rel_err": rel_error(outs[v], ref) if ref is not None else None,
                        "bound": error_bound(v),
                        "tail_rel_err": rel_error(outs[v], tail),
                        "tail_bound": TAIL_BOUND,
                    }
                )
            except Exception as e:  # noqa: BLE001
                doc["accuracy"].append({**base, "variant": v, "rel_err": None, "error": _err(e)})
        # the activation's input, as the layer computes it
        g = group(ids, layer.E, plan.align)
        xs = (dispatch_masked if layout == "masked" else dispatch_contiguous)(x, g, plan, layer.k)
        gateup = gemm1(xs, layer, g, plan, layout)
        mm = g.masked_m if layout == "masked" else None
        try:
            bw = fused_equals_unfused(gateup, mm)
            if "fp8_fused" in outs and "fp8_unfused" in outs:
                same = torch.equal(outs["fp8_fused"].view(torch.int16), outs["fp8_unfused"].view(torch.int16))
                bw["layer_output_equal"] = bool(same)
            doc["bitwise"].append({**base, **bw})
        except Exception as e:  # noqa: BLE001
            doc["bitwise"].append({**base, "equal": None, "error": _err(e)})
        if not timed:
            continue
        passes = timing.DECODE_PASSES if M <= timing.DECODE_MAX_M else timing.OTHER_PASSES

        def layer_call(v, x=x, layout=layout, plan=plan):
            ids_, w_ = route(x, layer)
            return experts(x, ids_, w_, layer, plan, layout, v)

        calls = {f"layer/{v}": (lambda v=v: layer_call(v)) for v in VARIANTS if v in outs}
        calls.update({f"activation/{v}": (lambda v=v: activation(gateup, v, mm)) for v in VARIANTS})
        # the stages around the activation, each alone (its inputs made once, outside the graph)
        acts = {v: activation(gateup, v, mm) for v in VARIANTS if v in outs}
        calls["gemm1/bf16"] = lambda xs=xs, g=g, plan=plan, layout=layout: gemm1(xs, layer, g, plan, layout)
        calls.update(
            {
                f"gemm2/{v}": (lambda v=v, g=g, plan=plan, layout=layout: gemm2(acts[v], layer, g, plan, layout, v))
                for v in acts
            }
        )
        if layout in compile_layouts and M in compile_Ms:
            torch._dynamo.reset()  # each step's layers compile afresh: no recompile limit reached across M
            for v in compile_variants:
                if v not in outs:
                    continue
                if compile_s >= compile_budget_s:
                    why = f"skipped: the compile budget ({compile_budget_s} s) is spent"
                    doc["compile"].append({**base, "variant": v, "ok": None, "error": why})
                    continue
                tc = time.perf_counter()
                rec = {**base, "variant": v}
                for fullgraph in (True, False):  # fullgraph first; where it breaks, what works instead
                    mode = f"torch.compile(fullgraph={fullgraph}, dynamic=True)"
                    try:
                        fn = torch.compile(
                            lambda x, v=v, layout=layout, plan=plan: layer_call(v, x, layout, plan),
                            fullgraph=fullgraph,
                            dynamic=True,
                            backend=compile_backend,
                        )
                        got = fn(x)
                        sync()
                        same = bool(torch.equal(got.view(torch.int16), outs[v].view(torch.int16)))
                        err = rel_error(got, ref) if ref is not None else None
                        rec.update(ok=True, mode=mode, rel_err=err, equal_to_eager=same)
                        calls[f"compiled/{v}"] = lambda fn=fn, x=x: fn(x)
                        break
                    except Exception as e:  # noqa: BLE001
                        rec.update(ok=False, mode=mode)
                        rec["error" if fullgraph else "fallback_error"] = _err(e)
                rec["compile_s"] = round(time.perf_counter() - tc, 2)
                compile_s += rec["compile_s"]
                doc["compile"].append(rec)
        timers = {}
        for name, fn in calls.items():
            try:
                timers[name] = timer.GraphTimer([fn])
            except Exception as e:  # noqa: BLE001
                doc["errors"].append({**base, "what": name, "error": _err(e)})
                sync()
        try:
            timings = timer.time_interleaved(timers, passes)
        except Exception as e:  # noqa: BLE001
            timings = {}
            doc["errors"].append({**base, "what": "time_interleaved", "error": _err(e)})
        finally:
            for t in timers.values():
                t.close()
        clock = provenance.gpu_state().get("sm_clock_mhz")
        for name, t in timings.items():
            kind, v = name.split("/")
            doc["rows"].append({**base, "kind": kind, "variant": v, **t.columns(0, 3), "sm_clock_mhz": clock})
        del timers
        if cuda:
            torch.cuda.empty_cache()
    for r in doc["rows"]:
        r.pop("bytes", None)
        r.pop("tbps", None)
    doc["grouped_mm_after"] = dict(zip(("ok", "why"), grouped_mm_ok(device), strict=True))  # a refusal mid-run
    doc["compile_s_total"] = round(compile_s, 1)
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    if cuda:
        doc["gpu_state_after"] = provenance.gpu_state()
    doc["all_bitwise_equal"] = all(b.get("equal") is True for b in doc["bitwise"])
    doc["all_within_bound"] = all(
        a.get("rel_err") is not None and a["rel_err"] <= a["bound"] and a["tail_rel_err"] <= a["tail_bound"]
        for a in doc["accuracy"]
    )
    slug = provenance.device_slug(device)
    data = Path(out_dir) / "data"
    path = data / f"moe_layer_{slug}.json"
    provenance.write_record(path, json.dumps(doc, indent=1) + "\n")
    if doc["rows"]:
        timing.write_csv(doc["rows"], path.with_suffix(".csv"))
    return doc

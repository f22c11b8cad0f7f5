"""The MoE layer's record read back (notebook 08): the tables of ``data/moe_layer_<gpu>.json``
(timings, where the time goes, fused vs unfused, FP8 vs bf16, torch.compile, accuracy) and the
conclusions drawn from them. :mod:`inkling_workbook.moe.record` writes the record."""

from __future__ import annotations

from inkling_workbook.moe.layer import TAIL_BOUND

# ---- reading the record (notebook 08) ---------------------------------------------------------


def load_record(path) -> dict | None:
    """The benchmark's JSON record, or None where it is absent."""
    import json
    from pathlib import Path

    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def _fmt(r: dict) -> str:
    return f"{r['median_us']:.1f} [{r['lo_us']:.1f}, {r['hi_us']:.1f}]"


def timing_table(doc: dict):
    """One row per (layout, M): each variant's layer time (median [lo, hi] us), the compiled
    layers, the activation alone and its share of the layer, and the verdicts: fused vs
    unfused (a tie where the ranges overlap), FP8 fused vs bf16."""
    import pandas as pd

    from inkling_workbook.measure.timing import ties

    t = {(r["layout"], r["M"], r["kind"], r["variant"]): r for r in doc["rows"]}
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            row = {"layout": layout, "M": M}
            for v in doc["variants"]:
                lay, act = t.get((layout, M, "layer", v)), t.get((layout, M, "activation", v))
                row[f"{v} us"] = _fmt(lay) if lay else "-"
                row[f"{v} act share"] = f"{act['median_us'] / lay['median_us']:.1%}" if lay and act else "-"
            for v in ("bf16", "fp8_fused"):
                c = t.get((layout, M, "compiled", v))
                if c:
                    row[f"compiled {v} us"] = _fmt(c)
            f, u, b = (t.get((layout, M, "layer", v)) for v in ("fp8_fused", "fp8_unfused", "bf16"))
            if f and u:
                tie = ties(f["lo_us"], f["hi_us"], u["lo_us"], u["hi_us"])
                row["fused / unfused"] = f"{f['median_us'] / u['median_us']:.3f}" + (" (tie)" if tie else "")
            if f and b:
                tie = ties(f["lo_us"], f["hi_us"], b["lo_us"], b["hi_us"])
                row["fp8 fused / bf16"] = f"{f['median_us'] / b['median_us']:.3f}" + (" (tie)" if tie else "")
            out.append(row)
    return pd.DataFrame(out).fillna("-")  # a column only some rows have (the compiled layers): "-" elsewhere


def stage_table(doc: dict):
    """Where the layer's time goes, per (layout, M, variant): GEMM1, the activation and GEMM2 each
    timed alone in its own graph, the whole layer, and the rest (routing, grouping, dispatch,
    combine: the layer less the three stages). Medians, us; a stage alone is not its cost inside
    the layer to the last microsecond (caches and overlap differ), so the rest is approximate."""
    import pandas as pd

    t = {(r["layout"], r["M"], r["kind"], r["variant"]): r["median_us"] for r in doc["rows"]}
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            for v in doc["variants"]:
                g1, a, g2, lay = (t.get((layout, M, k, vv)) for k, vv in
                                  (("gemm1", "bf16"), ("activation", v), ("gemm2", v), ("layer", v)))  # fmt: skip
                if None in (g1, a, g2, lay):
                    continue
                out.append({"layout": layout, "M": M, "variant": v, "gemm1 us": round(g1, 1),
                            "activation us": round(a, 2), "gemm2 us": round(g2, 1), "layer us": round(lay, 1),
                            "rest us": round(lay - g1 - a - g2, 1)})  # fmt: skip
    return pd.DataFrame(out)


def _by_key(doc: dict) -> dict:
    return {(r["layout"], r["M"], r["kind"], r["variant"]): r for r in doc["rows"]}


def _delta(t: dict, layout: str, M: int, kind: str, a: str, b: str) -> float | None:
    """Median of ``(kind, a)`` less median of ``(kind, b)``, us (None where either is missing)."""
    ra, rb = t.get((layout, M, kind, a)), t.get((layout, M, kind, b))
    return None if ra is None or rb is None else ra["median_us"] - rb["median_us"]


def _verdict(f: dict, u: dict, faster: str, slower: str) -> str:
    from inkling_workbook.measure.timing import verdict

    return {"tie": "tie (ranges overlap)", "win": faster, "loss": slower}[verdict(f, u)]


def activation_rows(doc: dict, layout: str, M: int) -> dict[str, int]:
    """The rows each variant's activation computes at ``M``: contiguous, every row of the padded
    segments (both FP8 variants alike); masked, the unfused pair (and the bf16 ``silu_and_mul``)
    all ``E * T`` rows, the fused op only the ``M * k`` rows present (it skips ``t >= masked_m``)."""
    plan = next(p for p in doc["plans"] if p["M"] == M)
    if layout == "contiguous":
        return {v: plan["contiguous_rows"] for v in doc["variants"]}
    all_rows = doc["shape"]["E"] * plan["masked_T"]
    return {v: (M * doc["shape"]["k"] if v == "fp8_fused" else all_rows) for v in doc["variants"]}


def fusion_table(doc: dict):
    """Fused against unfused FP8, per (layout, M): the rows each activation computes (masked: the
    fused op skips the padding rows, so its saving there includes skipped work), the whole
    layer's time saved (unfused less fused, medians, us and % of the unfused layer) with the
    verdict of one capture's ranges, and beside it the same difference for the activation timed
    alone and for GEMM2 timed alone on each variant's output. In the contiguous layout the two
    GEMM2s read the same bits: their difference is how far a stage timed alone moves between
    graphs."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            f, u = t.get((layout, M, "layer", "fp8_fused")), t.get((layout, M, "layer", "fp8_unfused"))
            if not (f and u):
                continue
            rows = activation_rows(doc, layout, M)
            d_act = _delta(t, layout, M, "activation", "fp8_unfused", "fp8_fused")
            d_g2 = _delta(t, layout, M, "gemm2", "fp8_unfused", "fp8_fused")
            out.append(
                {
                    "layout": layout,
                    "M": M,
                    "rows fused": rows["fp8_fused"],
                    "rows unfused": rows["fp8_unfused"],
                    "layer saved us": round(u["median_us"] - f["median_us"], 1),
                    "layer saved": f"{1 - f['median_us'] / u['median_us']:+.1%}",
                    "one capture": _verdict(f, u, "fused faster", "unfused faster"),
                    "activation alone saved us": "-" if d_act is None else round(d_act, 1),
                    "GEMM2 alone, unfused - fused us": "-" if d_g2 is None else round(d_g2, 1),
                }
            )
    return pd.DataFrame(out)


def capture_table(cap: dict):
    """The capture-variance experiment (``tools/experiments/moe_capture_variance.py``): each FP8
    layer captured several times and every graph timed in the same interleaved passes. Per
    (M, layout): each variant's capture medians (us), the widest distance between two captures
    of one variant, and fused against unfused across captures: a tie where the two sets of
    capture medians overlap ([lowest, highest] of each), else who is faster and by how much (the
    nearest and the farthest pair of captures)."""
    import pandas as pd

    from inkling_workbook.measure.timing import ties

    df = pd.DataFrame(cap["rows"])
    variants = list(dict.fromkeys(df.variant))
    out = []
    for (M, layout), g in df.groupby(["M", "layout"], sort=False):
        row = {"M": M, "layout": layout}
        med = {v: sorted(g[g.variant == v].sort_values("capture").median_us) for v in variants}
        for v in variants:
            row[f"{v} us"] = ", ".join(f"{m:.1f}" for m in med[v])
        row["widest capture spread us"] = round(max(max(m) - min(m) for m in med.values() if m), 1)
        f, u = med["fp8_fused"], med["fp8_unfused"]
        if ties(min(f), max(f), min(u), max(u)):
            row["fused vs unfused across captures"] = "tie (capture medians overlap)"
        else:
            first, second = ("fused", "unfused") if max(f) < min(u) else ("unfused", "fused")
            a, b = (f, u) if first == "fused" else (u, f)
            row["fused vs unfused across captures"] = (
                f"{first} faster by {min(b) - max(a):.1f}-{max(b) - min(a):.1f} us"
            )
        out.append(row)
    return pd.DataFrame(out)


def fp8_table(doc: dict):
    """FP8 fused against bf16, per (layout, M): the layer time ratio (fp8 fused / bf16, medians;
    < 1: FP8 takes less time), its verdict, and where the difference is (fp8 fused less bf16, us):
    the whole layer, GEMM2 and the activation each timed alone, and the rest (the layer's
    difference less those two; GEMM1 is the same bf16 GEMM in both): where the stages timed alone
    do not add up to the layer's difference, the rest says by how much."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            f, b = t.get((layout, M, "layer", "fp8_fused")), t.get((layout, M, "layer", "bf16"))
            if not (f and b):
                continue
            ratio = f["median_us"] / b["median_us"]
            word = _verdict(f, b, f"FP8 wins, {1 - ratio:.1%} less time", f"FP8 loses, {ratio - 1:.1%} more time")
            d_g2 = _delta(t, layout, M, "gemm2", "fp8_fused", "bf16")
            d_act = _delta(t, layout, M, "activation", "fp8_fused", "bf16")
            out.append(
                {
                    "layout": layout,
                    "M": M,
                    "fp8 fused / bf16": round(ratio, 3),
                    "verdict": word,
                    "layer: fp8 - bf16 us": round(f["median_us"] - b["median_us"], 1),
                    "GEMM2: fp8 - bf16 us": "-" if d_g2 is None else round(d_g2, 1),
                    "activation: fp8 - bf16 us": "-" if d_act is None else round(d_act, 1),
                    "rest: fp8 - bf16 us": "-"
                    if None in (d_g2, d_act)
                    else round(f["median_us"] - b["median_us"] - d_g2 - d_act, 1),
                }
            )
    return pd.DataFrame(out)


def compile_table(doc: dict):
    """The compiled layers against eager, per compiled (layout, M, variant): how it compiled, the
    compiled and the eager layer (median [lo, hi] us), the ratio compiled / eager, its verdict,
    the compile time, the error against float64 and whether its output bits equal eager's. Error
    strings, where a compile failed, are in the record (``compile``), whole."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for c in doc.get("compile", []):
        row = {"layout": c["layout"], "M": c["M"], "variant": c["variant"], "mode": c.get("mode", "-")}
        row["compiled"] = "yes" if c.get("ok") else ("skipped" if c.get("ok") is None else "failed")
        comp, eager = (
            t.get((c["layout"], c["M"], "compiled", c["variant"])),
            t.get((c["layout"], c["M"], "layer", c["variant"])),
        )
        row["compiled us"] = _fmt(comp) if comp else "-"
        row["eager us"] = _fmt(eager) if eager else "-"
        if comp and eager:
            ratio = comp["median_us"] / eager["median_us"]
            row["compiled / eager"] = round(ratio, 3)
            row["verdict"] = _verdict(
                comp, eager, f"compiled {1 - ratio:.1%} less time", f"compiled {ratio - 1:.1%} more time"
            )
        row["compile s"] = c.get("compile_s", "-")
        row["rel_err"] = f"{c['rel_err']:.3%}" if c.get("rel_err") is not None else "-"
        row["bits = eager"] = c.get("equal_to_eager", "-")
        out.append(row)
    return pd.DataFrame(out).fillna("-")


def accuracy_table(doc: dict):
    """Relative Frobenius error against float64 by (layout, M) and variant, and the bound."""
    import pandas as pd

    df = pd.DataFrame(doc["accuracy"])
    return df.pivot_table(index=["layout", "M"], columns="variant", values="rel_err")[list(doc["variants"])]


def accuracy_bounds(doc: dict):
    """Per variant, over every M and layout: the error against float64 and the format bound
    (:func:`error_bound`, loose: every rounding at its worst), and the error against the float64
    tail on the layer's own operands and :data:`TAIL_BOUND` (two bf16 roundings: the tight check,
    the one a misread scale fails), with how many times each error fits in its bound."""
    import pandas as pd

    df = pd.DataFrame([a for a in doc["accuracy"] if a.get("rel_err") is not None])
    out = []
    for v in doc["variants"]:
        d = df[df.variant == v]
        if d.empty:
            continue
        row = {
            "variant": v,
            "vs float64": f"{d.rel_err.min():.2%}-{d.rel_err.max():.2%}",
            "format bound": f"{d.bound.max():.2%}",
            "bound / error": f"{d.bound.max() / d.rel_err.max():.1f}x",
        }
        if "tail_rel_err" in d:
            row["vs the float64 tail"] = f"{d.tail_rel_err.min():.2%}-{d.tail_rel_err.max():.2%}"
            row["tail bound"] = f"{d.tail_bound.max():.2%}"
            row["tail bound / error"] = f"{d.tail_bound.max() / d.tail_rel_err.max():.1f}x"
        out.append(row)
    return pd.DataFrame(out)


def conclusions(doc: dict, captures: dict | None = None) -> list[str]:
    """What the record says, as sentences computed from it: what the fusion saves in the whole
    layer (one capture's verdict, and with ``captures``, the capture-variance experiment's,
    which decides where it covers the M), what the masked comparison includes, where FP8 beats
    bf16 (the layer time ratio fp8 fused / bf16) and where not, the fused activation's share,
    the compiled layers against eager, and the errors."""
    from inkling_workbook.measure.timing import ties

    t = _by_key(doc)
    across = {}
    if captures is not None:
        ct = capture_table(captures)
        across = {(r["layout"], r["M"]): r["fused vs unfused across captures"] for _, r in ct.iterrows()}
    lines = []
    for layout in doc["layouts"]:
        fusion, fp8, share, no_fusion, no_fp8, skipped, cap = [], [], [], [], [], [], []
        for M in doc["Ms"]:
            f, u, b = (t.get((layout, M, "layer", v)) for v in ("fp8_fused", "fp8_unfused", "bf16"))
            a = t.get((layout, M, "activation", "fp8_fused"))
            if f and u:
                saved = 1 - f["median_us"] / u["median_us"]
                tie = ties(f["lo_us"], f["hi_us"], u["lo_us"], u["hi_us"])
                us = u["median_us"] - f["median_us"]
                fusion.append(f"M={M}: {us:+.1f} us ({saved:+.1%})" + (" (tie: ranges overlap)" if tie else ""))
                verdict = across.get((layout, M))
                if verdict is not None:
                    cap.append(f"M={M}: {verdict}")
                if (verdict is not None and not verdict.startswith("fused faster")) or (
                    verdict is None and (tie or saved <= 0)
                ):
                    no_fusion.append(M)
                if layout == "masked" and doc.get("plans"):
                    rows = activation_rows(doc, layout, M)
                    skipped.append(f"M={M}: {rows['fp8_unfused'] - rows['fp8_fused']} of {rows['fp8_unfused']}")
            if f and b:  # the table's ratio, fp8 fused / bf16, in words
                ratio = f["median_us"] / b["median_us"]
                tie = ties(f["lo_us"], f["hi_us"], b["lo_us"], b["hi_us"])
                if tie:
                    word = f"tie ({ratio:.3f}, ranges overlap)"
                elif ratio < 1:
                    word = f"FP8 wins, {1 - ratio:.1%} less time"
                else:
                    word = f"FP8 loses, {ratio - 1:.1%} more time"
                fp8.append(f"M={M}: {word}")
                if tie or ratio >= 1:
                    no_fp8.append(M)
            if a and f:
                share.append(f"M={M}: {a['median_us'] / f['median_us']:.1%}")
        if fusion:
            lines.append(f"{layout}: time the fusion saves in the whole FP8 layer (one capture): " + "; ".join(fusion))
            if cap:
                lines.append(f"{layout}: fused against unfused across captures: " + "; ".join(cap))
            if skipped:
                lines.append(
                    f"{layout}: the saving includes skipped work: rows the unfused pair computes and the fused op "
                    "skips (padding, t >= masked_m): " + "; ".join(skipped)
                )
            lines.append(
                f"{layout}: the fusion does not pay (tie or loss) at M = {no_fusion}"
                if no_fusion
                else f"{layout}: the fused layer is faster than the unfused one at every M measured"
            )
        if fp8:
            lines.append(f"{layout}: the FP8 fused layer against the bf16 layer: " + "; ".join(fp8))
            lines.append(
                f"{layout}: FP8 does not pay (tie or loss) at M = {no_fp8}"
                if no_fp8
                else f"{layout}: FP8 beats bf16 at every M measured"
            )
        if share:
            lines.append(
                f"{layout}: the fused activation's share (timed alone, over the FP8 fused layer): " + "; ".join(share)
            )
    comp = []
    for c in doc.get("compile", []):
        tc, te = (
            t.get((c["layout"], c["M"], "compiled", c["variant"])),
            t.get((c["layout"], c["M"], "layer", c["variant"])),
        )
        if tc and te:
            r = tc["median_us"] / te["median_us"]
            word = f"{1 - r:.1%} less time" if r < 1 else f"{r - 1:.1%} more time"
            comp.append(f"{c['layout']} M={c['M']} {c['variant']}: {word}")
        elif c.get("ok") is False:
            comp.append(f"{c['layout']} M={c['M']} {c['variant']}: did not compile")
    if comp:
        modes = sorted({c["mode"] for c in doc["compile"] if c.get("ok")})
        lines.append(f"compiled ({', '.join(modes) or 'none'}) against eager: " + "; ".join(comp))
    errs, tails = {}, []
    for a in doc["accuracy"]:
        if a.get("rel_err") is not None:
            errs.setdefault(a["variant"], []).append(a["rel_err"])
        if a.get("tail_rel_err") is not None:
            tails.append(a["tail_rel_err"])
    if errs:
        lines.append(
            "error against float64 (relative Frobenius, over every M and layout): "
            + "; ".join(f"{v} {min(e):.2%}-{max(e):.2%}" for v, e in errs.items())
        )
    if tails:
        lines.append(
            f"error against the float64 tail on the layer's own operands: {min(tails):.2%}-{max(tails):.2%} "
            f"(bound {TAIL_BOUND:.2%}, two bf16 roundings)"
        )
    bits = doc.get("bitwise", [])
    if bits:
        n_eq = sum(b.get("equal") is True for b in bits)
        lines.append(f"fused == unfused activation, raw bits, on the timed inputs: {n_eq}/{len(bits)} cases")
    return lines

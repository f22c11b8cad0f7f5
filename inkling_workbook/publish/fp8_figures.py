"""The FP8 figures and targets (notebooks 06, 07): the fused kernel against the unfused pair and
torch.compile, the masked layout's slope, the 97% targets and the repeat they must hold in."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from inkling_workbook.publish import style  # noqa: E402


def fp8_warm(df: pd.DataFrame) -> pd.DataFrame:
    """The warm-L2 rows of an FP8 sweep (a sweep that also timed cold L2 has both)."""
    return df[df.l2 == "warm"] if "l2" in df else df


def _fp8_plain(df: pd.DataFrame) -> pd.DataFrame:
    """The warm-L2 FP8 rows without masks or scale options."""
    df = fp8_warm(df)
    return df[~df.masked & ~df.column_major_scales & ~df.scale_ue8m0]


def draw_fp8(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    """Fused vs unfused vs torch.compile (static) for the FP8 per-token-group op, both layouts."""
    d = _fp8_plain(df)
    wide = d.pivot_table(index=["N", "M", "layout"], columns="impl", values="median_us").reset_index()
    wide = wide.sort_values(["layout", "N", "M"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    x = np.arange(len(wide))
    impls = [i for i in ("fused", "fused_no_pdl", "unfused", "torch_compile_static") if i in wide]
    w = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        ax.bar(
            x + (i - (len(impls) - 1) / 2) * w, wide[impl], width=w, label=style.LABELS[impl], color=style.COLORS[impl]
        )
    for xi, r in zip(x, wide.itertuples()):
        ax.text(xi, max(r.unfused, r.fused) * 1.3, f"{r.unfused / r.fused:.2f}x", ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{int(r.M)}\n{int(r.N)}\n{r.layout}" for r in wide.itertuples()], fontsize=7)
    ax.set_xlabel("M, N, layout (row-major fp32 scales, group 128)", fontsize=8)
    ax.set_ylabel("median time per call (us, log)", fontsize=8)
    ax.set_title(
        f"{meta.get('device', '?')}: SiLU-and-mul + FP8 per-token-group quant, warm L2 (label: unfused / fused)",
        fontsize=9,
    )
    ax.tick_params(axis="y", labelsize=8)
    foot = style._footer(fig, meta, "warm")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=2, bbox_to_anchor=(0.5, foot))
    fig.tight_layout(rect=(0, foot + 0.5 / fig.get_figheight(), 1, 1))
    return style._save(fig, out_stem)


#: the masked targets' tolerance: the same rows in larger buffers, and the time a row present adds
#: against a 2-D call, within 25%
MASKED_TOLERANCE = 1.25


def _slope_span(lo, hi, flat_rows) -> tuple[float, float] | None:
    """The range of the masked-over-2-D row-cost ratio with each of its four timings (masked and
    2-D, fewer and more rows) taken at either end of its measured spread (``lo_us``, ``hi_us``), or
    None without the spreads."""
    if flat_rows is None or "lo_us" not in flat_rows or not {"lo_us", "hi_us"} <= set(lo.index):
        return None
    f_lo, f_hi = flat_rows.loc[lo.case], flat_rows.loc[hi.case]
    d_min, d_max = f_hi.lo_us - f_lo.hi_us, f_hi.hi_us - f_lo.lo_us
    if d_min <= 0:
        return None
    return (hi.lo_us - lo.hi_us) / d_max, (hi.hi_us - lo.lo_us) / d_min


def _masked_targets(m: pd.DataFrame, n: int) -> list[dict]:
    """Issue 12's masked target, "time proportional to the rows present, not to E x T", on the warm
    rows of one N, as two conditions and a report:

    1. *not E x T*: the same counts (the fewest rows timed) in buffers of every T timed take times
       within :data:`MASKED_TOLERANCE` of each other (a time that followed E x T would grow with T);
    2. *the rows present*: where one T has two counts, the time a row present adds (the difference
       of the two calls over the difference of their rows) within :data:`MASKED_TOLERANCE` of what
       it adds to the same rows as one 2-D call (``fused_2d_present``);
    3. reported, not a target (``met`` None): the fixed cost, the masked call over the same rows as
       one 2-D call, and the per-row reading quoted until cf4b87e (the ragged call's time a row
       within 25% of the full case's at the smallest T), which a 2-D call on only the rows present
       misses as well: at these sizes a launch's fixed cost is a quarter of the full call.
    """
    fused = m[m.impl == "fused"]
    if fused.empty:
        return []
    flat_rows = m[m.impl == "fused_2d_present"]
    flat_rows = flat_rows.set_index("case") if len(flat_rows) and "case" in flat_rows else None
    flat = flat_rows.median_us if flat_rows is not None else pd.Series(dtype=float)
    e = int(fused["E"].iloc[0])  # fused["T"], not fused.T: .T is the transpose
    out = []
    few = fused[fused.M == fused.M.min()].sort_values("T")
    if few["T"].nunique() < 2:
        out.append(
            {
                "target": f"FP8 masked (E={e}, N={n}): not E x T: the same rows present in larger buffers "
                f"within {MASKED_TOLERANCE:.2f}x",
                "measured": f"not measured: this sweep times {int(few.M.iloc[0])} rows at one T only",
                "met": False,
            }
        )
    else:
        t, ts = few.median_us, [int(x) for x in few["T"]]
        spread = t.max() / t.min()
        measured = (
            f"{int(few.M.iloc[0])} rows at T = {' / '.join(map(str, ts))} (E x T = {e * ts[0]} to {e * ts[-1]}): "
            + " / ".join(f"{u:.2f}" for u in t)
            + f" us, max/min {spread:.2f}x"
        )
        same = [flat[c] for c in few.case if c in flat]
        if same:
            measured += f"; the same rows as one 2-D call {min(same):.2f}-{max(same):.2f} us"
        out.append(
            {
                "target": f"FP8 masked (E={e}, N={n}): not E x T: the same rows present in buffers "
                f"{ts[-1] // ts[0]}x larger within {MASKED_TOLERANCE:.2f}x",
                "measured": measured,
                "met": bool(spread <= MASKED_TOLERANCE),
            }
        )
    slopes = []
    for T, g in fused.groupby("T"):
        lo, hi = g.loc[g.M.idxmin()], g.loc[g.M.idxmax()]
        if hi.M > lo.M and lo.get("case") in flat and hi.get("case") in flat:
            dm = hi.M - lo.M
            slopes.append((int(T), lo, hi, (hi.median_us - lo.median_us) / dm, (flat[hi.case] - flat[lo.case]) / dm))
    if slopes:
        ratios = [a / b for *_, a, b in slopes]
        parts, shorts = [], []
        for T, lo, hi, a, b in slopes:
            shorts.append(f"T = {T} {a / b:.3f}x")
            part = f"T = {T}, {int(lo.M)} -> {int(hi.M)} rows: {1e3 * a:.2f} ns a row masked, "
            part += f"{1e3 * b:.2f} 2-D ({a / b:.3f}x"
            span = _slope_span(lo, hi, flat_rows)
            if span is not None:
                # each of the four timings at either end of its spread: where the limit falls inside,
                # the reading is a tie with it (counted as met, as ties are throughout this workbook)
                part += f"; from the spreads {span[0]:.2f}-{span[1]:.2f}x"
                if span[0] <= MASKED_TOLERANCE <= span[1]:
                    part += ": a tie with the limit"
                    shorts[-1] += ", a tie with the limit"
            parts.append(part + ")")
        out.append(
            {
                "target": f"FP8 masked (E={e}, N={n}): the rows present: the time a row present adds within "
                f"{MASKED_TOLERANCE:.2f}x of what it adds to one 2-D call",
                "measured": "; ".join(parts),
                "short": "; ".join(shorts),
                "met": bool(max(ratios) <= MASKED_TOLERANCE),
            }
        )
    fixed = [(int(r["T"]), r.median_us / flat[r.case]) for _, r in few.iterrows() if r.case in flat]
    small = fused[fused["T"] == fused["T"].min()]
    if fixed or small.M.nunique() >= 2:
        parts = []
        if fixed:
            x = [f for _, f in fixed]
            span = f"{x[0]:.2f}x" if len(x) == 1 else f"{min(x):.2f}-{max(x):.2f}x ({len(x)} buffers)"
            parts.append(f"{int(few.M.iloc[0])} rows masked over the same rows as one 2-D call {span}")
        if small.M.nunique() >= 2:
            part, full = small.loc[small.M.idxmin()], small.loc[small.M.idxmax()]
            full_us = min(full.median_us, flat.get(full.case, full.median_us))
            per_row = (part.median_us / part.M) / (full_us / full.M)
            reading = f"per-row at T = {int(part['T'])}, {int(part.M)} of {int(full.M)} rows: {per_row:.2f}x"
            if part.case in flat and full.case in flat:
                ideal = (flat[part.case] / part.M) / (flat[full.case] / full.M)
                reading += f" (one 2-D call on only those rows: {ideal:.2f}x)"
            parts.append(reading)
        out.append(
            {
                "target": f"FP8 masked (E={e}, N={n}): the fixed cost (reported, not a target)",
                "measured": "; ".join(parts),
                "met": None,
            }
        )
    return out


#: the published FP8 sweep's repeat, by the published record's commit: the same code timed again in
#: a fresh lease (``tools/fp8_publish.py``), under ``data/rerun/``. A target is met only if it is
#: met in both: a number that does not reproduce is not a result.
FP8_REPEATS = {
    "f689e68": "fp8_bench_h200_21963ec.csv",
    "69dcc87": "fp8_bench_h200_526be54.csv",
    "08c814b": "fp8_bench_h200_9eb911b.csv",
    "e6a3b91": "fp8_bench_h200_a8add57.csv",
}


def fp8_repeat(fp8_csv: Path) -> pd.DataFrame | None:
    """The repeat of the FP8 sweep recorded at ``fp8_csv`` (:data:`FP8_REPEATS`), or None."""
    meta_path = Path(fp8_csv).with_suffix(".json")
    if not meta_path.exists():
        return None
    name = FP8_REPEATS.get(json.loads(meta_path.read_text()).get("git_commit", "")[:7])
    path = Path(fp8_csv).parent / "rerun" / name if name else None
    return pd.read_csv(path) if path and path.exists() else None


def fp8_targets(fp8: pd.DataFrame, silu: pd.DataFrame | None = None, repeat: pd.DataFrame | None = None) -> list[dict]:
    """Issue 12's targets against a recorded FP8 sweep and, if given, its repeat (met only if met
    in both; where the two disagree the repeat's measurement is quoted)."""
    rows = _fp8_targets(fp8, silu)
    if repeat is None:  # one run: a target met there is not yet a result (``unverified`` in the tables)
        return [{k: v for k, v in r.items() if k != "short"} | ({"unverified": True} if r["met"] else {}) for r in rows]
    again = {r["target"]: r for r in _fp8_targets(repeat, silu)}
    for r in rows:
        rep = again.get(r["target"])
        if r["met"] is None:
            continue
        if rep is None:
            r["measured"] += "; repeat: not measured"
            r["met"] = False
        elif rep["met"] == r["met"]:
            short = f" ({rep['short']})" if rep.get("short") else ""
            r["measured"] += f"; repeat: {'met' if rep['met'] else 'missed'} too{short}"
        else:
            r["measured"] += f"; repeat: {'met' if rep['met'] else 'MISSED'}, {rep['measured']}"
            r["met"] = False
    return [{k: v for k, v in r.items() if k != "short"} for r in rows]  # "short": the repeat's quote


def _fp8_targets(fp8: pd.DataFrame, silu: pd.DataFrame | None = None) -> list[dict]:
    rows = []
    fp8 = fp8_warm(fp8)
    big = fp8[(fp8.M == 49152) & ~fp8.masked]
    wide = big.pivot_table(
        index=["N", "layout", "column_major_scales", "scale_ue8m0"], columns="impl", values="median_us"
    ).reset_index()
    fused = big[big.impl == "fused"]
    share = fused.tbps / fused.ceiling_tbps
    no_pdl = big[big.impl == "fused_no_pdl"]
    off = ""
    if len(no_pdl):
        s_off = no_pdl.tbps / no_pdl.ceiling_tbps
        off = f"; PDL off {100 * s_off.min():.1f}-{100 * s_off.max():.1f}%"
    measured = (
        f"{100 * share.min():.1f}-{100 * share.max():.1f}% ({fused.tbps.min():.2f}-{fused.tbps.max():.2f} TB/s){off}"
    )
    # records after 7192cb8 also time the ceiling's copy in each case's own passes (the same clocks
    # and power state): a case then counts at the lower of its two shares, the run-start ceiling's
    # and that copy's, so the second reading can only make the target harder; a case without the
    # copy counts at its run-start share, and the text says how many had it
    same = fused.get("ceiling_same_passes_tbps")
    if same is not None and same.notna().any():
        share_same = fused.tbps / same
        text = f"{100 * share_same.min():.1f}-{100 * share_same.max():.1f}%"
        if len(no_pdl) and no_pdl.get("ceiling_same_passes_tbps") is not None:
            s_off = no_pdl.tbps / no_pdl.ceiling_same_passes_tbps
            if s_off.notna().any():
                text += f"; PDL off {100 * s_off.min():.1f}-{100 * s_off.max():.1f}%"
        measured = (
            f"against the run-start ceiling {measured}; against the copy timed in the same passes "
            f"({int(same.notna().sum())} of {len(fused)} cases) {text}; each case counted at the lower share"
        )
        share = share.where(share_same.isna(), share.combine(share_same, min))
    rows.append(
        {
            "target": f"FP8 fused at M=49152, every layout and option ({len(fused)}): "
            ">= 97% of the FP8-pattern ceiling",
            "measured": measured,
            "met": bool((share >= 0.97).all()),
        }
    )
    # like for like: the two-kernel path launches with PDL, as the fused kernel does; torch.compile's
    # kernels launch without it, so they meet the fused kernel without PDL (where the sweep timed
    # it), and the strongest compile on each case (the fastest of its modes timed there)
    if "unfused" in wide:
        r = wide["unfused"] / wide["fused"]
        rows.append(
            {
                "target": f"FP8 fused at M=49152, every layout and option: >= 1.75x {style.LABELS['unfused']}, "
                "both with PDL",
                "measured": f"{r.min():.2f}-{r.max():.2f}x",
                "met": bool((r >= 1.75).all()),
            }
        )
    comp = [c for c in style.COMPILE_BEST["fp8"] if c in wide]
    if comp:
        port = "fused_no_pdl" if "fused_no_pdl" in wide else "fused"
        r = wide[comp].min(axis=1) / wide[port]
        modes = " or ".join(
            style.LABELS[c].removeprefix("torch.compile (").removesuffix(") of the reference") for c in comp
        )
        against = "without PDL" if port == "fused_no_pdl" else "as timed"
        rows.append(
            {
                "target": "FP8 fused at M=49152, every layout and option: >= 2.2x the fastest torch.compile of the "
                f"reference ({modes}), against the fused kernel {against}",
                "measured": f"{r.min():.2f}-{r.max():.2f}x",
                "met": bool((r >= 2.2).all()),
            }
        )
    masked = fp8[fp8.masked]
    for n in sorted(masked.N.unique()):
        rows += _masked_targets(masked[masked.N == n], int(n))
    dec = fp8[(fp8.M == 16) & (fp8.impl == "fused") & ~fp8.masked & ~fp8.column_major_scales & ~fp8.scale_ue8m0]
    pairs = []  # (what silu_and_mul is, the fused rows merged with it)
    same = fp8[(fp8.M == 16) & (fp8.impl == "silu_and_mul_alone")]
    if len(same):
        pairs.append(("timed in the same passes", dec.merge(same[["N", "layout", "median_us"]], on=["N", "layout"],
                                                            suffixes=("", "_silu"))))  # fmt: skip
    if silu is not None and "triton_pdl" in set(silu.impl):
        ref = silu[(silu.M == 16) & (silu.impl == "triton_pdl") & (silu.l2 == "warm") & ~silu.weighted]
        pairs.append(("from the silu sweep", dec.merge(ref, on=["N", "layout"], suffixes=("", "_silu"))))
    pairs = [(what, both) for what, both in pairs if len(both)]
    if pairs:
        gaps = [(what, both.median_us - both.median_us_silu) for what, both in pairs]
        rows.append(
            {
                "target": "FP8 fused at decode (M=16): within 0.2 us of silu_and_mul alone (both with PDL)",
                "measured": "; ".join(
                    f"{g.min():+.2f} to {g.max():+.2f} us ({len(g)} shapes, silu_and_mul {what})" for what, g in gaps
                ),
                # the first pairing decides: the same passes when the sweep has them
                "met": bool((gaps[0][1] <= 0.2).all()),
            }
        )
    return rows

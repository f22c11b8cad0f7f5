"""The MoE layer's figures (notebook 08): layer time by variant and M, where the time goes, and the
error against float64."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from inkling_workbook.publish import style  # noqa: E402

MOE_COLORS = {"bf16": "#0072B2", "fp8_unfused": "#D55E00", "fp8_fused": "#009E73"}


MOE_LABELS = {
    "bf16": "bf16 layer (silu_and_mul, bf16 GEMM2)",
    "fp8_unfused": "FP8, silu_and_mul + fp8_group_quant (two kernels)",
    "fp8_fused": "FP8, silu_and_mul_fp8_group_quant (fused)",
}


#: the same, short enough for a legend of six entries
MOE_SHORT = {"bf16": "bf16", "fp8_unfused": "FP8 unfused (two kernels)", "fp8_fused": "FP8 fused"}


def _moe_footer(fig, doc: dict) -> float:
    meta = {**doc["provenance"], "timing": doc.get("timing") if isinstance(doc.get("timing"), dict) else {}}
    s = doc["shape"]
    shape = f"E={s['E']}, top-{s['k']}, H={s['H']}, N={s['N']}; "
    text = shape + style._caption(meta, "warm")
    import textwrap

    text = "\n".join(textwrap.wrap(text, int(fig.get_figwidth() * 72 / (style.FOOTER_PT * 0.56))))
    fig.text(0.01, 0.005, text, fontsize=style.FOOTER_PT, color="0.25", va="bottom")
    return (text.count("\n") + 1) * style.FOOTER_PT * 1.25 / 72 / fig.get_figheight() + 0.01


#: the two ratios of notebook 08's verdicts: (numerator, denominator, label, colour, marker)
MOE_RATIOS = (
    ("fp8_fused", "fp8_unfused", "FP8 fused / FP8 unfused", "#009E73", "o"),
    ("fp8_fused", "bf16", "FP8 fused / bf16", "#CC79A7", "s"),
)


def moe_ratio(num: dict, den: dict) -> tuple[float, float, float]:
    """(ratio of medians, lowest, highest) of two layer timings: the spread from each one's
    [lo, hi] (lowest and highest pass median), ``num.lo / den.hi`` to ``num.hi / den.lo``."""
    return num["median_us"] / den["median_us"], num["lo_us"] / den["hi_us"], num["hi_us"] / den["lo_us"]


def draw_moe_layer(doc: dict, out_stem: Path | None = None):
    """Notebook 08's layer timings, one column per layout. Top: each variant's whole-layer time
    (us, median; log axes), the compiled layers as open markers. Bottom: the two ratios the
    verdicts use, FP8 fused / FP8 unfused and FP8 fused / bf16, with their spread as error bars
    and a line at 1.0 (below it the fused, resp. the FP8, layer takes less time), each value
    printed beside its marker: the 0.5-2% differences that a time axis cannot show."""
    layouts = list(doc["layouts"])
    fig, axes = plt.subplots(2, len(layouts), figsize=(8.0, 6.4), sharex=True, sharey="row", squeeze=False,
                             gridspec_kw={"height_ratios": (1, 1.2)})  # fmt: skip
    t = {(r["layout"], r["M"], r["kind"], r["variant"]): r for r in doc["rows"]}
    Ms = sorted({r["M"] for r in doc["rows"]})
    for col, layout in enumerate(layouts):
        top, bottom = axes[0][col], axes[1][col]
        for v in doc["variants"]:
            for kind in ("layer", "compiled"):
                pts = [(M, t[(layout, M, kind, v)]) for M in Ms if (layout, M, kind, v) in t]
                if not pts:
                    continue
                x = [m for m, _ in pts]
                y = [r["median_us"] for _, r in pts]
                err = [[r["median_us"] - r["lo_us"] for _, r in pts], [r["hi_us"] - r["median_us"] for _, r in pts]]
                if kind == "layer":
                    top.errorbar(x, y, yerr=err, fmt="-o", color=MOE_COLORS[v], ms=4, capsize=2, label=MOE_LABELS[v])
                else:
                    top.errorbar(x, y, yerr=err, fmt="s", mfc="white", color=MOE_COLORS[v], ms=6, capsize=2,
                                 label=f"{MOE_LABELS[v].split(' (')[0]}, torch.compile")  # fmt: skip
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([100, 200, 500, 1000, 2000, 5000]))
        top.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:.0f}"))
        top.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        top.set_title(f"{layout} layout", fontsize=10)
        top.grid(True, which="both", alpha=0.3)
        top.tick_params(labelsize=8)
        series = {}
        for num, den, *_ in MOE_RATIOS:
            series[num, den] = {M: moe_ratio(t[(layout, M, "layer", num)], t[(layout, M, "layer", den)]) for M in Ms
                                if (layout, M, "layer", num) in t and (layout, M, "layer", den) in t}  # fmt: skip
        for i, (num, den, label, color, marker) in enumerate(MOE_RATIOS):
            pts = series[num, den]
            if not pts:
                continue
            shift = 0.93 if i == 0 else 1.07  # side by side at each M (log2 x)
            x = [m * shift for m in pts]
            r = [p[0] for p in pts.values()]
            err = [[p[0] - p[1] for p in pts.values()], [p[2] - p[0] for p in pts.values()]]
            bottom.errorbar(x, r, yerr=err, fmt=f"-{marker}", color=color, ms=4, capsize=2, lw=1, label=label)
            for M, xi, ri in zip(pts, x, r, strict=True):  # the value on the side away from the other ratio
                others = [s[M][0] for key, s in series.items() if key != (num, den) and M in s]
                above = all(ri >= o for o in others)
                bottom.annotate(f"{ri:.3f}", (xi, ri), textcoords="offset points", xytext=(0, 6 if above else -11),
                                ha="center", fontsize=7, color=color,
                                bbox={"fc": "white", "ec": "none", "pad": 0.3, "alpha": 0.85})  # fmt: skip
        bottom.axhline(1.0, color="0.3", lw=0.8, ls="--")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(Ms, [str(m) for m in Ms])
        bottom.set_xlabel("tokens M")
        bottom.grid(True, which="both", alpha=0.3)
        bottom.tick_params(labelsize=8)
    lo, hi = axes[1][0].get_ylim()
    axes[1][0].set_ylim(min(lo, 0.97) - 0.015, max(hi, 1.03) + 0.02)  # room for the printed values
    axes[0][0].set_ylabel("layer time (us, median)")
    axes[1][0].set_ylabel("ratio of layer times\n(< 1: the first takes less time)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=7.5, frameon=False)
    axes[1][-1].legend(fontsize=7.5, loc="upper right", frameon=True, framealpha=0.9)
    foot = _moe_footer(fig, doc)
    fig.tight_layout(rect=(0, foot, 1, 0.89), h_pad=0.6)
    return style._save(fig, out_stem) if out_stem is not None else fig


def draw_moe_error(doc: dict, out_stem: Path | None = None):
    """Relative Frobenius error (%) of each variant's layer output against the float64 layer, per
    M (bars) and layout (hatched: masked)."""
    df = pd.DataFrame([a for a in doc["accuracy"] if a.get("rel_err") is not None])
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    Ms = sorted(df.M.unique())
    width = 0.8 / (len(doc["variants"]) * len(doc["layouts"]))
    i = 0
    for v in doc["variants"]:
        for layout in doc["layouts"]:
            d = df[(df.variant == v) & (df.layout == layout)].set_index("M").reindex(Ms)
            x = np.arange(len(Ms)) - 0.4 + (i + 0.5) * width
            ax.bar(x, d.rel_err * 100, width, color=MOE_COLORS[v], hatch="//" if layout == "masked" else None,
                   edgecolor="white", label=f"{MOE_SHORT[v]}, {layout}")  # fmt: skip
            i += 1
    ax.set_xticks(np.arange(len(Ms)), [str(m) for m in Ms])
    ax.set_xlabel("tokens M")
    ax.set_ylabel("relative Frobenius error vs float64 (%)")
    ax.grid(True, axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7.5, ncol=3, frameon=False, loc="upper center")
    foot = _moe_footer(fig, doc)
    fig.tight_layout(rect=(0, foot, 1, 0.86))
    return style._save(fig, out_stem) if out_stem is not None else fig

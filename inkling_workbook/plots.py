"""Publication figures, drawn only from the measured CSV + provenance JSON files in ``data/``."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib  # noqa: F401
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .provenance import companion

COLORS = {"helion": "#4C72B0", "torch_compile": "#DD8452", "torch_eager": "#8C8C8C", "triton": "#55A868"}


def load_bench(csv_path: str | Path) -> tuple[pd.DataFrame, dict]:
    csv_path = Path(csv_path)
    meta_path = companion(csv_path, "meta")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return pd.read_csv(csv_path), meta


def caption(meta: dict) -> str:
    return (
        f"{meta.get('device', '?')}, driver {meta.get('driver', '?')}; torch {meta.get('torch', '?')}, "
        f"triton {meta.get('triton', '?')}, helion {meta.get('helion', '?')}; {meta.get('date_utc', '?')[:10]}; "
        "CUDA-graph replay, median per call, warm L2"
    )


def speedup_table(df: pd.DataFrame, l2: str = "warm") -> pd.DataFrame:
    """One row per shape: median us of each implementation and the port's speedups."""
    d = df[(df["op"] == "silu_and_mul") & (df["l2"] == l2)]
    wide = d.pivot_table(
        index=["group", "M", "N", "layout", "weighted"], columns="impl", values="median_us"
    ).reset_index()
    for other in ("helion", "torch_compile", "torch_eager"):
        if other in wide:
            wide[f"vs_{other}"] = wide[other] / wide["triton"]
    return wide


def geomean(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if len(v) else float("nan")


RERUN_KEYS = ["op", "M", "N", "layout", "weighted", "impl", "l2"]


def rerun_table(again: pd.DataFrame, recorded: pd.DataFrame) -> pd.DataFrame:
    """A re-measurement against a recorded sweep, row by row where both timed the same thing:
    ``ratio`` = again / recorded (median us per call; > 1 means slower now)."""
    keys = [k for k in RERUN_KEYS if k in again and k in recorded]
    both = again.merge(recorded, on=keys, suffixes=("_again", "_recorded"))
    both["size"] = np.where(both.M <= 16, "decode (M <= 16)", np.where(both.M < 4096, "mid", "large (M >= 4096)"))
    both["ratio"] = both.median_us_again / both.median_us_recorded
    return both[[*keys, "size", "median_us_again", "median_us_recorded", "ratio"]]


def rerun_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per implementation and size class: how many timings, and the spread of again/recorded."""
    g = table.groupby(["impl", "size"]).ratio
    out = pd.DataFrame({"timings": g.size(), "median": g.median(), "min": g.min(), "max": g.max()})
    return out.round(3).reset_index()


def _label(r) -> str:
    return f"{int(r.M)}x{int(r.N)} {r.layout}{'+w' if r.weighted else ''}"


def draw_speedup(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    """Speedup of the port over helion (top) and torch.compile (bottom), per layout, vs M."""
    wide = speedup_table(df)
    fig, axes = plt.subplots(2, 2, figsize=(7.0, 5.2), sharex=True, sharey="row")
    ns = sorted(wide.N.unique())
    cmap = plt.get_cmap("viridis")
    for col, layout in enumerate(("il", "nil")):
        for row, other in enumerate(("helion", "torch_compile")):
            ax = axes[row, col]
            key = f"vs_{other}"
            if key not in wide:
                continue
            d = wide[(wide.layout == layout) & ~wide.weighted]
            for i, n in enumerate(ns):
                dn = d[d.N == n].sort_values("M")
                if len(dn):
                    ax.plot(dn.M, dn[key], marker="o", ms=3, lw=1, color=cmap(i / max(1, len(ns) - 1)), label=f"N={n}")
            dw = wide[(wide.layout == layout) & wide.weighted]
            if len(dw):
                ax.scatter(dw.M, dw[key], marker="*", s=60, color="crimson", zorder=4, label="with weights")
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
            gm = geomean(wide[wide.layout == layout][key])
            title = "interleaved" if layout == "il" else "non-interleaved"
            ax.set_title(f"{title}: vs {other.replace('_', '.')} (geomean {gm:.2f}x)", fontsize=8)
            if col == 0:
                ax.set_ylabel(f"speedup over {other.replace('_', '.')} (x)", fontsize=8)
            if row == 1:
                ax.set_xlabel("M (tokens x experts, rows)", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 1].legend(fontsize=6, loc="upper left")
    fig.suptitle("silu_and_mul: speedup of the Triton port (higher is better)", fontsize=10)
    fig.text(0.01, 0.005, caption(meta), fontsize=5.5, color="0.3")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return _save(fig, out_stem)


def draw_bandwidth(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    d = df[(df["op"] == "silu_and_mul") & (df["l2"] == "warm") & (df["M"] >= 1536)]
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    wide = d.pivot_table(index=["M", "N", "layout", "weighted"], columns="impl", values="tbps").reset_index()
    wide = wide.sort_values(["layout", "N", "M"]).reset_index(drop=True)
    x = np.arange(len(wide))
    for impl in ("triton", "helion", "torch_compile"):
        if impl in wide:
            ax.plot(x, wide[impl], marker="o", ms=3, lw=1, color=COLORS[impl], label=f"{impl} (warm L2)")
    cold = df[(df["op"] == "silu_and_mul") & (df["l2"] == "cold") & (df["M"] >= 1536) & (df["impl"] == "triton")]
    if len(cold):
        c = wide[["M", "N", "layout", "weighted"]].merge(cold, on=["M", "N", "layout", "weighted"], how="left")
        ax.plot(x, c["tbps"], ls="--", marker="x", ms=3, lw=1, color=COLORS["triton"], label="triton (cold L2)")
    for key, style in (("ceiling_49152x3072", "--"), ("ceiling_49152x768", ":")):
        if key in meta:
            ax.axhline(
                meta[key]["tbps"],
                color="black",
                ls=style,
                lw=1,
                label=f"streaming ceiling {key[8:]} ({meta[key]['tbps']:.2f} TB/s)",
            )
    ax.axhline(4.8, color="red", ls="-.", lw=0.8, label="H200 datasheet 4.8 TB/s")
    ax.set_xticks(x, [_label(r) for r in wide.itertuples()], rotation=90, fontsize=6)
    ax.set_ylabel("effective bandwidth (TB/s)")
    ax.set_title("silu_and_mul prefill shapes: bytes moved / median time (warm L2 can beat DRAM)", fontsize=9)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=3)
    fig.text(0.01, 0.005, caption(meta), fontsize=6, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return _save(fig, out_stem)


def draw_nvfp4(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    wide = df.pivot_table(index=["M", "N"], columns="impl", values="median_us").reset_index()
    wide = wide.sort_values(["N", "M"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    x = np.arange(len(wide))
    w = 0.27
    for i, impl in enumerate(("fused", "unfused", "torch_eager")):
        if impl in wide:
            ax.bar(x + (i - 1) * w, wide[impl], width=w, label=impl, color=["#55A868", "#4C72B0", "#8C8C8C"][i])
    for xi, r in zip(x, wide.itertuples()):
        if hasattr(r, "fused") and hasattr(r, "unfused"):
            ax.text(xi, r.unfused * 1.15, f"{r.unfused / r.fused:.2f}x", ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"M={int(r.M)}\nN={int(r.N)}" for r in wide.itertuples()], fontsize=7)
    ax.set_ylabel("median time per call (us, log)")
    ax.set_title("SiLU-and-mul + NVFP4 quant: fused vs unfused (label: unfused/fused)", fontsize=10)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.005, caption(meta), fontsize=6, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return _save(fig, out_stem)


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=200)
    with plt.rc_context({"svg.hashsalt": "inkling-kernels"}):  # stable ids: regenerating changes no byte
        fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def draw_all(data_dir: Path, fig_dir: Path) -> list[Path]:
    written = []
    for csv_path in sorted(data_dir.glob("bench_*.csv")):
        gpu = csv_path.stem.removeprefix("bench_")
        if gpu.startswith("quick_"):  # notebook 06's re-measurements, drawn there
            continue
        df, meta = load_bench(csv_path)
        written += draw_speedup(df, meta, fig_dir / f"speedup_{gpu}")
        written += draw_bandwidth(df, meta, fig_dir / f"bandwidth_{gpu}")
        nv = companion(csv_path, "nvfp4")
        if nv.exists():
            written += draw_nvfp4(pd.read_csv(nv), meta, fig_dir / f"nvfp4_{gpu}")
    return written


def targets_table(df: pd.DataFrame, meta: dict, nv: pd.DataFrame | None = None) -> pd.DataFrame:
    """The issue-level targets next to what the recorded run measured."""
    wide = speedup_table(df)
    decode = wide[wide.M <= 16]
    big = df[(df.op == "silu_and_mul") & (df.impl == "triton") & (df.l2 == "warm") & (df.M == 49152)]
    rows = [
        {
            "target": "decode (M <= 16): <= 1.20 us per call",
            "measured": f"{decode.triton.min():.2f}-{decode.triton.max():.2f} us; "
            f"{(decode.triton <= 1.20).sum()}/{len(decode)} shapes met",
            "met": bool((decode.triton <= 1.20).all()),
        },
        {
            "target": "decode: never slower than torch.compile",
            "measured": f"slower on {(decode.vs_torch_compile < 1).sum()}/{len(decode)} shapes "
            f"(worst {decode.vs_torch_compile.min():.2f}x)",
            "met": bool((decode.vs_torch_compile >= 1).all()),
        },
    ]
    for n in (768, 3072):
        ceiling = meta.get(f"ceiling_49152x{n}", {}).get("tbps", float("nan"))
        for layout in ("il", "nil"):
            r = big[(big.N == n) & (big.layout == layout)]
            if r.empty:
                continue
            tb = float(r.tbps.iloc[0])
            goal = min(4.3, 0.98 * ceiling)
            rows.append(
                {
                    "target": f"M=49152 N={n} {layout}: >= min(4.3 TB/s, 98% of same-pattern ceiling {ceiling:.2f})",
                    "measured": f"{tb:.2f} TB/s = {100 * tb / ceiling:.1f}% of ceiling",
                    "met": tb >= goal,
                }
            )
    for other in ("helion", "torch_compile"):
        col = f"vs_{other}"
        if col in wide:
            rows.append(
                {
                    "target": f"every shape >= 1.0x vs {other}",
                    "measured": f"geomean {geomean(wide[col]):.2f}x; slower on {(wide[col] < 1).sum()}/{len(wide)} "
                    f"(worst {wide[col].min():.2f}x)",
                    "met": bool((wide[col] >= 1).all()),
                }
            )
    if nv is not None and not nv.empty:
        p = nv.pivot_table(index=["M", "N"], columns="impl", values="median_us").reset_index()
        ratio = p[p.M >= 8192].unfused / p[p.M >= 8192].fused
        rows.append(
            {
                "target": "NVFP4 fused >= 1.6x unfused from M = 8192",
                "measured": f"{ratio.min():.2f}-{ratio.max():.2f}x",
                "met": bool((ratio >= 1.6).all()),
            }
        )
        f = nv[(nv.impl == "fused") & (nv.M == 49152)]
        share = f.fused_floor_us / f.median_us
        rows.append(
            {
                "target": "NVFP4 fused >= 85% of its byte floor at M = 49152",
                "measured": ", ".join(f"N={int(n)}: {100 * s:.0f}%" for n, s in zip(f.N, share)),
                "met": bool((share >= 0.85).all()),
            }
        )
    return pd.DataFrame(rows)


def summary_markdown(data_dir: Path, gpu: str = "h200") -> str:
    """The README's table, generated from the recorded CSVs."""
    df, meta = load_bench(data_dir / f"bench_{gpu}.csv")
    nv_path = companion(data_dir / f"bench_{gpu}.csv", "nvfp4")
    nv = pd.read_csv(nv_path) if nv_path.exists() else None
    wide = speedup_table(df)
    src = wide[wide.group == "source"].sort_values(["layout", "M", "N"])
    lines = [
        f"Measured on {meta.get('device')} (driver {meta.get('driver')}, torch {meta.get('torch')}, "
        f"triton {meta.get('triton')}, helion {meta.get('helion')}, {meta.get('date_utc', '')[:10]}); "
        "CUDA-graph replay, median us per call, warm L2. Source: `data/bench_h200.csv`.",
        "",
        "| M | N | layout | w | Triton port | helion | torch.compile | vs helion | vs compile |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in src.itertuples():
        lines.append(
            f"| {r.M} | {r.N} | {r.layout} | {'w' if r.weighted else '-'} | {r.triton:.2f} | {r.helion:.2f} | "
            f"{r.torch_compile:.2f} | {r.vs_helion:.2f}x | {r.vs_torch_compile:.2f}x |"
        )
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    for r in targets_table(df, meta, nv).itertuples():
        lines.append(f"| {r.target} | {r.measured} | {'yes' if r.met else '**no**'} |")
    return "\n".join(lines) + "\n"


def update_readme(readme: Path, data_dir: Path) -> bool:
    """Rewrite the block between the summary markers of the README; True if it changed."""
    start, end = "<!-- summary:start -->", "<!-- summary:end -->"
    text = readme.read_text()
    if start not in text or end not in text or not (data_dir / "bench_h200.csv").exists():
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{start}\n{summary_markdown(data_dir)}{end}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text

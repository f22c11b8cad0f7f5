"""Publication figures, drawn only from the measured CSV + provenance JSON files in ``data/``."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib  # noqa: F401

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

COLORS = {"helion": "#4C72B0", "torch_compile": "#DD8452", "torch_eager": "#8C8C8C", "triton": "#55A868"}


def load_bench(csv_path: str | Path) -> tuple[pd.DataFrame, dict]:
    csv_path = Path(csv_path)
    meta_path = csv_path.with_suffix(".json")
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
    wide = d.pivot_table(index=["group", "M", "N", "layout", "weighted"], columns="impl", values="median_us").reset_index()
    for other in ("helion", "torch_compile", "torch_eager"):
        if other in wide:
            wide[f"vs_{other}"] = wide[other] / wide["triton"]
    return wide


def geomean(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if len(v) else float("nan")


def _label(r) -> str:
    return f"{int(r.M)}x{int(r.N)} {r.layout}{'+w' if r.weighted else ''}"


def draw_speedup(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    wide = speedup_table(df)
    wide = wide.sort_values(["layout", "weighted", "M", "N"]).reset_index(drop=True)
    labels = [_label(r) for r in wide.itertuples()]
    fig, ax = plt.subplots(figsize=(7.0, max(4.0, 0.16 * len(wide) + 1.5)))
    y = np.arange(len(wide))
    h = 0.4
    for i, other in enumerate(("helion", "torch_compile")):
        col = f"vs_{other}"
        if col in wide:
            gm = geomean(wide[col])
            ax.barh(y + (i - 0.5) * h, wide[col], height=h, color=COLORS[other], label=f"vs {other} (geomean {gm:.2f}x)")
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("speedup of the Triton port (x, higher is better)")
    ax.set_title("silu_and_mul: Triton port vs helion originals and torch.compile", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.text(0.01, 0.005, caption(meta), fontsize=6, color="0.3")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return _save(fig, out_stem)


def draw_bandwidth(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    d = df[(df["op"] == "silu_and_mul") & (df["l2"] == "warm") & (df["M"] >= 1536)]
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    wide = d.pivot_table(index=["M", "N", "layout", "weighted"], columns="impl", values="tbps").reset_index()
    wide = wide.sort_values(["layout", "N", "M"]).reset_index(drop=True)
    x = np.arange(len(wide))
    for impl in ("triton", "helion", "torch_compile"):
        if impl in wide:
            ax.plot(x, wide[impl], marker="o", ms=3, lw=1, color=COLORS[impl], label=impl)
    for key, style in (("ceiling_49152x3072", "--"), ("ceiling_49152x768", ":")):
        if key in meta:
            ax.axhline(meta[key]["tbps"], color="black", ls=style, lw=1, label=f"streaming ceiling {key[8:]} ({meta[key]['tbps']:.2f} TB/s)")
    ax.axhline(4.8, color="red", ls="-.", lw=0.8, label="H200 datasheet 4.8 TB/s")
    ax.set_xticks(x, [_label(r) for r in wide.itertuples()], rotation=90, fontsize=6)
    ax.set_ylabel("effective bandwidth (TB/s)")
    ax.set_title("silu_and_mul prefill shapes: bytes moved / median time", fontsize=10)
    ax.legend(fontsize=6, loc="lower right")
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
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def draw_all(data_dir: Path, fig_dir: Path) -> list[Path]:
    written = []
    for csv_path in sorted(data_dir.glob("bench_*.csv")):
        if csv_path.stem.endswith(("_nvfp4", "_tune")):
            continue
        gpu = csv_path.stem.removeprefix("bench_")
        df, meta = load_bench(csv_path)
        written += draw_speedup(df, meta, fig_dir / f"speedup_{gpu}")
        written += draw_bandwidth(df, meta, fig_dir / f"bandwidth_{gpu}")
        nv = csv_path.with_name(csv_path.stem + "_nvfp4.csv")
        if nv.exists():
            written += draw_nvfp4(pd.read_csv(nv), meta, fig_dir / f"nvfp4_{gpu}")
    return written

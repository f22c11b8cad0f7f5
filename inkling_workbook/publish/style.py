"""The look every figure and table shares, drawn only from the records in ``data/``: the implementations'
colours, labels and short names, captions and provenance footers, the PNG/SVG writer (:data:`DPI`;
the notebooks set ``style.DPI`` lower), and a sweep's record read back."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from inkling_workbook.measure.provenance import companion  # noqa: E402

COLORS = {
    "triton": "#2CA02C",
    "triton_pdl": "#17BECF",
    "helion_sm90": "#1F77B4",
    "helion_fixed": "#9ECAE1",
    "compile_static": "#FF7F0E",
    "compile_dynamic_m": "#FDAE6B",
    "compile_static_max_autotune": "#D62728",
    "torch_eager": "#8C8C8C",
    "fused": "#2CA02C",
    "fused_no_pdl": "#98DF8A",
    "unfused": "#1F77B4",
    "torch_compile_static": "#FF7F0E",
    "torch_compile_static_max_autotune": "#D62728",
}


#: What each implementation is called in tables and legends: its configuration, always.
LABELS = {
    "triton": "Triton port (PDL off)",
    "triton_pdl": "Triton port (PDL on)",
    "helion_sm90": "helion 1.4 (production sm_90 table)",
    "helion_fixed": "helion 1.4 (fixed 1x256 tile, 4 warps)",
    "compile_static": "torch.compile (dynamic=False)",
    "compile_dynamic_m": "torch.compile (M dynamic)",
    "compile_static_max_autotune": "torch.compile (dynamic=False, max-autotune-no-cudagraphs)",
    "compile_static_pdl": "torch.compile (dynamic=False, inductor PDL on)",
    "torch_eager": "torch eager",
    "helion_best": "helion 1.4, the faster of its two configs on each shape",
    "compile_best": "torch.compile, the fastest of static, M-dynamic and max-autotune (where timed) on each shape "
    "(same run)",
    "fused": "fused Triton kernel",
    "fused_no_pdl": "fused Triton kernel, PDL off",
    "unfused": "silu_and_mul + quant (Triton, two kernels)",
    "torch_compile_static": "torch.compile (dynamic=False) of the reference",
    "torch_compile_static_max_autotune": "torch.compile (dynamic=False, max-autotune-no-cudagraphs) of the reference",
}


SHORT = {
    "triton": "port",
    "triton_pdl": "port+PDL",
    "helion_sm90": "helion sm90 table",
    "helion_fixed": "helion fixed tile",
    "compile_static": "compile static",
    "compile_dynamic_m": "compile M-dyn",
    "compile_static_max_autotune": "compile max-autotune",
    "torch_eager": "eager",
    "helion_best": "best helion",
    "compile_best": "best compile",
}


BASELINES = ("helion_sm90", "helion_fixed", "compile_static", "compile_dynamic_m", "compile_static_max_autotune",
             "torch_eager")  # fmt: skip


HEADLINE = ("helion_sm90", "compile_static")


#: per shape, the fastest version of one baseline: its strongest version in this run (torch.compile:
#: ``measure.pairing.COMPILE_FAMILIES["silu_and_mul"]``, max-autotune where the sweep timed it)
BEST = {
    "helion_best": ("helion_sm90", "helion_fixed"),
    "compile_best": ("compile_static", "compile_dynamic_m", "compile_static_max_autotune"),
}
#: the same for the fused ops' torch.compile columns (``pairing.COMPILE_FAMILIES``)
COMPILE_BEST = {
    "nvfp4": ("compile_static", "compile_static_max_autotune"),
    "fp8": ("torch_compile_static", "torch_compile_static_max_autotune"),
}


def fastest(rows, impls):
    """The row of ``rows`` (a DataFrame indexed by impl, one shape) with the lowest median among
    ``impls`` present: the strongest version of a baseline on that shape."""
    have = [i for i in impls if i in rows.index]
    return rows.loc[have].median_us.idxmin()


KEYS = ["group", "M", "N", "layout", "weighted"]


DPI = 100  # figures/ PNGs at screen resolution (SVGs beside them); notebooks draw at 90-100 so the text stays legible


def load_bench(csv_path: str | Path) -> tuple[pd.DataFrame, dict]:
    csv_path = Path(csv_path)
    meta_path = companion(csv_path, "meta")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return pd.read_csv(csv_path), meta


def passes_text(meta: dict) -> str:
    """How many interleaved passes the recorded sweep made, from its own provenance (a sweep made
    before two passes became the rule at M > 16 says one there)."""
    t = meta.get("timing", {})
    decode, other = t.get("decode_passes", 3), t.get("other_passes", 1)
    spread = "the replays' range" if "spread" not in t else "the replays' quartiles"
    one = f"; the spread of a single pass is {spread}" if other == 1 else ""
    return f"passes interleaved across implementations ({decode} at decode, {other} otherwise{one})"


#: the provenance footer's size: legible at the README's ~800 px (figures are 7-7.5 in at DPI 100)
FOOTER_PT = 8


#: colour-blind-safe (Okabe-Ito), all with contrast on white; one colour per N
N_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00")


def _ncolor(i: int):
    return N_COLORS[i % len(N_COLORS)]


def caption(meta: dict, l2: str = "warm and cold", width: int = 125) -> str:
    """Device, versions, date and method, wrapped to fit under a figure."""
    import textwrap

    return "\n".join(textwrap.wrap(_caption(meta, l2), width))


def _footer(fig, meta: dict, l2: str = "warm and cold") -> float:
    """Write the provenance footer at the bottom of ``fig``; returns the height it takes (figure
    fraction), for the layout above it."""
    text = caption(meta, l2, width=int(fig.get_figwidth() * 72 / (FOOTER_PT * 0.56)))
    fig.text(0.01, 0.005, text, fontsize=FOOTER_PT, color="0.25", va="bottom")
    return (text.count("\n") + 1) * FOOTER_PT * 1.25 / 72 / fig.get_figheight() + 0.01


def _caption(meta: dict, l2: str) -> str:
    return (
        f"{meta.get('device', '?')}, driver {meta.get('driver', '?')}; torch {meta.get('torch', '?')}, "
        f"triton {meta.get('triton', '?')}, helion {meta.get('helion', '?')}; {meta.get('date_utc', '?')[:10]}; "
        f"CUDA-graph replay of >= 100 calls and >= 1 ms, median of 10 replays a pass, {passes_text(meta)}; "
        f"{l2} L2"
    )


def save_png(fig, path: str | Path, dpi: int | None = None) -> Path:
    """``fig`` as a PNG at ``dpi`` (default :data:`DPI`), its colours reduced to a 256-entry
    palette: line plots and heat maps look the same and the file (and a notebook embedding it)
    is about a third of matplotlib's RGBA PNG. Deterministic: the same figure gives the same bytes."""
    import io

    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or DPI)
    Image.open(buf).convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)
    return path


def _save(fig, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    save_png(fig, paths[0])
    with plt.rc_context({"svg.hashsalt": "inkling-kernels"}):  # stable ids: regenerating changes no byte
        fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def versions_text(meta: dict) -> str:
    """GPU, driver and versions of a record, one line (for titles and footers)."""
    return (
        f"{meta.get('device', '?')}, driver {meta.get('driver', '?')}; torch {meta.get('torch', '?')}, "
        f"triton {meta.get('triton', '?')}, helion {meta.get('helion', '?')}; {meta.get('date_utc', '?')[:10]}"
    )


def local_versions_text() -> str:
    """What this process runs on: the backend and versions, for figures computed live."""
    import platform

    import torch
    import triton

    where = (
        torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()}), Triton interpreter"
    )
    return f"{where}; torch {torch.__version__}, triton {triton.__version__}"

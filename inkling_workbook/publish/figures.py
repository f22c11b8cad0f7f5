"""Every figure of ``figures/`` (``python -m inkling_workbook figures``), from the records in
``data/``: each family module draws its own."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402

from inkling_workbook.measure.provenance import companion  # noqa: E402
from inkling_workbook.publish import fp8_figures, moe_figures, nvfp4_figures, speedup, style, ulp_figures  # noqa: E402


def draw_all(data_dir: Path, fig_dir: Path) -> list[Path]:
    written = []
    for csv_path in sorted(data_dir.glob("bench_*.csv")):
        gpu = csv_path.stem.removeprefix("bench_")
        if gpu.startswith("quick_"):  # notebook 06's re-measurements, drawn there
            continue
        df, meta = style.load_bench(csv_path)
        written += speedup.draw_speedup(df, meta, fig_dir / f"speedup_{gpu}")
        written += speedup.draw_bandwidth(df, meta, fig_dir / f"bandwidth_{gpu}")
        written += speedup.draw_decode(df, meta, fig_dir / f"decode_{gpu}")
        nv = companion(csv_path, "nvfp4")
        if nv.exists():
            written += nvfp4_figures.draw_nvfp4(pd.read_csv(nv), meta, fig_dir / f"nvfp4_{gpu}")
            ptx_path = data_dir / f"ptx_{gpu}.json"
            ptx = json.loads(ptx_path.read_text()) if ptx_path.exists() else None
            ipe, src = nvfp4_figures.compiled_nvfp4_instr_per_element(data_dir)
            written += nvfp4_figures.draw_nvfp4_floors(
                pd.read_csv(nv), meta, ptx, fig_dir / f"nvfp4_floors_{gpu}", ipe, src
            )
        fp8 = companion(csv_path, "fp8")
        if fp8.exists():  # an FP8 sweep run on its own (tools/fp8_publish.py) has its own record
            own = fp8.with_suffix(".json")
            fp8_meta = json.loads(own.read_text()) if own.exists() else meta
            written += fp8_figures.draw_fp8(pd.read_csv(fp8), fp8_meta, fig_dir / f"fp8_{gpu}")
        tune = companion(csv_path, "tune")
        if tune.exists():  # the tile sweep of a run, against the current launch heuristic
            written += speedup.draw_tile_sweep(pd.read_csv(tune), meta, fig_dir / f"tile_sweep_{gpu}")
    for moe in sorted(data_dir.glob("moe_layer_*.json")):  # notebook 08's record (`wb moe-layer`)
        gpu = moe.stem.removeprefix("moe_layer_")
        if gpu != "cpu":
            doc = json.loads(moe.read_text())
            written += moe_figures.draw_moe_layer(doc, fig_dir / f"moe_layer_{gpu}")
            written += moe_figures.draw_moe_error(doc, fig_dir / f"moe_error_{gpu}")
    if written:  # the diagrams and the two live (CPU, interpreter) measurements beside the records
        written += nvfp4_figures.draw_swizzle(fig_dir / "swizzle_128x4")
        written += ulp_figures.draw_ulp_histogram(ulp_figures.ulp_port_vs_eager(), fig_dir / "ulp_port_vs_eager_cpu")
        written += nvfp4_figures.draw_nvfp4_error(nvfp4_figures.nvfp4_error_in_steps(), fig_dir / "nvfp4_error_cpu")
    return written

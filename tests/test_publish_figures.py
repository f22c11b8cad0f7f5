"""Issue 11's figures, drawn on the CPU (Agg) from the recorded data: each names the GPU in its
title, and the floors and ceilings it draws are the record's numbers."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inkling_workbook.publish import nvfp4_figures, speedup, style, ulp_figures

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def captured(monkeypatch):
    figs = []

    def keep(fig, stem):
        figs.append(fig)
        return [stem.with_suffix(".png")]

    monkeypatch.setattr(style, "_save", keep)
    return figs


@pytest.fixture(scope="module")
def record():
    return style.load_bench(DATA / "bench_h200.csv")


def _titles(fig) -> str:
    return " ".join([fig._suptitle.get_text() if fig._suptitle else ""] + [ax.get_title() for ax in fig.axes])


def _hlines(ax) -> list[float]:
    return [ln.get_ydata()[0] for ln in ax.get_lines() if len(set(np.asarray(ln.get_ydata(), float))) == 1]


def test_decode_names_the_gpu_and_draws_the_empty_kernel_floor(record, captured, tmp_path):
    df, meta = record
    speedup.draw_decode(df, meta, tmp_path / "d")
    fig = captured[0]
    assert meta["device"] in _titles(fig)
    assert all(meta["empty_kernel_us"] in _hlines(ax) for ax in fig.axes)


def test_bandwidth_ceilings_spread_and_l2_region(record, captured, tmp_path):
    df, meta = record
    speedup.draw_bandwidth(df, meta, tmp_path / "b")
    fig = captured[0]
    assert meta["device"] in _titles(fig)
    lines = _hlines(fig.axes[0])
    for n in (768, 3072):
        assert meta[f"ceiling_49152x{n}"]["tbps"] in lines
    rows = df[(df.impl == "triton") & (df.N == 3072) & (df.op == "silu_and_mul")]
    m_l2 = speedup.l2_resident_max_m(rows, meta)
    assert m_l2 == pytest.approx(meta["l2_bytes"] / (6 * 3072), rel=0.01)  # 6N bytes a row
    panel = next(ax for ax in fig.axes if ax.get_title().endswith("N=3072"))  # small multiples: one row per N
    right = [p.get_x() + p.get_width() if hasattr(p, "get_width") else p.get_xy()[:, 0].max() for p in panel.patches]
    assert any(np.isclose(r, m_l2) for r in right), right
    lo, hi = speedup.bandwidth_spread(rows)
    assert (lo <= rows.tbps + 1e-9).all() and (rows.tbps <= hi + 1e-9).all()


def test_nvfp4_floors_are_the_records(record, captured, tmp_path):
    _, meta = record
    nv = pd.read_csv(DATA / "nvfp4_bench_h200.csv")
    nvfp4_figures.draw_nvfp4_floors(nv, meta, None, tmp_path / "n")  # no instruction count: said, not invented
    ax = captured[0].axes[0]
    assert meta["device"] in ax.get_title() and "not drawn" in ax.get_title()
    floors = {tuple(ln.get_ydata()) for ln in ax.get_lines() if ln.get_linestyle() == "--"}
    fused = nv[nv.impl == "fused"].sort_values(["N", "M"])
    assert {tuple(fused[fused.N == n].fused_floor_us) for n in fused.N.unique()} == floors
    # the instruction count from the sm_90a compile record, one per N, never parsed from prose
    ipe, src = nvfp4_figures.compiled_nvfp4_instr_per_element(DATA)
    assert set(ipe) == {1536, 3072} and "compile_sm90a.json" in src
    rec = json.loads((DATA / "compile_sm90a.json").read_text())["cases"]
    assert ipe[3072] == rec["silu_and_mul_nvfp4_quant nil swizzled 8 experts 8192x3072"]["sass_per_element"]
    nvfp4_figures.draw_nvfp4_floors(nv, meta, None, tmp_path / "n2", ipe, src)
    ax = captured[1].axes[0]
    issue = [ln.get_ydata() for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    big = fused[(fused.M == 49152) & (fused.N == 3072)].iloc[0]
    want = ipe[3072] * 49152 * 3072 / (meta["sm_count"] * 128 * nvfp4_figures.recorded_clock_mhz(meta))
    assert any(np.isclose(np.max(y), want) for y in issue) and want < big.median_us


def test_issue_floor_model():
    # 1 instruction an element, 132 SMs x 4 warps x 32 threads a clock at 1000 MHz (clocks a us)
    assert nvfp4_figures.issue_floor_us(1.0, 132 * 128 * 1000, 132, 1000.0) == pytest.approx(1.0)
    assert nvfp4_figures.nvfp4_kernel_record({"kernels": {"silu_and_mul_interleaved_kernel": {}}}) is None


def test_swizzle_corners():
    off = nvfp4_figures.swizzle_map()
    assert off[0, 0] == 0 and off[0, 3] == 3 and off[32, 0] == 4 and off[1, 0] == 16 and off[127, 3] == 511
    assert sorted(off.flatten().tolist()) == list(range(512))


def test_live_figures_small(captured, tmp_path):
    ulps = ulp_figures.ulp_port_vs_eager(M=8, N=64)
    assert set(ulps) == {"interleaved", "non-interleaved"} and max(int(v.max()) for v in ulps.values()) <= 1
    ulp_figures.draw_ulp_histogram(ulps, tmp_path / "u", where="test")
    err = nvfp4_figures.nvfp4_error_in_steps(M=4, N=64)
    bound = np.where(err["scaled"] < 2, 0.25, np.where(err["scaled"] < 4, 0.5, 1.0))
    assert (err["error"][err["scaled"] <= 6] <= bound[err["scaled"] <= 6] + 1e-6).all()
    nvfp4_figures.draw_nvfp4_error(err, tmp_path / "e", where="test")
    assert len(captured) == 2


def test_recorded_lookup_finds_the_nearest_recorded_shape_and_names_what_is_missing():
    """Notebook 06's exploration cell on a CPU: the recorded warm timings at the nearest M of the
    same N, layout and weights; unknown names and unrecorded shapes refused by name."""
    import pandas as pd
    import pytest

    from inkling_workbook.publish import speedup

    rows = []
    for M in (1, 16, 4096, 49152):
        for impl, t in (("triton", 1.0 + M / 1000), ("compile_static", 1.2 + M / 900)):
            for l2 in ("warm", "cold"):
                rows.append({"op": "silu_and_mul", "M": M, "N": 1536, "layout": "nil", "weighted": False,
                             "impl": impl, "config": impl, "l2": l2, "median_us": t + (l2 == "cold"),
                             "lo_us": t, "hi_us": t, "tbps": 1.0})  # fmt: skip
    df = pd.DataFrame(rows)
    got = speedup.recorded_lookup(df, 3000, 1536, False, False, ["triton"])
    assert len(got) == 1 and got.M[0] == 4096 and got.source[0] == "recorded, nearest M = 4096"
    assert got.median_us[0] == 1.0 + 4096 / 1000  # the warm row, not the cold one
    both = speedup.recorded_lookup(df, 16, 1536, False, False)
    assert set(both.impl) == {"triton", "compile_static"} and set(both.source) == {"recorded"}
    with pytest.raises(ValueError, match="impls"):
        speedup.recorded_lookup(df, 16, 1536, False, False, ["helion"])
    with pytest.raises(ValueError, match="not recorded"):
        speedup.recorded_lookup(df, 16, 3072, True, False)

"""The MoE layer of notebook 08 (``inkling_workbook.moe.layer``): routing and grouping invariants,
fused == unfused bit for bit inside the layer, each variant's error against the float64 layer
under the bound its formats give, the FP8 GEMM2 against its dequantized operands, the CLI's
record on a CPU dry run; on a GPU, the ``torch._scaled_mm`` and ``torch._grouped_mm`` paths."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import gpu_only

from inkling_workbook.moe import layer as ml
from inkling_workbook.moe import record as moe_record
from inkling_workbook.moe import tables as moe_tables

SHAPE = ml.CPU_SHAPE  # E=4, k=2, H=256, N=256
M = 8


@pytest.fixture(scope="module")
def layer():
    return ml.make_layer(**SHAPE, device="cpu", seed=3)


@pytest.fixture(scope="module")
def tokens():
    return ml.make_tokens(M, SHAPE["H"], "cpu", seed=11)


def test_routing_is_softmax_topk_renormalized(layer, tokens):
    ids, w = ml.route(tokens, layer)
    probs = torch.softmax((tokens @ layer.wr).float(), dim=-1)
    assert ids.shape == (M, SHAPE["k"]) and w.dtype == torch.float32
    # the chosen experts are the k most probable, distinct, and their weights sum to 1
    kth = torch.gather(probs, 1, ids).min(dim=1).values
    others = probs.masked_fill(torch.zeros_like(probs, dtype=torch.bool).scatter_(1, ids, True), -1).max(dim=1).values
    assert bool((kth >= others).all())
    assert all(len(set(r.tolist())) == SHAPE["k"] for r in ids)
    torch.testing.assert_close(w.sum(dim=1), torch.ones(M), rtol=0, atol=1e-6)


def test_contiguous_and_masked_layouts_hold_the_same_rows(layer, tokens):
    ids, _ = ml.route(tokens, layer)
    # add a routing where one expert gets nothing, to exercise empty segments
    ids_skew = torch.tensor([[0, 1]] * 5 + [[1, 3]] * 3)
    for ids_ in (ids, ids_skew):
        plan = ml.make_plan(ids_, layer.E)
        g = ml.group(ids_, layer.E)
        xs = ml.dispatch_contiguous(tokens, g, plan, layer.k)
        xm = ml.dispatch_masked(tokens, g, plan, layer.k)
        counts = torch.bincount(ids_.flatten(), minlength=layer.E)
        assert g.masked_m.tolist() == counts.tolist() == plan.counts
        assert (
            g.offsets.dtype == torch.int32 and g.offsets.tolist() == torch.cumsum(torch.tensor(plan.padded), 0).tolist()
        )
        assert all(p % ml.ALIGN == 0 for p in plan.padded) and plan.T % ml.ALIGN == 0
        tok = torch.arange(M).repeat_interleave(layer.k)
        assert torch.equal(xs[g.row], tokens[tok]) and torch.equal(xm[g.expert, g.rank], tokens[tok])
        assert len(set(g.row.tolist())) == M * layer.k  # no two assignments share a row
        for e in range(layer.E):
            c, s = plan.counts[e], plan.starts[e]
            assert torch.equal(xs[s : s + c], xm[e, :c])  # the same rows, the same order
            assert not xs[s + c : s + plan.padded[e]].any() and not xm[e, c:].any()  # padding: zero rows
            # each expert's rows keep the token order (a stable sort)
            assert g.rank[g.expert == e].tolist() == list(range(c))


@pytest.fixture(scope="module")
def accuracy_rows(layer, tokens):
    return ml.accuracy(tokens, layer)


def test_fused_equals_unfused_bitwise_in_the_layer(layer, tokens, accuracy_rows):
    ids, _ = ml.route(tokens, layer)
    plan = ml.make_plan(ids, layer.E)
    g = ml.group(ids, layer.E)
    for layout in ml.LAYOUTS:
        xs = (ml.dispatch_masked if layout == "masked" else ml.dispatch_contiguous)(tokens, g, plan, layer.k)
        gateup = ml.gemm1(xs, layer, g, plan, layout)
        res = ml.fused_equals_unfused(gateup, g.masked_m if layout == "masked" else None)
        assert res["equal"], (layout, res)
        # masked: the rows present; contiguous: every row of q, the "cublas" layout's padding to 16 rows included
        rows = sum(plan.counts) if layout == "masked" else ml._round_up(sum(plan.padded), 16)
        assert res["q_bytes_compared"] == rows * layer.N
    # and the layer's outputs (poisoned first), bit for bit
    assert all(r["layer_fused_equals_unfused"] for r in accuracy_rows)


def test_each_variant_within_its_format_bound(accuracy_rows):
    assert len(accuracy_rows) == len(ml.LAYOUTS) * len(ml.VARIANTS)
    for r in accuracy_rows:
        assert r["rel_err"] <= r["bound"] == ml.error_bound(r["variant"]), r
    errs = {(r["layout"], r["variant"]): r["rel_err"] for r in accuracy_rows}
    for layout in ml.LAYOUTS:
        # the layouts hold the same rows: the same errors
        assert errs[(layout, "bf16")] == pytest.approx(errs[("contiguous", "bf16")], rel=1e-6)
        # FP8 really quantized: its error is above bf16's roundoff and above the bf16 layer's
        assert errs[(layout, "fp8_fused")] > max(ml.U_BF16, errs[(layout, "bf16")])


def test_gemm2_and_combine_within_two_bf16_roundings_of_their_operands(layer, tokens, accuracy_rows):
    """Against the float64 tail on the layer's own operands the layer is off by GEMM2's and the
    combine's bf16 roundings only; a GEMM2 reading its weight scales at another stride (the 8.5%
    the H200 showed at K / 128 = 2) is far outside that bound."""
    assert all(r["tail_rel_err"] <= r["tail_bound"] == ml.TAIL_BOUND for r in accuracy_rows)
    ids, w = ml.route(tokens, layer)
    plan = ml.make_plan(ids, layer.E)
    ref = ml.tail_reference(tokens, ids, w, layer, plan, "contiguous", "fp8_fused")
    misread = ml.Layer(layer.wr, layer.w1, layer.w2, layer.w2_q, layer.w2_s.flip(-1).contiguous(), layer.k)
    wrong = ml.experts(tokens, ids, w, misread, plan, "contiguous", "fp8_fused")
    assert ml.rel_error(wrong, ref) > 4 * ml.TAIL_BOUND


def test_fp8_gemm2_against_its_dequantized_operands(layer, tokens):
    """With the activation and W2 dequantized exactly, the FP8 GEMM2 is an fp32 product rounded
    to bf16 once: within bf16's roundoff of the float64 product of the same values."""
    gen = torch.Generator().manual_seed(5)
    gateup = torch.randn((12, 2 * layer.N), generator=gen).to(torch.bfloat16)
    q, s = ml.activation(gateup, "fp8_fused")
    y = ml.fp8_blockwise_mm(q, s.t().contiguous().t(), layer.w2_q[1], layer.w2_s[1])
    a64 = (q.double().reshape(q.shape[0], -1, ml.GROUP) * s.double()[:, :, None]).reshape(q.shape)
    ref = a64 @ ml.dequantize_weight_blockwise(layer.w2_q[1], layer.w2_s[1]).double().t()
    assert ml.rel_error(y, ref) <= ml.U_BF16


def test_weight_quantization_blockwise(layer):
    deq = ml.dequantize_weight_blockwise(layer.w2_q, layer.w2_s)
    assert layer.w2_s.shape == (layer.E, layer.H // 128, layer.N // 128)
    err = (deq - layer.w2.float()).abs() / layer.w2_s.repeat_interleave(128, 1).repeat_interleave(128, 2)
    # in units of the block scale, e4m3 rounds to within half its spacing (<= 16 below 448 = 1.75 * 2**8),
    # plus the fp32 roundings of w / s and of this check's own division (values <= 448)
    assert float(err.max()) <= 16.0 + 448 * 2.0**-22
    assert ml.rel_error(deq, layer.w2.double()) <= ml.U_E4M3


def test_grouped_gemm_equals_the_per_expert_loop(layer, tokens):
    ok, why = ml.grouped_mm_ok("cpu")
    if not ok:
        pytest.skip(f"torch._grouped_mm not usable on this CPU build: {why}")
    ids, _ = ml.route(tokens, layer)
    plan = ml.make_plan(ids, layer.E)
    g = ml.group(ids, layer.E)
    xs = ml.dispatch_contiguous(tokens, g, plan, layer.k)
    got = ml.gemm1(xs, layer, g, plan, "contiguous")
    segments = enumerate(zip(plan.starts, plan.padded, strict=True))
    want = torch.cat([xs[s : s + n].float() @ layer.w1[e].float().t() for e, (s, n) in segments])
    assert ml.rel_error(got, want.double()) <= ml.U_BF16


def test_bad_arguments_name_the_argument(layer, tokens):
    with pytest.raises(ValueError, match="layout"):
        ml.moe_layer(tokens, layer, layout="ragged")
    with pytest.raises(ValueError, match="variant"):
        ml.moe_layer(tokens, layer, variant="int8")
    with pytest.raises(ValueError, match="N must be"):
        ml.make_layer(4, 2, 256, 200)
    with pytest.raises(ValueError, match="k must be"):
        ml.make_layer(4, 5, 256, 256)


def test_cli_cpu_smoke_writes_the_record(tmp_path, capsys):
    from inkling_workbook import cli

    rc = cli.main(["moe-layer", "--cpu-smoke", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0, capsys.readouterr().out
    doc = json.loads((tmp_path / "data" / "moe_layer_cpu.json").read_text())
    keys = "provenance shape Ms grouped_mm gemm2_fp8 topk_weights timing accuracy bitwise rows compile errors"
    for key in (*keys.split(), "all_bitwise_equal", "all_within_bound", "elapsed_s"):
        assert key in doc, key
    assert doc["shape"] == ml.CPU_SHAPE and doc["errors"] == [] and doc["rows"] == []
    assert [(p["M"], sum(p["counts"])) for p in doc["plans"]] == [(8, 8 * ml.CPU_SHAPE["k"])]
    assert doc["all_bitwise_equal"] and doc["all_within_bound"]
    assert {(a["layout"], a["variant"]) for a in doc["accuracy"]} == {(lo, v) for lo in ml.LAYOUTS for v in ml.VARIANTS}
    assert all(b["equal"] and b["layer_output_equal"] for b in doc["bitwise"])
    assert "git_commit" in doc["provenance"] and "stand-in" in doc["gemm2_fp8"]


# ---- GPU: the cuBLAS paths ---------------------------------------------------------------------


@gpu_only
def test_gpu_paths_available_on_sm90():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("blockwise FP8 torch._scaled_mm and torch._grouped_mm need sm_90+")
    assert ml.scaled_mm_available("cuda")
    ok, why = ml.grouped_mm_ok("cuda")
    assert ok, why


@gpu_only
@pytest.mark.parametrize("N", [256, 1024])
@pytest.mark.parametrize("rows", [4, 12, 256])
def test_gpu_scaled_mm_equals_the_standin(rows, N):
    if not ml.scaled_mm_available("cuda"):
        pytest.skip("no blockwise FP8 torch._scaled_mm on this GPU")
    # N = 256: K / 128 = 2 weight-scale columns, not a multiple of 4 (torch 2.11 took the unpadded
    # stride and gave results 8.5% off the stand-in on the H200, 2026-12-02): the op gives the right
    # product or a ValueError, never a wrong product
    layer = ml.make_layer(2, 1, 512, N, device="cuda", seed=4)
    gen = torch.Generator().manual_seed(rows)
    gateup = torch.randn((rows, 2 * N), generator=gen).to(torch.bfloat16).cuda()
    q, s = ml.activation(gateup, "fp8_fused")
    want = ml.scaled_mm_standin(q, s, layer.w2_q[0], layer.w2_s[0])
    if N % 512:
        try:
            got = ml.fp8_blockwise_mm(q, s, layer.w2_q[0], layer.w2_s[0])
        except ValueError as e:
            assert "multiple of 512" in str(e) and torch.__version__ in str(e)
            return
    else:
        got = ml.fp8_blockwise_mm(q, s, layer.w2_q[0], layer.w2_s[0])
    assert ml.rel_error(got, want.double()) <= 2 * ml.U_BF16  # two bf16 roundings of one fp32 product


@gpu_only
@pytest.mark.parametrize("variant", ["bf16", "fp8_fused"])
def test_gpu_layer_compiles_fullgraph_and_captures(variant):
    """The layer under ``torch.compile(fullgraph=True, dynamic=True)`` (Inductor) on the GPU, then
    captured in a CUDA graph: within the variant's bound of the float64 layer, and the replay
    equal to the compiled call."""
    layer = ml.make_layer(8, 2, 1024, 512, device="cuda", seed=6)
    x = ml.make_tokens(64, 1024, "cuda", seed=5)
    ids, w = ml.route(x, layer)
    plan = ml.make_plan(ids, layer.E)
    ml.experts(x, ids, w, layer, plan, "contiguous", variant)  # eager first: the device probes run once
    torch._dynamo.reset()

    def f(x):
        ids_, w_ = ml.route(x, layer)
        return ml.experts(x, ids_, w_, layer, plan, "contiguous", variant)

    fn = torch.compile(f, fullgraph=True, dynamic=True)
    got = fn(x)
    assert ml.rel_error(got, ml.reference_layer(x, layer, ids)) <= ml.error_bound(variant)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(x)  # warm on the side stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), got.view(torch.int16))


@gpu_only
def test_gpu_layer_bitwise_and_within_bounds():
    layer = ml.make_layer(8, 2, 1024, 512, device="cuda", seed=6)
    x = ml.make_tokens(100, 1024, "cuda", seed=2)
    rows = ml.accuracy(x, layer)
    for r in rows:
        assert r["rel_err"] <= r["bound"], r
        assert r["tail_rel_err"] <= r["tail_bound"], r  # cuBLAS against the float64 tail
        assert r["layer_fused_equals_unfused"], r


def _synthetic_record(doc: dict) -> dict:
    """The CPU dry run's record with timing rows made up here (layer 100 us x variant factor,
    activation 10 us; the compiled layers beside them), to exercise the notebook's tables and
    figures before an H200 record exists."""
    factor = {"bf16": 1.0, "fp8_unfused": 1.05, "fp8_fused": 0.95}
    rows = []
    for layout in doc["layouts"]:
        for v in doc["variants"]:
            stages = (("layer", 100.0 * factor[v]), ("activation", 10.0), ("compiled", 90.0 * factor[v]),
                      ("gemm2", 30.0 * factor[v]))  # fmt: skip
            for kind, us in stages:
                if kind == "compiled" and (layout != "contiguous" or v == "fp8_unfused"):
                    continue
                rows.append({"M": 8, "layout": layout, "kind": kind, "variant": v, "median_us": us,
                             "lo_us": us * 0.99, "hi_us": us * 1.01})  # fmt: skip
        rows.append({"M": 8, "layout": layout, "kind": "gemm1", "variant": "bf16", "median_us": 40.0,
                     "lo_us": 39.6, "hi_us": 40.4})  # fmt: skip
    return {**doc, "rows": rows}


def _synthetic_captures() -> dict:
    """A capture-variance record (3 captures a variant): at M = 8 contiguous the fused and unfused
    capture medians overlap (a tie), masked they do not (fused faster by 2.0-4.0 us)."""
    med = {("contiguous", "fp8_fused"): (95.0, 96.0, 97.0), ("contiguous", "fp8_unfused"): (96.5, 98.0, 99.0),
           ("masked", "fp8_fused"): (95.0, 95.5, 96.0), ("masked", "fp8_unfused"): (98.0, 98.5, 99.0)}  # fmt: skip
    rows = [{"M": 8, "layout": lo, "variant": v, "capture": c, "median_us": m, "lo_us": m - 0.1, "hi_us": m + 0.1}
            for (lo, v), ms in med.items() for c, m in enumerate(ms)]  # fmt: skip
    return {"captures": 3, "rows": rows}


def test_tables_conclusions_and_figures_from_a_record(tmp_path):
    from inkling_workbook.publish import moe_figures

    moe_record.run(tmp_path, Ms=(8,), device="cpu", progress=False)
    doc = _synthetic_record(moe_tables.load_record(tmp_path / "data" / "moe_layer_cpu.json"))
    doc["compile"] = [{"M": 8, "layout": "contiguous", "rows": 20, "variant": v, "ok": True, "rel_err": 0.01,
                       "mode": "torch.compile(fullgraph=True, dynamic=True)", "equal_to_eager": False,
                       "compile_s": 1.0} for v in ("bf16", "fp8_fused")]  # fmt: skip
    table = moe_tables.timing_table(doc)
    assert len(table) == len(ml.LAYOUTS)
    first = table.iloc[0]
    assert first["fused / unfused"] == f"{0.95 / 1.05:.3f}" and first["fp8_fused act share"] == f"{10 / 95:.1%}"
    assert first["fp8 fused / bf16"] == "0.950"  # ranges 94.05-95.95 and 99-101: no tie
    assert table.iloc[1]["compiled bf16 us"] == "-"  # no compiled masked layer: "-", never NaN
    lines = moe_tables.conclusions(doc)
    assert any("fusion saves" in s and f"{1 - 0.95 / 1.05:+.1%}" in s for s in lines), lines
    assert any("faster than the unfused one at every M" in s for s in lines), lines
    assert any("FP8 wins, 5.0% less time" in s for s in lines) and any("2/2 cases" in s for s in lines)
    compiled = [
        s for s in lines if s.startswith("compiled (torch.compile(fullgraph=True, dynamic=True)) against eager")
    ]
    assert len(compiled) == 1 and "contiguous M=8 bf16: 10.0% less time" in compiled[0], lines
    stages = moe_tables.stage_table(doc)
    assert len(stages) == len(ml.LAYOUTS) * len(ml.VARIANTS)
    fused = stages[(stages.layout == "contiguous") & (stages.variant == "fp8_fused")].iloc[0]
    assert fused["rest us"] == round(95.0 - 40.0 - 10.0 - 30.0 * 0.95, 1)
    assert moe_tables.accuracy_table(doc).shape == (len(ml.LAYOUTS), len(ml.VARIANTS))
    bounds = moe_tables.accuracy_bounds(doc)
    assert list(bounds.variant) == list(ml.VARIANTS) and (bounds["tail bound"] == f"{ml.TAIL_BOUND:.2%}").all()
    # fused vs unfused: the layer's saving beside the stages alone; masked, the rows the fused op skips
    fusion = moe_tables.fusion_table(doc).set_index("layout")
    plan = doc["plans"][0]
    assert fusion.loc["contiguous", "rows fused"] == fusion.loc["contiguous", "rows unfused"] == plan["contiguous_rows"]
    assert fusion.loc["masked", "rows fused"] == 8 * SHAPE["k"]
    assert fusion.loc["masked", "rows unfused"] == SHAPE["E"] * plan["masked_T"]
    assert (
        fusion.loc["contiguous", "layer saved us"] == 10.0 and fusion.loc["contiguous", "one capture"] == "fused faster"
    )
    assert fusion.loc["contiguous", "activation alone saved us"] == 0.0
    assert fusion.loc["contiguous", "GEMM2 alone, unfused - fused us"] == round(30.0 * 0.10, 1)
    fp8 = moe_tables.fp8_table(doc).set_index("layout")
    assert fp8.loc["contiguous", "verdict"] == "FP8 wins, 5.0% less time"
    assert fp8.loc["contiguous", "GEMM2: fp8 - bf16 us"] == round(30.0 * 0.95 - 30.0, 1)
    assert fp8.loc["contiguous", "rest: fp8 - bf16 us"] == round(-5.0 - (30.0 * 0.95 - 30.0), 1)
    comp = moe_tables.compile_table(doc)
    assert list(comp["compiled / eager"]) == [0.9, 0.9] and set(comp.compiled) == {"yes"}
    # the capture experiment decides where it covers the M
    cap = moe_tables.capture_table(_synthetic_captures()).set_index("layout")
    assert cap.loc["contiguous", "fused vs unfused across captures"] == "tie (capture medians overlap)"
    assert cap.loc["masked", "fused vs unfused across captures"] == "fused faster by 2.0-4.0 us"
    assert cap.loc["contiguous", "widest capture spread us"] == 2.5
    lines = moe_tables.conclusions(doc, _synthetic_captures())
    assert "contiguous: the fusion does not pay (tie or loss) at M = [8]" in lines, lines
    assert "masked: the fused layer is faster than the unfused one at every M measured" in lines, lines
    assert any(s.startswith("masked: the saving includes skipped work") for s in lines), lines
    for draw, stem in ((moe_figures.draw_moe_layer, "moe_layer_x"), (moe_figures.draw_moe_error, "moe_error_x")):
        paths = draw(doc, tmp_path / stem)
        assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)


def test_moe_layer_figure_shows_times_in_us_and_the_ratios_around_one():
    """The layer figure: a column per layout; on top each variant's layer time in us, below the two
    verdict ratios with their spread and the line at 1.0 they are read against."""
    from inkling_workbook.publish import moe_figures

    doc = {"layouts": list(ml.LAYOUTS), "variants": list(ml.VARIANTS), "shape": SHAPE,
           "provenance": {"device": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0"}, "rows": []}  # fmt: skip
    for layout in ml.LAYOUTS:
        for M in (16, 4096):
            for v, us in (("bf16", 100.0), ("fp8_unfused", 105.0), ("fp8_fused", 104.0)):
                us *= M / 16
                doc["rows"].append({"M": M, "layout": layout, "kind": "layer", "variant": v, "median_us": us,
                                    "lo_us": us * 0.999, "hi_us": us * 1.001})  # fmt: skip
    fig = moe_figures.draw_moe_layer(doc)
    top, bottom = fig.axes[0], fig.axes[2]
    assert len(fig.axes) == 4 and "us" in top.get_ylabel() and "ratio" in bottom.get_ylabel()
    assert any(set(ln.get_ydata()) == {1.0} for ln in bottom.get_lines())  # the line at 1.0
    texts = {t.get_text() for t in bottom.texts}
    assert {f"{104 / 105:.3f}", f"{104 / 100:.3f}"} <= texts  # each ratio printed beside its marker
    assert "NVIDIA H200" in " ".join(t.get_text() for t in fig.texts)  # the footer names the GPU
    lo = moe_figures.moe_ratio(doc["rows"][2], doc["rows"][1])
    assert lo[1] < lo[0] < lo[2]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_combine_kernel_is_the_weighted_sum(layer, tokens, device):
    """The Triton combine against the formula in torch ops (fp32 products summed in slot order,
    one bf16 rounding), into a NaN-poisoned output: bit for bit under the interpreter; within one
    bf16 rounding compiled (the GPU may contract a product and the sum into an FMA)."""
    gen = torch.Generator().manual_seed(9)
    ids, w = ml.route(tokens.to(device), ml.make_layer(**SHAPE, device=device, seed=3))
    plan = ml.make_plan(ids, layer.E)
    g = ml.group(ids, layer.E)
    for layout, shape in (("contiguous", (plan.rows, 384)), ("masked", (layer.E, plan.T, 384))):
        y = torch.randn(shape, generator=gen).to(torch.bfloat16).to(device)
        out = torch.full((M, 384), float("nan"), dtype=torch.bfloat16, device=device)
        got = ml.combine(y, g, w, layout, out=out)
        rows = y[g.expert, g.rank] if layout == "masked" else y[g.row]
        want = (rows.view(M, layer.k, -1).float() * w[:, :, None]).sum(dim=1)
        if device.type == "cpu":
            assert torch.equal(got.view(torch.int16), want.to(torch.bfloat16).view(torch.int16)), layout
        else:
            assert ml.rel_error(got, want.double()) <= ml.U_BF16, layout


class _StandInTimer:
    """The timing code's interface (``GraphTimer``, ``time_interleaved``, ``warm_clocks``) with
    no GPU: each "graph" runs its call twice and reports made-up replay times."""

    class GraphTimer:
        def __init__(self, calls):
            self.calls, self.reps = calls, 100
            for c in calls * 2:
                c()

        def close(self):
            pass

    @staticmethod
    def time_interleaved(timers, passes):
        from inkling_workbook.measure.timing import Timing

        return {k: Timing.from_passes([[1.0 + i, 1.1 + i]] * passes, t.reps) for i, (k, t) in enumerate(timers.items())}

    @staticmethod
    def warm_clocks():
        return {}


def test_the_timing_code_runs_with_a_stand_in_timer(tmp_path):
    """The benchmark's timing and compile code on the CPU: every layer, activation and compiled
    layer gets a row (the compile with the aot_eager backend), and a record the tables read."""
    doc = moe_record.run(tmp_path, Ms=(8,), device="cpu", progress=False, timer=_StandInTimer, compile_Ms=(8,),
                 compile_backend="aot_eager")  # fmt: skip
    kinds = {(r["layout"], r["kind"], r["variant"]) for r in doc["rows"]}
    want = {(lo, kind, v) for lo in ml.LAYOUTS for kind in ("layer", "activation", "gemm2") for v in ml.VARIANTS}
    want |= {(lo, "gemm1", "bf16") for lo in ml.LAYOUTS}
    want |= {("contiguous", "compiled", v) for v in ("bf16", "fp8_fused")}
    assert kinds == want and doc["errors"] == []
    assert [(c["variant"], c["ok"], c["mode"]) for c in doc["compile"]] == [
        (v, True, "torch.compile(fullgraph=True, dynamic=True)") for v in ("bf16", "fp8_fused")
    ]
    assert all(c["rel_err"] <= ml.error_bound(c["variant"]) for c in doc["compile"])
    assert (tmp_path / "data" / "moe_layer_cpu.csv").exists()
    assert len(moe_tables.timing_table(doc)) == len(ml.LAYOUTS) and moe_tables.conclusions(doc)

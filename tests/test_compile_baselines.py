"""The torch.compile baselines compiled fresh (issue 40), on the CPU: the fresh-compile helper
really compiles again (dynamo's graph counter, inductor's FX graph cache), the compile columns
as the sweeps declare them, and the replay-count rule every planned row must meet."""

from __future__ import annotations

import pytest
import torch
from conftest import gpu_only
from torch._dynamo.utils import counters

from inkling_workbook.measure import compile_baselines as cb
from inkling_workbook.measure import timing


def _tiny(x):
    return torch.nn.functional.silu(x) * 2.0


def test_compile_fresh_compiles_again_after_a_reset():
    """Each fresh compile of the same function is a graph of its own; the same compile object
    called again is not (the control: a counter that could not move would fail the first part)."""
    x = torch.randn(8, 16)
    cb.new_state()
    before = counters["stats"]["unique_graphs"]
    first = cb.compile_fresh(_tiny, [((x,), ())], backend="eager")
    assert first.graphs == 1 and counters["stats"]["unique_graphs"] == before + 1
    first.fn(x)  # the same object, same shape: served by its guards, no graph
    assert counters["stats"]["unique_graphs"] == before + 1
    cb.new_state()
    second = cb.compile_fresh(_tiny, [((x,), ())], backend="eager")
    assert second.graphs == 1 and counters["stats"]["unique_graphs"] == before + 2
    assert first.cache_dir and second.cache_dir != first.cache_dir  # a new inductor cache dir each time
    assert torch.equal(second.fn(x), _tiny(x))


def test_compile_fresh_marks_the_dynamic_dims_and_compiles_the_timed_shape_inside():
    """An M-dynamic column: compiled at its compile size with M marked, then called at the timed
    size inside the same fresh state: one graph serves both (no compile left for the timer)."""
    big, small = torch.randn(64, 16), torch.randn(5, 16)
    cb.new_state()
    c = cb.compile_fresh(_tiny, [((big,), (0,)), ((small,), (0,))], dynamic=None, backend="eager", tag="dyn")
    assert c.graphs == 1
    n = counters["stats"]["unique_graphs"]
    torch._dynamo.mark_dynamic(small, 0)
    c.fn(small)
    assert counters["stats"]["unique_graphs"] == n


def test_each_column_compiles_its_own_code_object():
    f1, f2 = cb.own_code(_tiny, "default"), cb.own_code(_tiny, "max_autotune")
    assert f1.__code__ is not f2.__code__ and f1.__code__.co_name == "_tiny_default"
    x = torch.randn(3, 4)
    assert torch.equal(f1(x), _tiny(x)) and torch.equal(f2(x), _tiny(x))


def test_compile_fresh_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        cb.compile_fresh(_tiny, [((torch.randn(2),), ())], mode="reduce-overhead", backend="eager")
    assert "CUDA graphs off" in cb.mode_config("max_autotune") and "fresh" in cb.mode_config("default")


def test_inductor_fresh_cache_misses_where_a_plain_recompile_hits():
    """With inductor on the CPU: after a reset, compiling the same graph again outside a fresh
    cache is served from inductor's FX graph cache (a hit); :func:`compile_fresh` misses it,
    so its kernels and their configs are made anew."""
    import torch._inductor.config as ic

    if not ic.fx_graph_cache:
        pytest.skip("this torch has inductor's FX graph cache off: nothing to miss")
    x = torch.randn(32, 64)

    def run_plain():
        torch._dynamo.reset()
        return torch.compile(_tiny)(x)

    from torch._inductor.utils import fresh_cache

    with fresh_cache():  # a private cache dir for the control, so the test leaves no files behind
        run_plain()
        hits = counters["inductor"]["fxgraph_cache_hit"]
        run_plain()
        assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1  # the control: a plain recompile hits
        hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
        cb.new_state()
        c = cb.compile_fresh(_tiny, [((x,), ())])
    assert counters["inductor"]["fxgraph_cache_hit"] == hits
    assert counters["inductor"]["fxgraph_cache_miss"] == misses + 1 and c.graphs == 1
    assert torch.allclose(c.fn(x), _tiny(x))


# ---- the replay-count rule -------------------------------------------------------------------


@pytest.mark.parametrize("per_call", [0.3, 0.55, 0.9, 1.0, 1.7, 9.99, 10.0, 11.0, 207.0, 450.0, 5000.0])
@pytest.mark.parametrize("sets", [1, 2, 7, 126, 4096])
def test_planned_reps_meet_the_rule(per_call, sets):
    reps = timing.planned_reps(per_call, sets)
    assert reps % sets == 0
    assert timing.meets_replay_rule(reps, per_call)
    assert reps * per_call >= timing.REPLAY_MARGIN * timing.MIN_REPLAY_US or reps >= timing.MAX_CALLS
    # not more than needed: one rotation fewer would miss the margin or the 100 calls
    fewer = reps - sets
    assert fewer < timing.MIN_CALLS or fewer * per_call < timing.REPLAY_MARGIN * timing.MIN_REPLAY_US


def test_meets_replay_rule_refuses_short_or_few():
    assert not timing.meets_replay_rule(99, 20.0)  # 1.98 ms but 99 calls
    assert not timing.meets_replay_rule(900, 1.0)  # 900 calls, 0.9 ms
    assert timing.meets_replay_rule(100, 10.0) and timing.meets_replay_rule(1000, 1.0)


def _fake_measure(true_us: float, probe_bias: float, log: list):
    """A graph of ``count`` calls: the probe (the first capture) reads ``probe_bias`` x slower
    per call, as the capture's ramp makes it on the GPU; later graphs read ``true_us``."""

    def measure(count):
        log.append(count)
        return true_us * (probe_bias if len(log) == 1 else 1.0)

    return measure


@pytest.mark.parametrize("true_us", [0.6, 1.0, 1.15, 3.0, 50.0, 207.0])
@pytest.mark.parametrize("bias", [1.0, 1.3, 2.5])
@pytest.mark.parametrize("sets", [1, 3, 64])
def test_size_graph_ends_at_a_replay_of_at_least_1_ms(true_us, bias, sets):
    log: list = []
    reps = timing.size_graph(_fake_measure(true_us, bias, log), sets)
    assert reps == log[-1] and reps % sets == 0  # the last graph captured is the one timed
    assert timing.meets_replay_rule(reps, true_us), (reps, true_us)
    assert len(log) <= 1 + timing.SIZE_TRIES


def test_size_graph_resizes_when_the_replay_falls_short():
    """The graph sized from a probe that read 1.3x too slow holds too few calls: measured again,
    it is resized (the old method's single 1.1x correction let 894-999 us replays through)."""
    log: list = []
    calls = iter([1.3, 1.0, 0.8, 0.8])  # per call: probe, first graph, then faster still

    def measure(count):
        log.append(count)
        return next(calls)

    reps = timing.size_graph(measure, 1)
    assert log[0] == timing.MIN_CALLS and len(log) >= 3
    assert timing.meets_replay_rule(reps, 0.8)


def _predicted_us(nbytes: int, launch_us: float = 0.6, tbps: float = 4.0) -> float:
    """A per-call time for planning: the launch floor or the bytes at the streaming ceiling."""
    return max(launch_us, nbytes / (tbps * 1e6))


def test_every_planned_sweep_row_meets_the_rule():
    """Every silu shape (warm, and cold with its buffer sets) and every NVFP4 and FP8 case, at the
    time the bytes predict and at 3x it (a slower baseline): >= 100 calls and >= 1 ms a replay."""
    from inkling_workbook.measure import bench, fp8_cases, nvfp4_sweep

    l2 = 60 * 2**20
    rows = [(bench.silu_bytes(s.M, s.N, s.weighted)) for s in bench.shapes()]
    rows += [nvfp4_sweep.nvfp4_bytes(M, N, True, M + 128 * 8) for M in nvfp4_sweep.NVFP4_M for N in nvfp4_sweep.NVFP4_N]
    rows += [fp8_cases.fp8_bytes(c) for c in fp8_cases.fp8_cases()]
    checked = 0
    for nbytes in rows:
        for sets in (1, max(2, -(-timing.COLD_FACTOR * l2 // nbytes))):
            for slow in (1.0, 3.0):
                per_call = _predicted_us(nbytes) * slow
                reps = timing.planned_reps(per_call, sets)
                assert timing.meets_replay_rule(reps, per_call), (nbytes, sets, per_call, reps)
                checked += 1
    assert checked == 4 * len(rows) > 400


# ---- the sweeps' compile columns, wired (CPU, dynamo's eager backend: graphs counted, no inductor) ----


@pytest.fixture
def eager_compiles(monkeypatch):
    """Every fresh compile of the sweeps through dynamo's eager backend (fast on the CPU), with
    the calls logged: (function name, mode, dynamic, first-call shapes); new states counted."""
    log, states = [], []
    real = cb.compile_fresh

    def compile_fresh(fn, calls, *, mode="default", dynamic=False, backend="inductor", tag=None, pdl=False):
        log.append((fn.__name__, mode + ("+pdl" if pdl else ""), dynamic, [tuple(a[0].shape) for a, _ in calls]))
        return real(fn, calls, mode=mode, dynamic=dynamic, backend="eager", tag=tag, pdl=pdl)

    real_state = cb.new_state
    monkeypatch.setattr(cb, "compile_fresh", compile_fresh)
    monkeypatch.setattr(cb, "new_state", lambda: states.append(1) or real_state())
    return log, states


def test_silu_compile_columns_fresh_per_shape(monkeypatch, eager_compiles):
    from inkling_kernels.reference import silu_and_mul_ref
    from inkling_workbook.measure import bench

    log, states = eager_compiles
    gen = torch.Generator().manual_seed(0)

    def buffers(shape, sets):
        return [(torch.randn((shape.M, 2 * shape.N), generator=gen).bfloat16(),
                 torch.rand(shape.M, generator=gen) if shape.weighted else None) for _ in range(sets)]  # fmt: skip

    monkeypatch.setattr(bench, "_buffers", buffers)
    monkeypatch.setattr(bench, "DYNAMIC_M_COMPILE_AT", 64)  # the compile size, small on the CPU
    named, other = bench.Shape(384, 1024, True, True, "source"), bench.Shape(16, 256, False, False, "decode")
    assert (
        bench._shape_key(named) in bench.MAX_AUTOTUNE_SHAPES
        and bench._shape_key(other) not in bench.MAX_AUTOTUNE_SHAPES
    )
    for shape in (named, other):
        log.clear()
        info: dict = {}
        impls = bench.compile_implementations(shape, info=info)
        # max-autotune and compile with inductor's PDL on the headline shapes only
        want = ["compile_static", "compile_static_max_autotune", "compile_static_pdl", "compile_dynamic_m"]
        modes = [("_ref_for_static_compile", "default"), ("_ref_for_static_compile", "max_autotune"),
                 ("_ref_for_static_compile", "default+pdl"), ("_ref_for_dynamic_m_compile", "default")]  # fmt: skip
        if shape is other:
            want = [want[0], want[3]]
            modes = [modes[0], modes[3]]
        assert list(impls) == want and list(info) == want  # the static columns first, M-dynamic last
        shape2 = (shape.M, 2 * shape.N)
        assert [(name, mode) for name, mode, _, _ in log] == modes
        assert log[-1][3] == [(64, 2 * shape.N), shape2]  # compiled at the large M, then at the shape
        assert all(i["graphs"] >= 1 for i in info.values())
        for key, (fn, config) in impls.items():
            assert config == bench.COLUMNS[key].config and "fresh compile per shape" in config
            x, w = buffers(shape, 1)[0]
            assert torch.equal(fn(x, w), silu_and_mul_ref(x, w, interleaved=shape.interleaved)), key
    assert len(states) == 2  # one fresh state per shape
    assert bench.compile_implementations(other, keys=[]) == {} and len(states) == 2


def test_nvfp4_compile_columns_fresh_per_shape(eager_compiles):
    from inkling_workbook.measure import nvfp4_sweep

    log, states = eager_compiles
    M, N = 128, 3072
    assert (M, N) in nvfp4_sweep.NVFP4_MAX_AUTOTUNE and (1024, 1536) not in nvfp4_sweep.NVFP4_MAX_AUTOTUNE
    gateup = torch.randn(M, 2 * N).bfloat16()
    row_gs = torch.full((M, 1), 100.0)
    first = {"gateup": gateup, "row_gs": row_gs}
    info: dict = {}
    fns = nvfp4_sweep._compile_columns(M, N, first, info)
    assert list(fns) == list(info) == ["compile_static", "compile_static_max_autotune"] and len(states) == 1
    assert [m for _, m, _, _ in log] == ["default", "max_autotune"]
    want = nvfp4_sweep._nvfp4_fused_ref(gateup, row_gs)
    for fn in fns.values():
        assert all(torch.equal(a, b) for a, b in zip(fn(gateup, row_gs), want))
    assert list(nvfp4_sweep._compile_columns(M, N, first, {}, max_autotune=False)) == ["compile_static"]
    small = {"gateup": torch.randn(1024, 3072).bfloat16(), "row_gs": torch.full((1024, 1), 100.0)}
    assert list(nvfp4_sweep._compile_columns(1024, 1536, small, {})) == ["compile_static"] and len(states) == 3


def test_compile_columns_are_declared_with_their_mode_and_pairing():
    """Every sweep's compile columns: torch's version, the mode in the label, no PDL, paired with the
    port without PDL of their op; the families the tables take the fastest of are the declared keys."""
    from inkling_workbook.measure import bench, fp8_anchors, nvfp4_sweep, pairing
    from inkling_workbook.publish import style

    sweeps = {"silu_and_mul": bench.COLUMNS, "nvfp4": nvfp4_sweep.NVFP4_COLUMNS, "fp8": fp8_anchors.FP8_COLUMNS}
    ports = {"silu_and_mul": "triton", "nvfp4": "fused_no_pdl", "fp8": "fused_no_pdl"}
    for sweep, keys in pairing.COMPILE_FAMILIES.items():
        cols = sweeps[sweep]
        for key in keys:
            c = cols[key]
            assert c.project == "torch" and c.version == torch.__version__.split("+")[0] and not c.pdl
            assert pairing.paired_port(cols, key) == ports[sweep]
            assert "fresh compile per shape" in c.label and "no PDL" in c.label
            mat = key.endswith("max_autotune")
            assert ('mode="max-autotune-no-cudagraphs"' in c.label) == mat
            assert ("CUDA graphs off" in c.label) == mat and ('mode="default"' in c.label) != mat
    assert style.BEST["compile_best"] == pairing.COMPILE_FAMILIES["silu_and_mul"]
    assert style.COMPILE_BEST == {k: v for k, v in pairing.COMPILE_FAMILIES.items() if k != "silu_and_mul"}
    assert set(pairing.COMPILE_FAMILIES["silu_and_mul"]) <= set(bench.IMPLS) and all(
        k in style.LABELS for keys in pairing.COMPILE_FAMILIES.values() for k in keys
    )


def test_tables_take_the_fastest_compile_of_every_mode_timed():
    """``speedup_table``'s best compile: max-autotune where the sweep timed it (and faster), else
    the faster of static and M-dynamic; the headline's pick the same."""
    import pandas as pd

    from inkling_workbook.publish import results, speedup, style

    def row(M, impl, us):
        return {"op": "silu_and_mul", "group": "source", "M": M, "N": 1024, "layout": "il", "weighted": False,
                "impl": impl, "l2": "warm", "median_us": us, "lo_us": us * 0.99, "hi_us": us * 1.01}  # fmt: skip

    df = pd.DataFrame([
        row(6, "triton", 1.0), row(6, "helion_sm90", 1.2), row(6, "helion_fixed", 1.3),
        row(6, "compile_static", 1.5), row(6, "compile_dynamic_m", 1.4), row(6, "compile_static_max_autotune", 0.9),
        row(8, "triton", 1.0), row(8, "helion_sm90", 1.2), row(8, "helion_fixed", 1.1),
        row(8, "compile_static", 1.3), row(8, "compile_dynamic_m", 1.25),
    ])  # fmt: skip
    wide = speedup.speedup_table(df).set_index("M")
    assert wide.loc[6, "compile_best"] == 0.9 and wide.loc[6, "compile_best_lo"] == pytest.approx(0.891)
    assert wide.loc[8, "compile_best"] == 1.25 and wide.loc[8, "helion_best"] == 1.1
    assert wide.loc[6, "vs_compile_best"] == pytest.approx(0.9) and not wide.loc[6, "tie_compile_best"]
    assert results._best_compile(df[df.M == 6]).impl == "compile_static_max_autotune"
    assert results._best_compile(df[df.M == 8]).impl == "compile_dynamic_m"
    # an older record without the max-autotune column: the faster of the two, as before
    old = speedup.speedup_table(df[df.impl != "compile_static_max_autotune"]).set_index("M")
    assert old.loc[6, "compile_best"] == 1.4
    fused = pd.DataFrame({"median_us": [3.0, 2.0, 1.0]}, index=["torch_compile_static", "fused", "x"])
    assert style.fastest(fused, style.COMPILE_BEST["fp8"]) == "torch_compile_static"
    fused.loc["torch_compile_static_max_autotune"] = 2.5
    assert style.fastest(fused, style.COMPILE_BEST["fp8"]) == "torch_compile_static_max_autotune"


# ---- on the GPU (skipped on the CPU) ---------------------------------------------------------


@gpu_only
def test_gpu_silu_compile_columns_are_inductor_compiles_from_empty_caches():
    """On the GPU with inductor: each compile column of a named shape misses inductor's FX graph
    cache (its kernels made anew), max-autotune included, and computes the reference's values."""
    from inkling_kernels.reference import silu_and_mul_ref
    from inkling_workbook.measure import bench

    shape = bench.Shape(6, 1024, True, False, "source")

    def made():  # graphs inductor compiled rather than loaded from its cache
        return counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_bypass"]

    before, hits = made(), counters["inductor"]["fxgraph_cache_hit"]
    info: dict = {}
    impls = bench.compile_implementations(shape, info=info)
    assert list(impls) == ["compile_static", "compile_static_max_autotune", "compile_dynamic_m"]
    assert counters["inductor"]["fxgraph_cache_hit"] == hits and made() >= before + 3
    x, w = bench._buffers(shape, 1)[0]
    want = silu_and_mul_ref(x, w, interleaved=True)
    for key, (fn, _) in impls.items():
        got = fn(x, w)
        assert got.shape == want.shape and (got.float() - want.float()).abs().max() <= 2**-7 * want.abs().max(), key
        assert info[key]["compile_s"] > 0
    print({k: (v["compile_s"], v["best_configs"]) for k, v in info.items()})


@gpu_only
@pytest.mark.timing
def test_gpu_graph_timer_meets_the_replay_rule():
    """A decode-sized call and a large one, sized by the method: >= 100 calls and a timed replay
    of >= 1 ms each (alone on the GPU: the job's timing step)."""
    from inkling_kernels.silu_and_mul import silu_and_mul

    for M, N in ((1, 768), (49152, 3072)):
        x = torch.randn(M, 2 * N, device="cuda", dtype=torch.bfloat16)
        t = timing.graph_time([lambda x=x: silu_and_mul(x)])
        print(M, N, t.reps, t.median_us, t.reps * t.median_us)
        assert timing.meets_replay_rule(t.reps, t.median_us), (M, N, t.reps, t.median_us)


def test_max_autotune_budget_skips_and_records(monkeypatch, eager_compiles):
    """Past the budget no max-autotune compile starts: the silu column is left out and the shape
    recorded; no budget, no skip."""
    from inkling_workbook.measure import bench

    monkeypatch.setattr(bench, "_buffers", lambda shape, sets: [(torch.randn(shape.M, 2 * shape.N).bfloat16(), None)])
    monkeypatch.setattr(bench, "DYNAMIC_M_COMPILE_AT", 64)
    shape = bench.Shape(6, 1024, True, False, "source")
    try:
        cb.set_budget(0.0)
        # past the budget neither max-autotune nor the PDL compile starts
        assert list(bench.compile_implementations(shape)) == ["compile_static", "compile_dynamic_m"]
        assert cb.budget_meta() == {"max_autotune_budget_s": 0.0, "max_autotune_skipped_for_budget": [shape.label]}
        assert cb.record_meta({})["max_autotune_skipped_for_budget"] == [shape.label]
    finally:
        cb.set_budget(None)
    assert {"compile_static_max_autotune", "compile_static_pdl"} <= set(bench.compile_implementations(shape))
    assert cb.budget_meta()["max_autotune_skipped_for_budget"] == []


def test_silu_sweep_rows_carry_the_compile_columns(monkeypatch, eager_compiles):
    """``bench_silu`` on the CPU with the compiles real (eager backend) and the timer a stand-in:
    each compile column once per shape, max-autotune on its named shape only, the seconds in the
    rows and in ``compile_info``, every compile row paired with the port without PDL."""
    from test_anchor_columns import _fake_time_calls

    from inkling_workbook.measure import anchors, bench, provenance

    monkeypatch.setattr(bench.helion_original, "available", lambda: True)
    monkeypatch.setattr(bench, "time_calls", _fake_time_calls)
    monkeypatch.setattr(bench, "l2_bytes", lambda: 50 * 2**20)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(anchors, "manifest", lambda dist, root=None: None)  # anchors absent: skipped
    monkeypatch.setattr(bench, "DYNAMIC_M_COMPILE_AT", 64)
    monkeypatch.setattr(bench, "_buffers", lambda s, n: [(torch.randn(s.M, 2 * s.N).bfloat16(), None)] * n)
    log, states = eager_compiles
    shapes = [bench.Shape(6, 1024, True, False, "source"), bench.Shape(2, 256, False, False, "decode")]
    info: dict = {}
    rows = bench.bench_silu(shapes, cold=False, ceiling_tbps=4.0, progress=False, compile_info=info)
    comp = [r for r in rows if r["impl"].startswith("compile_")]
    assert [(r["M"], r["impl"]) for r in comp] == [
        (6, "compile_static"), (6, "compile_static_max_autotune"), (6, "compile_static_pdl"), (6, "compile_dynamic_m"),
        (2, "compile_static"), (2, "compile_dynamic_m"),
    ]  # fmt: skip
    assert len(states) == 2 and len(log) == 6 and list(info) == [s.label for s in shapes]
    for r in comp:
        assert r["compile_s"] == info[f"M={r['M']} N={r['N']} {r['layout']}"][r["impl"]]["compile_s"] >= 0
        if r["impl"] == "compile_static_pdl":  # inductor's PDL on: paired with the port with PDL (1.0 us)
            assert r["paired_port"] == "triton_pdl" and r["speedup_of_paired_port"] == 2.0 and r["pdl"]
        else:
            assert r["paired_port"] == "triton" and r["speedup_of_paired_port"] == round(2.0 / 1.1, 4)
        assert r["column"] == bench.COLUMNS[r["impl"]].label
    quick = bench.bench_silu(shapes[:1], cold=False, ceiling_tbps=4.0, progress=False, max_autotune=False)
    assert not {"compile_static_max_autotune", "compile_static_pdl"} & {r["impl"] for r in quick}


def test_fp8_cases_past_the_budget_lose_their_max_autotune_column():
    from inkling_workbook.measure import fp8_cases, fp8_sweep

    cases = {c["name"]: c for c in fp8_cases.fp8_cases()}
    named, other = cases["M49152_N3072_nil"], cases["M1024_N1536_nil"]
    try:
        cb.set_budget(None)
        assert fp8_sweep._within_budget(named) is named and fp8_cases.has_max_autotune(named)
        cb.set_budget(0.0)
        late = fp8_sweep._within_budget(named)
        assert late["max_autotune_skipped"] and not fp8_cases.has_max_autotune(late) and late["name"] == named["name"]
        assert fp8_sweep._within_budget(other) is other  # no max-autotune column: nothing to skip or record
        assert cb.budget_meta()["max_autotune_skipped_for_budget"] == ["M49152_N3072_nil"]
    finally:
        cb.set_budget(None)


def test_nvfp4_columns_are_checked_for_bytes_before_timing(monkeypatch):
    """``nvfp4_sweep.check_bits`` on one buffer set (the interpreter here): the fused kernel with and
    without PDL writes the unfused path's bytes, a compile column the eager reference's; a column
    that writes other bytes is caught."""
    from inkling_workbook.measure import nvfp4_sweep as S

    M, N = 20, 128
    counts, eo, bo = S._experts(M)
    gateup = torch.randn(M, 2 * N).bfloat16()
    act = torch.empty(M, N, dtype=torch.bfloat16)
    gs = torch.full((S.NVFP4_EXPERTS,), 60.0)
    scales = torch.empty(int(bo[-1]), (N // 16 + 3) // 4 * 4, dtype=torch.uint8)
    out = (torch.empty(M, N // 2, dtype=torch.uint8), scales)
    first = {"gateup": gateup, "act": act, "gs": gs, "row_gs": gs.repeat_interleave(counts)[:, None], "out": out}

    def off_by_one(g, r):
        packed, scales = S._nvfp4_fused_ref(g, r)
        return packed ^ 1, scales

    got = S.check_bits(first, eo, bo, {"compile_static": S._nvfp4_fused_ref, "compile_static_max_autotune": off_by_one})
    assert got == {"unfused": True, "torch_eager": True, "fused": True, "fused_no_pdl": True,
                   "compile_static": True, "compile_static_max_autotune": False}  # fmt: skip
    real = S.silu_and_mul_nvfp4_quant

    def wrong_without_pdl(*a, enable_pdl=True, **k):
        real(*a, enable_pdl=enable_pdl, **k)
        if not enable_pdl:
            k["out"][1][0, 0] ^= 0x10  # one scale byte off

    monkeypatch.setattr(S, "silu_and_mul_nvfp4_quant", wrong_without_pdl)
    got = S.check_bits(first, eo, bo, {})
    assert got["fused"] and not got["fused_no_pdl"]


def test_compile_with_inductors_pdl_sets_it_only_while_compiling(monkeypatch):
    """``compile_fresh(pdl=True)``: inductor's ``triton.enable_pdl`` is on while the column's code
    is generated (read at code generation) and back to its default after; a torch without the
    setting is refused by name."""
    import torch._inductor.config as ic

    seen = []

    def tiny(x):
        seen.append(ic.triton.enable_pdl)
        return x * 2

    before = ic.triton.enable_pdl
    c = cb.compile_fresh(tiny, [((torch.randn(4),), ())], backend="eager", pdl=True)
    assert (
        seen
        and all(seen)
        and ic.triton.enable_pdl == before
        and torch.equal(c.fn(torch.ones(4)), torch.full((4,), 2.0))
    )

    assert cb.inductor_has_pdl()
    monkeypatch.setattr(cb, "inductor_has_pdl", lambda: False)  # a torch whose inductor has no PDL setting
    with pytest.raises(RuntimeError, match="enable_pdl"):
        cb.compile_fresh(tiny, [((torch.randn(4),), ())], backend="eager", pdl=True)


@pytest.mark.parametrize("port", ["silu_mul_fp8", "rms_norm_quant"])
def test_the_ports_sweeps_compile_fresh_per_shape(port, eager_compiles):
    """The second and third ports' torch.compile column: compiled fresh for each shape (a new
    dynamo state and compile object, its first call inside empty caches), shared by the same
    shape's warm and cold timings, never carried to the next shape."""
    import importlib

    B = importlib.import_module(f"inkling_workbook.ports.{port}.bench")
    log, states = eager_compiles
    B._compiled.clear()
    x = torch.randn(4, 64).bfloat16()
    args = (x, torch.tensor([0.5])) if port == "silu_mul_fp8" else (x, torch.randn(64).bfloat16(), None, None)
    first = B.compiled_formula((4, 32), args)
    assert B.compiled_formula((4, 32), args) is first and len(states) == 1 and len(log) == 1
    assert log[0][0] == "formula" and log[0][3] == [(4, 64)]  # its first call at the shape, in the fresh cache
    assert B.compiled_formula((8, 32), args) is not first and len(states) == 2 and len(log) == 2


def test_the_bit_check_before_timing_leaves_every_compiled_column_as_compiled(monkeypatch, eager_compiles):
    """The silu sweep's bit check calls every column once before timing. The M-dynamic column
    marks the tensors it is given dynamic; called on the timed buffers, it would make every
    static column compile again when the timing's warm-up calls it on them (an M-dynamic graph,
    outside its fresh cache). The check calls them on copies: no graph is compiled after it."""
    from torch._dynamo.utils import counters

    from inkling_workbook.measure import bench

    monkeypatch.setattr(bench, "_buffers", lambda s, n: [(torch.randn(s.M, 2 * s.N).bfloat16(), None)] * n)
    monkeypatch.setattr(bench, "DYNAMIC_M_COMPILE_AT", 64)
    shape = bench.Shape(6, 1024, True, False, "source")
    impls = bench.compile_implementations(shape)
    assert {"compile_static", "compile_static_pdl", "compile_dynamic_m"} <= set(impls)
    ((x, w),) = bench._buffers(shape, 1)
    graphs = counters["stats"]["unique_graphs"]
    bits = bench.check_anchor_bits(shape, impls, x, w)
    assert set(bits) == set(impls)
    for fn, _ in impls.values():  # the timing's warm-up on the timed buffers, in the sweep's order
        fn(x, w)
    assert counters["stats"]["unique_graphs"] == graphs
